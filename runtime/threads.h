// How many threads kiln's intra-op work uses. The count is a setting (`threads`, see
// backends/setting_table.h); this layer holds what kernels read and where the default comes from:
//   1. the setting, when set through the API, a scoped guard, a session or the CLI's --threads,
//   2. the KILN_NUM_THREADS environment variable,
//   3. the MKL_NUM_THREADS environment variable (kiln links no MKL: the variable is honoured
//      because deployments tuned for MKL-based runtimes set it),
//   4. the OMP_NUM_THREADS environment variable (first entry of a nested list),
//   5. the cores this process may run on (available_cores()).
// The environment is read once. A run installs its count for its thread (ScopedIntraOpThreads), so
// parallel_for, oneDNN and the native kernels all use the count the run started with.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// Upper bound on any thread count: far above any machine, low enough to catch typos.
inline constexpr int kMaxThreads = 4096;

struct ThreadCount {
  int threads = 1;
  std::string source;  // the variable it came from, or "cores"
};

// A count from text: throws kiln::Error (invalid_argument) naming `source` unless it is an integer
// in 1..kMaxThreads.
int parse_thread_count(std::string_view text, std::string_view source);

// Steps 2-5 from `lookup` (getenv for the process): throws kiln::Error (invalid_argument) naming the
// variable when a value is zero, negative, too large or not a number.
using EnvironmentLookup = const char* (*)(const char* name);
ThreadCount thread_count_from_environment(EnvironmentLookup lookup);
// The same for this process's environment, read on first use and kept (an invalid value throws on
// every call, so each caller reports it).
const ThreadCount& environment_thread_count();

// The cores this process may compute on, which every default thread count starts from: the
// physical cores in the calling thread's affinity mask, capped by the cgroup CPU quota
// (runtime/topology.h, Topology::default_threads), and why.
int available_cores();
std::string available_cores_reason();

// The count intra-op work on the calling thread uses: the innermost ScopedIntraOpThreads on this
// thread, else the process's count.
int intra_op_threads();
// The process's count: `threads`, or 0 for the environment's. Only the settings layer calls it,
// when the global `threads` setting changes.
void set_process_intra_op_threads(int threads);

// Installs a thread count for the calling thread until destroyed; nests.
class ScopedIntraOpThreads {
 public:
  explicit ScopedIntraOpThreads(int threads);
  ~ScopedIntraOpThreads();
  ScopedIntraOpThreads(const ScopedIntraOpThreads&) = delete;
  ScopedIntraOpThreads& operator=(const ScopedIntraOpThreads&) = delete;

 private:
  int previous_;
};

}  // namespace kiln
