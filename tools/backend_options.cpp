#include "tools/backend_options.h"

#include "backends/selection.h"
#include "backends/verbose_sink.h"

namespace kiln {

std::vector<OptionSpec> with_backend_options(std::vector<OptionSpec> specs) {
  const std::vector<OptionSpec> backend_specs = {
      {"disable", true, "BACKEND: leave a backend out of kernel selection (repeatable)"},
      {"precision", true, "fp32|bf16: precision of convolutions and matrix products (default fp32)"},
      {"deterministic", false, "choose kernels whose results do not depend on the run or thread count"},
      {"autotune", true, "N: time up to N candidate kernels per node at plan time, keep the fastest"},
      {"verbose", true, "LEVEL: 1 prints a line per executed step, 2 adds a line per planned step"},
      {"verbose-file", true, "FILE: append verbose lines to FILE instead of standard output"},
  };
  specs.insert(specs.empty() ? specs.end() : specs.end() - 1, backend_specs.begin(), backend_specs.end());
  return specs;
}

void apply_backend_options(const ParsedArgs& parsed) {
  for (const std::string& name : parsed.values("disable")) set_backend_enabled(name, false);
  Flags flags;
  if (parsed.has("precision")) {
    const Precision precision = parse_precision(parsed.value("precision"), "--precision");
    flags.conv_precision = precision;
    flags.matmul_precision = precision;
  }
  if (parsed.has("deterministic")) flags.deterministic = true;
  if (parsed.has("autotune")) flags.autotune = parsed.int_value("autotune", 0, 0, 64);
  if (parsed.has("verbose")) flags.verbose = parsed.int_value("verbose", 0, 0, kMaxVerboseLevel);
  if (parsed.has("verbose-file")) flags.verbose_sink = file_verbose_sink(parsed.value("verbose-file"));
  set_flags(flags);
}

std::string settings_summary() {
  return current_settings().plan_fingerprint();
}

}  // namespace kiln
