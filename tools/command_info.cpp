// `kiln info`: what this build is and what it can use here.
#include <cstdio>

#include "backends/control.h"
#include "backends/selection.h"
#include "core/version.h"
#include "ops/op_schema.h"
#include "runtime/cpu_info.h"
#include "runtime/threads.h"
#include "tools/cli_args.h"
#include "tools/commands.h"

namespace kiln {

int command_info(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> specs = {{"help", false, "show this help"}};
  const ParsedArgs parsed = parse_args("info", args, specs);
  if (parsed.has("help")) {
    std::printf(
        "usage: kiln info\n\nPrints kiln's version, build configuration, backends, CPU capability and "
        "thread settings.\n\n%s",
        options_help(specs).c_str());
    return 0;
  }
  const CpuCapability& cpu = cpu_capability();
  std::printf("kiln %s\n", std::string(kiln_version()).c_str());
  std::printf("build: %s\n", std::string(build_configuration()).c_str());
  std::printf("backends:\n");
  for (const Backend* backend : all_backends()) {
    std::printf("  %-8s %-13s %-9s version %s\n", std::string(backend->name()).c_str(),
                backend->is_available() ? "available" : "unavailable",
                backend_enabled(backend->name()) ? "enabled" : "disabled", backend->version().c_str());
  }
  std::printf("  cuda     not built\n");
  std::printf("blas library: %s\n", backends::blas::library().c_str());
  std::printf("oneDNN primitive cache: %d of %d entries\n", backends::onednn::primitive_cache::size(),
              backends::onednn::primitive_cache::capacity());
  std::printf("settings: %s\n", current_settings().plan_fingerprint().c_str());
  std::printf("ops: %zu (ONNX opsets 7-17)\n", all_op_schemas().size());
  std::string extensions;
  for (const std::string& extension : cpu.extensions()) extensions += " " + extension;
  std::printf("cpu: %s\n", cpu.brand.empty() ? cpu.vendor.c_str() : cpu.brand.c_str());
  std::printf("cpu capability: %s (extensions:%s)\n", cpu.best_isa().c_str(), extensions.c_str());
#ifdef _OPENMP
  std::printf("threads: %d (from %s; %d cores available), OpenMP %d\n", get_num_threads(),
              num_threads_source().c_str(), available_cores(), _OPENMP);
#else
  std::printf("threads: 1 (built without OpenMP)\n");
#endif
  return 0;
}

}  // namespace kiln
