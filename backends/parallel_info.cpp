#include "backends/parallel_info.h"

#include <link.h>

#include <cstdlib>
#include <string_view>

#include "backends/backends.h"
#include "backends/settings.h"
#include "core/error.h"
#include "runtime/core_load.h"
#include "runtime/interop.h"
#include "runtime/thread_budget.h"
#include "runtime/topology.h"

namespace kiln {
namespace {

// Variables that decide thread counts or how idle threads wait, in the order they are explained.
constexpr const char* kThreadVariables[] = {
    "KILN_NUM_THREADS",   "MKL_NUM_THREADS",   "OMP_NUM_THREADS",      "KILN_NUM_INTEROP_THREADS",
    "KILN_THREAD_BUDGET", "OMP_WAIT_POLICY",   "GOMP_SPINCOUNT",       "OMP_PROC_BIND",
    "OMP_PLACES",         "GOMP_CPU_AFFINITY", "OPENBLAS_NUM_THREADS", "DNNL_VERBOSE",
    "KILN_ADAPT_TO_LOAD", "KILN_TOPOLOGY_ROOT"};

std::string environment_value(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}


// The OpenMP runtime mapped into this process: "libgomp.so.1", "libomp.so" or "libiomp5.so".
std::string loaded_openmp_runtime() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* library, size_t, void* data) {
        const std::string_view path = library->dlpi_name != nullptr ? library->dlpi_name : "";
        const std::string_view file = path.substr(path.rfind('/') + 1);
        for (std::string_view runtime : {"libgomp", "libiomp5", "libomp"}) {
          if (file.starts_with(runtime)) {
            *static_cast<std::string*>(data) = std::string(file);
            return 1;
          }
        }
        return 0;
      },
      &found);
  return found;
}

// What idle OpenMP threads do between parallel regions (libgomp's documented defaults).
std::string describe_wait_policy(const std::string& policy, const std::string& spincount) {
  if (!spincount.empty())
    return str_cat("GOMP_SPINCOUNT=", spincount, ": libgomp spins that many times, then sleeps");
  if (policy.empty()) return "OMP_WAIT_POLICY unset: libgomp spins about 300000 times, then sleeps";
  return str_cat(
      "OMP_WAIT_POLICY=", policy,
      policy == "passive" || policy == "PASSIVE" ? ": idle threads sleep at once" : ": idle threads spin");
}

}  // namespace

ParallelInfo parallel_info() {
  ParallelInfo info;
  info.intra_op_threads = get_num_threads();
  info.intra_op_source = num_threads_source();
  info.interop_threads = get_num_interop_threads();
  info.interop_source = num_interop_threads_source();
  info.interop_started = interop_pool_started();
  info.thread_budget = get_thread_budget();
  info.thread_budget_source = thread_budget_source();
  info.leased_threads = leased_threads();
  info.budget_shared = thread_budget_shared();
  info.cores = available_cores();
  info.cores_reason = available_cores_reason();
  info.topology = process_topology().describe();
  info.core_ids = format_cpu_list(process_topology().current_mask());
  const std::string runtime = loaded_openmp_runtime();
  info.openmp = backends::openmp::is_available()
                    ? str_cat(runtime.empty() ? "runtime not loaded" : runtime, " (built for OpenMP ",
                              backends::openmp::version(), ")")
                    : "not built (one thread per run)";
  info.wait_policy =
      describe_wait_policy(environment_value("OMP_WAIT_POLICY"), environment_value("GOMP_SPINCOUNT"));
  const CoreLoad load = core_load();
  info.load_measured = load.measured;
  info.load_readable = load.readable;
  info.busy_elsewhere = load.busy_elsewhere;
  info.free_cores = load.free_cores;
  info.adapt_to_load = current_settings().on("adapt_to_load");
  info.threads_are_default = current_settings().threads_are_default();
  const backends::BackendInfo blas = backends::info("blas");
  info.blas =
      blas.built ? str_cat(backends::blas::library(), "; ", backends::blas::threading()) : "not built";
  const backends::BackendInfo onednn = backends::info("onednn");
  info.onednn = onednn.built
                    ? str_cat(onednn.version, "; OpenMP runtime, primitives created for a thread count")
                    : "not built";
  for (const char* name : kThreadVariables) info.environment.emplace_back(name, environment_value(name));
  return info;
}

std::string parallel_info_text(const ParallelInfo& info) {
  std::string text;
  text += str_cat("intra-op threads: ", info.intra_op_threads, " (from ", info.intra_op_source, ")\n");
  text += str_cat("inter-op threads: ", info.interop_threads, " (from ", info.interop_source, "; ",
                  info.interop_started ? "pool started" : "pool not started yet", ")\n");
  text +=
      str_cat("thread budget: ",
              info.thread_budget == 0 ? std::string("off") : str_cat(info.thread_budget, " threads"),
              " (from ", info.thread_budget_source, "), ", info.leased_threads, " leased by runs in flight",
              info.budget_shared ? ", shared among concurrent callers now" : "", "\n");
  text += str_cat("cores: ", info.cores, " (", info.cores_reason, "; affinity: cpus ", info.core_ids, ")\n");
  text += info.topology;
  const std::string measure =
      !info.load_readable
          ? std::string("unavailable (/proc/stat could not be read; tried again every window)")
      : info.load_measured
          ? str_cat(cores_text(info.busy_elsewhere),
                    " cores' worth of other processes' work in the last window, ", info.free_cores,
                    " cores free")
          : std::string(
                "not measured yet (a window closes on the first look 100 ms after the last, and starts "
                "afresh when the affinity mask changes)");
  text += str_cat("busy elsewhere: ", measure, "; adapt_to_load ", info.adapt_to_load ? "on" : "off",
                  !info.adapt_to_load        ? std::string()
                  : info.threads_are_default ? std::string(": runs at the default count use the free cores")
                                             : std::string(": not used, the thread count was set"),
                  "\n");
  text += str_cat("OpenMP: ", info.openmp, "\n");
  text += str_cat("OpenMP wait policy: ", info.wait_policy, "\n");
  text += str_cat("BLAS: ", info.blas, "\n");
  text += str_cat("oneDNN: ", info.onednn, "\n");
  text +=
      "precedence (intra-op): a scope or session setting > set_num_threads > KILN_NUM_THREADS > "
      "MKL_NUM_THREADS > OMP_NUM_THREADS > cores\n";
  text +=
      "precedence (inter-op): set_num_interop_threads (before the pool starts) > KILN_NUM_INTEROP_THREADS > "
      "cores\n";
  text += "environment:\n";
  for (const auto& [name, value] : info.environment) {
    std::string note;
    if (name == "OPENBLAS_NUM_THREADS" && !value.empty())
      note = "  (read by OpenBLAS, not used: kiln calls BLAS on 1 thread)";
    text += str_cat("  ", name, "=", value.empty() ? "(unset)" : value, note, "\n");
  }
  return text;
}

}  // namespace kiln
