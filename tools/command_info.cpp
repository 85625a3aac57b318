// `kiln info`: what this build is and what it can use here.
#include <cstdio>

#include "backends/backends.h"
#include "backends/parallel_info.h"
#include "backends/selection.h"
#include "backends/setting_aliases.h"
#include "core/version.h"
#include "graph/onnx_import.h"
#include "ops/op_schema.h"
#include "runtime/cpu_info.h"
#include "runtime/roofline.h"
#include "runtime/threads.h"
#include "runtime/topology.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/setting_options.h"

namespace kiln {
namespace {

// "avx2 (from KILN_ISA)", or "avx2 (from api, which asked for amx; the cpu's best is avx2)".
std::string describe_isa_choice() {
  const IsaChoice& choice = isa_choice();
  std::string text = str_cat(isa_name(choice.isa), " (from ", choice.source);
  if (choice.requested != choice.isa) {
    text += str_cat(", which asked for ", isa_name(choice.requested), "; the cpu's best is ",
                    isa_name(cpu_capability().best_isa()));
  }
  return text + ")";
}

// One line per setting: its value on this thread and what the settings table says of it.
void print_settings() {
  const std::vector<std::pair<std::string, std::string>> values = backends::current();
  std::printf("settings (name = value: type, default, plan-affecting, environment):\n");
  for (size_t i = 0; i < values.size(); ++i) {
    const SettingSlot& slot = setting_slots()[i];
    const SettingRow& row = *slot.row;
    std::string type(setting_type_name(row.type));
    if (row.type == SettingType::integer) type += str_cat(" ", row.min, "..", row.max);
    const std::string fallback =
        row.type == SettingType::sink ? "stdout" : setting_value_text(slot, row.default_value);
    std::printf("  %s = %s: %s, default %s%s%s\n", values[i].first.c_str(), values[i].second.c_str(),
                type.c_str(), fallback.c_str(), row.changes_plan ? ", changes the plan" : "",
                row.env.empty() ? "" : str_cat(", ", row.env).c_str());
  }
  std::printf("aliases (PyTorch's names; --set NAME=VALUE takes them):\n");
  for (const SettingAlias& alias : kSettingAliases) {
    std::printf("  %s = %s: %s (%s)\n", std::string(alias.name).c_str(),
                backends::get_text(alias.name).c_str(), std::string(alias.setting).c_str(),
                std::string(alias.mirrors).c_str());
  }
}

}  // namespace

int command_info(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> specs = with_setting_options(
      {{"settings", false, "list every setting with its value, type, default and environment variable"},
       {"parallel", false,
        "print parallel_info(): thread counts and their sources, the budget, OpenMP, BLAS, "
        "the environment variables read"},
       {"roofline", false,
        "print this machine's roofline: fp32 peak per ISA tier and read bandwidth from cache to memory "
        "(measured once per CPU and thread count, then read from the cache file)"},
       {"remeasure", false, "with --roofline, measure again and rewrite the cache file"},
       {"json", false, "with --roofline, print only the roofline, as one JSON object"},
       {"help", false, "show this help"}});
  const ParsedArgs parsed = parse_args("info", args, specs);
  if (parsed.has("help")) {
    std::printf(
        "usage: kiln info [--settings] [--parallel] [--roofline [--remeasure] [--json]] [settings "
        "options]\n\nPrints "
        "kiln's version, build "
        "configuration, "
        "backends, "
        "CPU capability, the ISA tier kernels use (KILN_ISA=baseline|avx2|avx512|avx512_bf16|amx caps it) "
        "and "
        "thread settings, with the settings options applied.\n\n%s",
        options_help(specs).c_str());
    return 0;
  }
  for (const char* option : {"remeasure", "json"}) {
    KILN_CHECK(parsed.has("roofline") || !parsed.has(option), invalid_argument, "--", option,
               " applies to --roofline");
  }
  apply_setting_options(parsed);
  if (parsed.has("json")) {
    std::printf("%s\n",
                roofline_json(machine_roofline(intra_op_threads(), parsed.has("remeasure")), isa_in_effect())
                    .c_str());
    return 0;
  }
  const Settings settings = current_settings();
  const CpuCapability& cpu = cpu_capability();
  std::printf("kiln %s\n", std::string(kiln_version()).c_str());
  std::printf("build: %s\n", std::string(build_configuration()).c_str());
  std::printf("backends:\n");
  for (int i = 0; i < kBackendCount; ++i) {
    const Backend* backend = all_backends()[i];
    if (!backend->is_built()) {
      std::printf("  %-8s not built (%s=OFF)\n", std::string(backend->name()).c_str(),
                  build_option(backend->name()).c_str());
      continue;
    }
    std::printf("  %-8s %-13s %-9s version %s\n", std::string(backend->name()).c_str(),
                backend->is_available() ? "available" : "unavailable",
                settings.backend_enabled(i) ? "enabled" : "disabled", backend->version().c_str());
  }
  std::printf("  cuda     not built\n");
  const bool has_onednn = backends::info("onednn").built;
  if (backends::info("blas").built) std::printf("blas library: %s\n", backends::blas::library().c_str());
  if (has_onednn) {
    std::printf("oneDNN primitive cache: %d of %d entries\n", backends::onednn::primitive_cache::size(),
                backends::onednn::primitive_cache::capacity());
  }
  std::printf("plan settings: %s\n", settings.describe_plan_settings().c_str());
  std::printf("ops: %zu (ONNX opsets %lld-%lld)\n", all_op_schemas().size(), static_cast<long long>(kMinOpset),
              static_cast<long long>(kMaxOpset));
  std::string extensions;
  for (const std::string& extension : cpu.extensions()) extensions += " " + extension;
  std::printf("cpu: %s\n", cpu.description().c_str());
  std::printf("cpu capability: %s (extensions:%s)\n", std::string(isa_name(cpu.best_isa())).c_str(),
              extensions.c_str());
  if (has_onednn) {
    std::printf("isa in effect: %s; oneDNN dispatches up to %s\n", describe_isa_choice().c_str(),
                backends::onednn::isa().c_str());
  } else {
    std::printf("isa in effect: %s\n", describe_isa_choice().c_str());
  }
#ifdef _OPENMP
  std::printf("threads: %d (from %s; %d cores available: %s), OpenMP %d\n", get_num_threads(),
              num_threads_source().c_str(), available_cores(), available_cores_reason().c_str(), _OPENMP);
#else
  std::printf("threads: 1 (built without OpenMP)\n");
#endif
  // --parallel prints it among the rest.
  if (!parsed.has("parallel")) std::printf("%s", process_topology().describe().c_str());
  std::printf("memory policy: %s\n", memory_policy().c_str());
  if (parsed.has("parallel")) {
    std::string text = parallel_info_text(parallel_info());
    std::printf("parallel:\n");
    for (size_t begin = 0; begin < text.size();) {
      const size_t end = text.find('\n', begin);
      std::printf("  %s\n", text.substr(begin, end - begin).c_str());
      begin = end + 1;
    }
  }
  if (parsed.has("settings")) print_settings();
  if (parsed.has("roofline"))
    std::fputs(roofline_text(machine_roofline(intra_op_threads(), parsed.has("remeasure"))).c_str(), stdout);
  return 0;
}

}  // namespace kiln
