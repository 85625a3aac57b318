// `kiln conformance [DIR] [settings options]`: runs ONNX's operator test suite (one folder per case:
// model.onnx and test_data_set_*/{input,output}_N.pb) and compares kiln's outputs with ONNX's within
// ONNX's own tolerances, under the settings given (e.g. --disable onednn --disable blas runs it on the
// native kernels alone). A case is skipped only when its model uses an op kiln does not implement.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "graph/onnx_import.h"
#include "graph/session.h"
#include "ops/op_schema.h"
#include "ops/random.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/setting_options.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDefaultSuite = "/usr/share/libonnx-testdata/data/node";
// onnx/backend/test: np.testing.assert_allclose(ref, out, rtol=1e-3, atol=1e-7) unless a case says otherwise.
constexpr double kRelativeTolerance = 1e-3;
constexpr double kAbsoluteTolerance = 1e-7;

enum class Outcome { passed, failed, skipped };

struct CaseResult {
  Outcome outcome = Outcome::passed;
  std::string detail;
  std::set<std::string> ops;
};

// Every op type used by `graph`, including nested graphs, as "Op" or "domain:Op".
void collect_ops(const Graph& graph, std::set<std::string>& ops) {
  for (const Node& node : graph.nodes) {
    ops.insert(is_default_domain(node.domain) ? node.op_type : node.domain + ":" + node.op_type);
    for (const auto& [name, attribute] : node.attributes.all()) {
      if (attribute.g) collect_ops(*attribute.g, ops);
      for (const auto& subgraph : attribute.graphs) collect_ops(*subgraph, ops);
    }
  }
}

// ONNX's test data stores bfloat16 tensors as UINT16 (numpy has no bfloat16); read them as what
// the model declares.
Tensor as_declared(Tensor tensor, DType declared) {
  if (tensor.dtype() == DType::u16 && declared == DType::bf16) {
    return Tensor::wrap(tensor.raw_data(), DType::bf16, tensor.shape()).clone();
  }
  return tensor;
}

// Empty when equal within tolerance, otherwise what differs.
std::string compare(const std::string& name, const Tensor& expected, const Tensor& actual) {
  if (expected.defined() != actual.defined()) {
    return str_cat("output '", name, "' is ", actual.defined() ? "a value" : "an empty optional",
                   ", expected ", expected.defined() ? "a value" : "an empty optional");
  }
  if (!expected.defined()) return {};
  if (expected.is_sequence() != actual.is_sequence()) {
    return str_cat("output '", name, "' is a ", actual.is_sequence() ? "sequence" : "tensor", ", expected a ",
                   expected.is_sequence() ? "sequence" : "tensor");
  }
  if (expected.is_sequence()) {
    if (expected.elements().size() != actual.elements().size()) {
      return str_cat("output '", name, "' has ", actual.elements().size(), " elements, expected ",
                     expected.elements().size());
    }
    for (size_t i = 0; i < expected.elements().size(); ++i) {
      std::string difference =
          compare(str_cat(name, "[", i, "]"), expected.elements()[i], actual.elements()[i]);
      if (!difference.empty()) return difference;
    }
    return {};
  }
  if (expected.dtype() != actual.dtype()) {
    return str_cat("output '", name, "' is ", dtype_name(actual.dtype()), ", expected ", dtype_name(expected.dtype()));
  }
  if (expected.shape() != actual.shape()) {
    return str_cat("output '", name, "' has shape ", shape_to_string(actual.shape()), ", expected ",
                   shape_to_string(expected.shape()));
  }
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double want = expected.double_at(i);
    const double got = actual.double_at(i);
    if (std::isnan(want) && std::isnan(got)) continue;
    if (is_floating(expected.dtype())) {
      if (std::isinf(want) && want == got) continue;
      if (!(std::fabs(got - want) <= kAbsoluteTolerance + kRelativeTolerance * std::fabs(want))) {
        return str_cat("output '", name, "'[", i, "] = ", got, ", expected ", want);
      }
    } else if (expected.int_at(i) != actual.int_at(i) || want != got) {
      return str_cat("output '", name, "'[", i, "] = ", got, ", expected ", want);
    }
  }
  return {};
}

