// The machine as kiln's default thread counts and `kiln launch` see it: packages, NUMA nodes,
// physical cores and their SMT siblings, caches, this process's affinity mask and its cgroup CPU
// quota. Read from sysfs and procfs under a root directory: "/" normally, KILN_TOPOLOGY_ROOT when
// that is set, so tests can point kiln at recorded machines. A root holds
//   sys/devices/system/cpu/{online,cpuN/topology/*,cpuN/cache/indexK/*}
//   sys/devices/system/node/nodeN/cpulist     (absent: one node holding every CPU)
//   sys/fs/cgroup/...                         (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us)
//   proc/self/cgroup, proc/self/status        (the mask: Cpus_allowed_list, under a root other than "/")
// Under "/" the mask is the calling thread's sched_getaffinity.
//
// The default thread count follows from it (default_threads): the physical cores in the mask,
// capped by the quota; see docs/backends.md, "Which cores count".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct LogicalCpu {
  int id = 0;
  int core = 0;     // index into Topology::cores
  int package = 0;  // physical_package_id
  int node = 0;     // NUMA node id
};

struct PhysicalCore {
  int package = 0;
  int node = 0;
  std::vector<int> cpus;  // its SMT siblings, ascending: cpus[0] is the one `kiln launch` pins to
};

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;
};

struct CpuCache {
  int level = 0;
  std::string type;  // "Data", "Instruction", "Unified"
  int64_t bytes = 0;
  std::vector<int> cpus;  // sharing it
};

struct CpuQuota {
  double cpus = 0;     // quota / period
  std::string source;  // the file and its text, e.g. "cgroup v2 /sys/fs/cgroup/cpu.max: 200000 100000"

  // The threads that fit it: rounded down (a team computing at once would be throttled at the end
  // of every period otherwise), at least 1.
  int whole_cpus() const;
};

struct DefaultThreads {
  int threads = 1;
  std::string reason;  // one sentence, for `kiln info` and parallel_info()
};

struct Topology {
  std::string root;                // "/" or KILN_TOPOLOGY_ROOT
  std::vector<LogicalCpu> cpus;    // online CPUs, ascending id
  std::vector<PhysicalCore> cores; // in the order of their first CPU
  std::vector<NumaNode> nodes;     // ascending id
  int packages = 1;
  std::vector<int> allowed;        // the affinity mask when read, ascending (online CPUs only)
  std::optional<CpuQuota> quota;   // none: no cgroup CPU limit found

  const LogicalCpu* cpu(int id) const;  // nullptr for an id that is not online
  // The mask now: the calling thread's under "/" (a thread may re-pin itself), `allowed` otherwise.
  std::vector<int> current_mask() const;
  // Physical cores with at least one CPU in `mask`.
  int cores_in(const std::vector<int>& mask) const;
  DefaultThreads default_threads(const std::vector<int>& mask) const;
  // Each distinct cache once, read from sysfs when asked: only `kiln info` and parallel_info()
  // want them, and on a large machine they are most of the files, which no run should wait for.
  std::vector<CpuCache> read_caches() const;
  // Lines ("topology: ...", "numa node 0: ...", "caches: ...", "default threads: ...") for
  // `kiln info` and parallel_info(), each ending in '\n'.
  std::string describe() const;
};

// Reads the topology under `root`. Throws kiln::Error (invalid_argument) naming the file when one
// holds text it cannot parse; files that are missing fall back (see the header comment).
Topology read_topology(const std::string& root);
// This process's, read once from KILN_TOPOLOGY_ROOT or "/" (a bad root throws on every call).
const Topology& process_topology();

// The calling thread's NUMA memory policy (get_mempolicy), e.g. "bind to NUMA nodes 0-1" or
// "default (local node)", for `kiln info`: what `kiln launch` set shows here.
std::string memory_policy();

// "1 MiB", "48 KiB": a cache's or working set's size (KiB unless a whole number of MiB).
std::string size_text(int64_t bytes);

// "0-3,8,10-11" from ascending ids, and back. parse_cpu_list throws kiln::Error
// (invalid_argument) naming `what` on bad text.
std::string format_cpu_list(const std::vector<int>& ids);
std::vector<int> parse_cpu_list(std::string_view text, std::string_view what);

}  // namespace kiln
