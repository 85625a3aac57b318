// `kiln run MODEL`: one run with inputs from .npy files or seeded random data, outputs to .npy files.
#include <cinttypes>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
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

// Output names become file names; keep them inside the output folder.
std::string file_name_for(const std::string& name) {
  std::string safe = name;
  for (char& c : safe) {
    if (c == '/' || c == '\\' || c == '\0') c = '_';
  }
  if (safe.empty() || safe == "." || safe == "..") safe = "_" + safe;
  return safe + ".npy";
}

}  // namespace

int command_run(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> specs = with_setting_options({
      {"input", true, "NAME=FILE.npy: feed an input from a .npy file (repeatable)"},
      {"output-dir", true, "DIR: write each output as DIR/<name>.npy"},
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

  Session session(parsed.positional[0]);
  TensorMap inputs;
  for (const std::string& binding : parsed.values("input")) {
    const size_t equals = binding.find('=');
    KILN_CHECK(equals != std::string::npos && equals > 0, invalid_argument,
               "--input expects NAME=FILE.npy, got '", binding, "'");
    const std::string name = binding.substr(0, equals);
    inputs[name] =
        with_context(str_cat("input '", name, "'"), [&] { return read_npy(binding.substr(equals + 1)); });
  }
  std::mt19937 rng(kRandomInputSeed);
  for (const ValueInfo& input : session.inputs()) {
    if (!inputs.count(input.name)) inputs[input.name] = random_input(input, 1, rng);
  }
  const TensorMap outputs = session.run(inputs);

  const std::string output_dir = parsed.value("output-dir");
  if (!output_dir.empty()) std::filesystem::create_directories(output_dir);
  for (const ValueInfo& info : session.outputs()) {
    const Tensor& output = outputs.at(info.name);
    std::printf("%s: %s %s sum=%.6g hash=%08" PRIx32 "\n", info.name.c_str(),
                std::string(dtype_name(output.dtype())).c_str(), shape_to_string(output.shape()).c_str(),
                sum_of(output), fingerprint(output));
    if (!output_dir.empty()) write_npy(std::filesystem::path(output_dir) / file_name_for(info.name), output);
  }
  return 0;
}

}  // namespace kiln