CaseResult run_case(const fs::path& folder) {
  CaseResult result;
  try {
    Model model;
    try {
      model = load_onnx_model(folder / "model.onnx");
    } catch (const Error& error) {
      // Valid models using what kiln does not implement (an opset outside 7..17, STRING tensors)
      // are skipped with the reason; malformed ones fail.
      if (error.kind() != ErrorKind::not_implemented) throw;
      result.outcome = Outcome::skipped;
      result.detail = error.message();
      return result;
    }
    collect_ops(model.graph, result.ops);
    for (const std::string& op : result.ops) {
      if (find_op_schema(op, "") == nullptr) {
        result.outcome = Outcome::skipped;
        result.detail = str_cat("op ", op, " is not implemented");
        return result;
      }
    }
    const std::vector<ValueInfo> declared_outputs = model.graph.outputs;
    Session session(std::move(model));
    std::vector<fs::path> data_sets;
    for (const auto& entry : fs::directory_iterator(folder)) {
      if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0) {
        data_sets.push_back(entry.path());
      }
    }
    std::sort(data_sets.begin(), data_sets.end());
    for (const fs::path& data_set : data_sets) {
      TensorMap inputs;
      for (size_t i = 0; i < session.inputs().size(); ++i) {
        const fs::path file = data_set / str_cat("input_", i, ".pb");
        if (fs::exists(file)) {
          const ValueInfo& input = session.inputs()[i];
          inputs[input.name] = as_declared(load_value_file(file, input.kind, input.dtype), input.dtype);
        }
      }
      const TensorMap outputs = session.run(inputs);
      for (size_t i = 0; i < declared_outputs.size(); ++i) {
        const fs::path file = data_set / str_cat("output_", i, ".pb");
        if (!fs::exists(file)) continue;
        const ValueInfo& output = declared_outputs[i];
        const std::string difference =
            compare(output.name, as_declared(load_value_file(file, output.kind, output.dtype), output.dtype),
                    outputs.at(output.name));
        if (!difference.empty()) {
          result.outcome = Outcome::failed;
          result.detail = str_cat(data_set.filename().string(), ": ", difference);
          return result;
        }
      }
    }
  } catch (const std::exception& error) {
    result.outcome = Outcome::failed;
    result.detail = error.what();
  }
  return result;
}

// "case_name  # reason" per line.
std::map<std::string, std::string> read_known_failures(const std::string& path) {
  std::map<std::string, std::string> cases;
  if (path.empty()) return cases;
  std::ifstream file(path);
  KILN_CHECK(file.good(), invalid_argument, "cannot open known-failures file '", path, "'");
  std::string line;
  while (std::getline(file, line)) {
    const size_t hash = line.find('#');
    const std::string reason = hash == std::string::npos ? "" : line.substr(hash + 1);
    std::string name = line.substr(0, hash);
    name.erase(name.find_last_not_of(" \t") + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    if (!name.empty()) cases[name] = reason;
  }
  return cases;
}

// Whether a case's outputs are random draws (a random op is among its ops). ONNX compares them with
// numpy's draws, which no runtime reproduces, so such cases are listed as known failures; but a draw
// can match by chance (an unseeded Bernoulli of ONNX's ten probabilities does so 0.6% of the time), and
// that pass must not fail the run.
bool draws_random_numbers(const CaseResult& result) {
  return std::any_of(result.ops.begin(), result.ops.end(),
                     [](const std::string& op) { return is_random_op(op); });
}

struct Tally {
  int passed = 0;
  int failed = 0;
  int skipped = 0;
};

}  // namespace

