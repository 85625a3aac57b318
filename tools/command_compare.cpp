// `kiln compare A [B]`: where two runs part, value by value (graph/compare.h).
#include <cmath>
#include <cstdio>
#include <random>

#include "core/error.h"
#include "graph/compare.h"
#include "graph/onnx_import.h"
#include "graph/random_input.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/npy.h"
#include "tools/setting_options.h"

namespace kiln {
namespace {

std::string decibels(double value) {
  if (std::isinf(value)) return value > 0 ? "equal" : "-inf";
  return str_cat(std::round(value * 100) / 100);
}

std::string json_number(double value) {
  if (std::isinf(value)) return value > 0 ? "\"inf\"" : "\"-inf\"";
  return str_cat(value);
}

std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

}  // namespace

int command_compare(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> specs = with_setting_options({
      {"input", true, "NAME=FILE.npy: feed an input from a .npy file (repeatable); others are seeded random data"},
      {"a", true, "NAME=VALUE: a setting for run A only, as kiln.backends.table() names it (repeatable)"},
      {"b", true, "NAME=VALUE: a setting for run B only (repeatable), e.g. --b conv_precision=bf16"},
      {"top", true, "N: print the N values that differ most (default 20; 0: all)"},
      {"json", false, "print every comparison as one JSON object instead of a table"},
      {"help", false, "show this help"},
  });
  const ParsedArgs parsed = parse_args("compare", args, specs);
  if (parsed.has("help")) {
    std::printf(
        "usage: kiln compare A.onnx [B.onnx] [options]\n\nRuns A and B (B defaults to A: compare one model "
        "under the --a and --b settings) on the same inputs and prints, per value both compute, how far "
        "B's is from A's: SQNR in dB (10 log10 of signal over error power), max and mean absolute error, "
        "worst first. A value B quantizes (DequantizeLinear(QuantizeLinear(v)), a QDQ model) matches A's "
        "v.\n\n%s",
        options_help(specs).c_str());
    return 0;
  }
  KILN_CHECK(parsed.positional.size() == 1 || parsed.positional.size() == 2, invalid_argument,
             "kiln compare expects A.onnx [B.onnx], got ", parsed.positional.size(), " paths (see kiln compare --help)");
  apply_setting_options(parsed);
  const Settings a_settings = settings_from_assignments(parsed.values("a"), "a");
  const Settings b_settings = settings_from_assignments(parsed.values("b"), "b");
  const int top = parsed.int_value("top", 20, 0, 1 << 30);
  const Model a = load_onnx_model(parsed.positional[0]);
  const Model b = parsed.positional.size() == 2 ? load_onnx_model(parsed.positional[1]) : a;

  TensorMap inputs;
  for (const std::string& binding : parsed.values("input")) {
    const size_t equals = binding.find('=');
    KILN_CHECK(equals != std::string::npos && equals > 0, invalid_argument, "--input expects NAME=FILE.npy, got '",
               binding, "'");
    const std::string name = binding.substr(0, equals);
    inputs[name] = with_context(str_cat("input '", name, "'"), [&] { return read_npy(binding.substr(equals + 1)); });
  }
  std::mt19937 rng(kRandomInputSeed);
  for (const ValueInfo& input : a.graph.inputs) {
    if (!inputs.count(input.name)) inputs[input.name] = random_input(input, 1, rng);
  }
  const std::vector<ValueComparison> results = compare_runs(a, a_settings, b, b_settings, inputs);

  if (parsed.has("json")) {
    std::printf("{\"a\": %s, \"b\": %s, \"values\": [", json_string(parsed.positional[0]).c_str(),
                json_string(parsed.positional.back()).c_str());
    for (size_t i = 0; i < results.size(); ++i) {
      const ValueComparison& r = results[i];
      std::printf("%s\n  {\"name\": %s, \"b_name\": %s, \"shape\": %s, \"output\": %s, \"sqnr_db\": %s, "
                  "\"max_abs_error\": %s, \"mean_abs_error\": %s}",
                  i == 0 ? "" : ",", json_string(r.name).c_str(), json_string(r.b_name).c_str(),
                  shape_to_string(r.shape).c_str(), r.is_output ? "true" : "false", json_number(r.sqnr_db).c_str(),
                  json_number(r.max_abs_error).c_str(), json_number(r.mean_abs_error).c_str());
    }
    std::printf("\n]}\n");
    return 0;
  }
  std::printf("A: %s\nB: %s\n%zu values compared, worst first (SQNR: 10 log10(sum A^2 / sum (A - B)^2))\n\n",
              parsed.positional[0].c_str(), parsed.positional.back().c_str(), results.size());
  std::printf("%-4s %-48s %-20s %10s %12s %12s\n", "rank", "value", "shape", "SQNR dB", "max |A-B|", "mean |A-B|");
  const size_t shown = top == 0 ? results.size() : std::min(results.size(), static_cast<size_t>(top));
  for (size_t i = 0; i < shown; ++i) {
    const ValueComparison& r = results[i];
    const std::string label = r.name + (r.is_output ? " (output)" : "") + (r.b_name != r.name ? " ~ " + r.b_name : "");
    std::printf("%-4zu %-48s %-20s %10s %12.4g %12.4g\n", i + 1, label.c_str(), shape_to_string(r.shape).c_str(),
                decibels(r.sqnr_db).c_str(), r.max_abs_error, r.mean_abs_error);
  }
  if (shown < results.size()) std::printf("... %zu more (--top 0 prints all)\n", results.size() - shown);
  return 0;
}

}  // namespace kiln
