// `kiln run MODEL`: one run with inputs from .npy files or seeded random data, outputs to .npy files.
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <span>

#include "core/error.h"
#include "graph/compare.h"
#include "graph/onnx_import.h"
#include "graph/random_input.h"
#include "graph/session.h"
#include "runtime/threads.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/npy.h"
#include "tools/setting_options.h"

namespace kiln {
namespace {

// FNV-1a over the bytes: a short fingerprint to compare runs by eye.
uint32_t fingerprint(const Tensor& tensor) {
  uint32_t hash = 2166136261u;
  const auto* bytes = static_cast<const unsigned char*>(tensor.raw_data());
  for (size_t i = 0; i < tensor.nbytes(); ++i) hash = (hash ^ bytes[i]) * 16777619u;
  return hash;
}

double sum_of(const Tensor& tensor) {
  double sum = 0;
  for (int64_t i = 0; i < tensor.numel(); ++i) sum += tensor.double_at(i);
  return sum;
}

// Output names become file names (without ".npy"); keep them inside the output folder.
std::string file_name_for(const std::string& name) {
  std::string safe = name;
  for (char& c : safe) {
    if (c == '/' || c == '\\' || c == '\0') c = '_';
  }
  if (safe.empty() || safe == "." || safe == "..") safe = "_" + safe;
  return safe;
}

}  // namespace

int command_run(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> specs = with_setting_options({
      {"input", true,
       "NAME=FILE.npy: feed an input from a .npy file (repeatable); a sequence's elements as "
       "NAME[0]=FILE.npy, "
       "NAME[1]=..., an empty optional as NAME=none"},
      {"output-dir", true,
       "DIR: write each output as DIR/<name>.npy (a sequence's elements as <name>.0.npy, ...)"},
      {"dump-intermediates", true,
       "DIR: also write every tensor the model's nodes compute as DIR/<name>.npy ('/' in names as '_'); the "
       "run then keeps them all (no fusion across them)"},
      {"help", false, "show this help"},
  });
  const ParsedArgs parsed = parse_args("run", args, specs);
  if (parsed.has("help")) {
    std::printf(
        "usage: kiln run MODEL [options]\n\nRuns MODEL once. Inputs not given are filled with seeded "
        "random data of the declared shape (symbolic dims = 1).\n\n%s",
        options_help(specs).c_str());
    return 0;
  }
  KILN_CHECK(parsed.positional.size() == 1, invalid_argument, "kiln run expects one MODEL path, got ",
             parsed.positional.size(), " (see kiln run --help)");
  apply_setting_options(parsed);
  get_num_threads();  // reject a malformed KILN_NUM_THREADS/OMP_NUM_THREADS before loading anything

  // Dumping intermediates runs the model with every computed value an output.
  const std::string dump_dir = parsed.value("dump-intermediates");
  std::vector<std::string> intermediates;
  std::unique_ptr<Session> loaded;
  size_t declared_outputs = 0;  // the model's own outputs come first
  if (dump_dir.empty()) {
    loaded = std::make_unique<Session>(parsed.positional[0]);
    declared_outputs = loaded->outputs().size();
  } else {
    Model model = load_onnx_model(parsed.positional[0]);
    declared_outputs = model.graph.outputs.size();
    intermediates = computed_values(model);
    loaded = std::make_unique<Session>(with_outputs(std::move(model), intermediates));
  }
  Session& session = *loaded;
  TensorMap inputs;
  std::map<std::string, std::map<int64_t, Tensor>> elements;  // a sequence input's, by index
  for (const std::string& binding : parsed.values("input")) {
    const size_t equals = binding.find('=');
    KILN_CHECK(equals != std::string::npos && equals > 0, invalid_argument,
               "--input expects NAME=FILE.npy, NAME[INDEX]=FILE.npy or NAME=none, got '", binding, "'");
    std::string name = binding.substr(0, equals);
    const std::string file = binding.substr(equals + 1);
    const size_t bracket = name.find('[');
    if (bracket != std::string::npos && name.back() == ']') {
      const std::string digits = name.substr(bracket + 1, name.size() - bracket - 2);
      KILN_CHECK(!digits.empty() && digits.size() < 10 &&
                     digits.find_first_not_of("0123456789") == std::string::npos,
                 invalid_argument, "--input '", binding,
                 "': a sequence element's index must be a number, got '", digits, "'");
      const int64_t index = std::stoll(digits);
      name.resize(bracket);
      elements[name][index] =
          with_context(str_cat("input '", name, "' element ", index), [&] { return read_npy(file); });
      continue;
    }
    inputs[name] = file == "none"
                       ? Tensor{}
                       : with_context(str_cat("input '", name, "'"), [&] { return read_npy(file); });
  }
  for (auto& [name, by_index] : elements) {
    std::vector<Tensor> sequence;
    for (auto& [index, element] : by_index) {
      KILN_CHECK(index == static_cast<int64_t>(sequence.size()), invalid_argument, "input '", name,
                 "' has element ", index, " but no element ", sequence.size(),
                 ": give indexes 0, 1, ... in full");
      sequence.push_back(element);
    }
    const DType dtype = sequence.front().dtype();
    inputs[name] =
        with_context(str_cat("input '", name, "'"), [&] { return Tensor::sequence(dtype, sequence); });
  }
  std::mt19937 rng(kRandomInputSeed);
  for (const ValueInfo& input : session.inputs()) {
    if (!inputs.count(input.name)) inputs[input.name] = random_input(input, 1, rng);
  }
  const TensorMap outputs = session.run(inputs);

  const std::string output_dir = parsed.value("output-dir");
  if (!output_dir.empty()) std::filesystem::create_directories(output_dir);
  if (!dump_dir.empty()) {
    std::filesystem::create_directories(dump_dir);
    int written = 0;
    for (const std::string& name : intermediates) {
      const Tensor& value = outputs.at(name);
      if (!value.defined() || value.is_sequence()) continue;  // empty optionals and sequences are not .npy
      write_npy(std::filesystem::path(dump_dir) / (file_name_for(name) + ".npy"), value);
      ++written;
    }
    std::printf("%d intermediate values written to %s\n", written, dump_dir.c_str());
  }
  for (size_t o = 0; o < declared_outputs; ++o) {
    const ValueInfo& info = session.outputs()[o];
    const Tensor& output = outputs.at(info.name);
    if (!output.defined()) {
      std::printf("%s: empty optional\n", info.name.c_str());
      continue;
    }
    // A tensor, or each element of a sequence as <name>[i] in <name>.i.npy.
    const bool sequence = output.is_sequence();
    if (sequence) std::printf("%s: sequence of %zu\n", info.name.c_str(), output.elements().size());
    const std::span<const Tensor> values = sequence ? output.elements() : std::span<const Tensor>(&output, 1);
    for (size_t i = 0; i < values.size(); ++i) {
      const std::string label = sequence ? str_cat(info.name, "[", i, "]") : info.name;
      std::printf("%s: %s %s sum=%.6g hash=%08" PRIx32 "\n", label.c_str(),
                  std::string(dtype_name(values[i].dtype())).c_str(),
                  shape_to_string(values[i].shape()).c_str(), sum_of(values[i]), fingerprint(values[i]));
      const std::string file =
          sequence ? str_cat(file_name_for(info.name), ".", i) : file_name_for(info.name);
      if (!output_dir.empty()) write_npy(std::filesystem::path(output_dir) / (file + ".npy"), values[i]);
    }
  }
  return 0;
}

}  // namespace kiln