int command_conformance(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> specs = with_setting_options({
      {"filter", true, "SUBSTR: run only cases whose folder name contains SUBSTR"},
      {"show-passes", false, "print every case, not only failures and skips"},
      {"known-failures", true,
       "FILE: cases expected to fail (one name per line, # comments); exit 0 when exactly those fail"},
      {"help", false, "show this help"},
  });
  const ParsedArgs parsed = parse_args("conformance", args, specs);
  if (parsed.has("help")) {
    std::printf("usage: kiln conformance [DIR] [options]\n\nRuns ONNX's node test suite (default %s).\n\n%s",
                kDefaultSuite, options_help(specs).c_str());
    return 0;
  }
  KILN_CHECK(parsed.positional.size() <= 1, invalid_argument, "kiln conformance takes at most one DIR");
  const fs::path suite = parsed.positional.empty() ? fs::path(kDefaultSuite) : fs::path(parsed.positional[0]);
  KILN_CHECK(fs::is_directory(suite), invalid_argument, "conformance suite folder '", suite.string(),
             "' does not exist (install Debian's libonnx-testdata)");
  const std::string filter = parsed.value("filter");
  const std::map<std::string, std::string> known_failures = read_known_failures(parsed.value("known-failures"));
  const bool show_passes = parsed.has("show-passes");
  apply_setting_options(parsed);
  std::printf("plan settings: %s\n", settings_summary().c_str());

  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(suite)) {
    if (entry.is_directory() && fs::exists(entry.path() / "model.onnx") &&
        entry.path().filename().string().find(filter) != std::string::npos) {
      cases.push_back(entry.path());
    }
  }
  std::sort(cases.begin(), cases.end());

  Tally total;
  std::map<std::string, Tally> per_op;
  std::set<std::string> missing_ops;
  int unexpected = 0;
  for (const fs::path& folder : cases) {
    const CaseResult result = run_case(folder);
    const std::string name = folder.filename().string();
    const bool known = known_failures.count(name) != 0;
    if (known && result.outcome == Outcome::failed) {
      std::printf("FAIL (known: %s) %s: %s\n", known_failures.at(name).c_str(), name.c_str(), result.detail.c_str());
    } else if (known && result.outcome == Outcome::passed && draws_random_numbers(result)) {
      std::printf("pass (known failure: %s) %s: its random draws matched ONNX's by chance\n",
                  known_failures.at(name).c_str(), name.c_str());
    } else if (known) {
      std::printf("UNEXPECTED %s %s: listed as a known failure; remove it from the list\n",
                  result.outcome == Outcome::passed ? "pass" : "skip", name.c_str());
      ++unexpected;
    } else if (result.outcome == Outcome::failed) {
      ++unexpected;
    }
    const char* label = result.outcome == Outcome::passed ? "pass" : result.outcome == Outcome::failed ? "FAIL" : "skip";
    if (!known && (show_passes || result.outcome != Outcome::passed)) {
      std::printf("%s %s%s%s\n", label, name.c_str(), result.detail.empty() ? "" : ": ", result.detail.c_str());
    }
    Tally* tallies[] = {&total};
    for (Tally* tally : tallies) {
      (result.outcome == Outcome::passed ? tally->passed
       : result.outcome == Outcome::failed ? tally->failed : tally->skipped)++;
    }
    for (const std::string& op : result.ops) {
      const bool known = find_op_schema(op, "") != nullptr;
      if (!known) missing_ops.insert(op);
      if (!known) continue;
      Tally& tally = per_op[op];
      (result.outcome == Outcome::passed ? tally.passed
       : result.outcome == Outcome::failed ? tally.failed : tally.skipped)++;
    }
  }
  std::printf("\nper implemented op (cases using it: passed / failed / skipped because of another op):\n");
  for (const auto& [op, tally] : per_op) {
    std::printf("  %-28s %4d / %d / %d\n", op.c_str(), tally.passed, tally.failed, tally.skipped);
  }
  std::printf("implemented ops exercised: %zu; ops in the suite kiln does not implement: %zu\n", per_op.size(),
              missing_ops.size());
  if (!known_failures.empty()) {
    std::printf("known failures: %zu listed; unexpected results: %d\n", known_failures.size(), unexpected);
  }
  std::printf("%d passed, %d failed, %d skipped\n", total.passed, total.failed, total.skipped);
  return unexpected == 0 ? 0 : 1;
}

}  // namespace kiln
