// What `kiln launch` starts: each instance's CPUs, NUMA nodes, memory policy and environment,
// decided from the machine's topology by one function that both the real launch and --dry-run use.
// The options mean what PyTorch's torch.backends.xeon.run_cpu means by them (docs/backends.md,
// "kiln launch"), with kiln's differences written down there.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/threads.h"
#include "runtime/topology.h"

namespace kiln {

enum class LaunchAllocator {
  automatic,  // tcmalloc if installed, else jemalloc if installed, else the C library's (run_cpu's default)
  tcmalloc,
  jemalloc,
  system,  // --use-default-allocator
};

struct LaunchOptions {
  int instances = -1;          // --ninstances (-1: from the mode)
  int cores_per_instance = -1; // --ncores-per-instance
  int node = -1;               // --node-id
  int rank = -1;               // --rank: start only this instance of the layout
  std::optional<std::vector<int>> core_list;  // --core-list: CPU ids
  bool use_logical_cores = false;
  bool skip_cross_node_cores = false;
  bool latency_mode = false;
  bool throughput_mode = false;
  bool disable_numactl = false;  // neither pin CPUs nor bind memory
  LaunchAllocator allocator = LaunchAllocator::automatic;
  std::string wait_policy;  // "", "passive" or "active"
  std::string log_path;     // "" : no log files
  std::string log_file_prefix = "run";
};

struct InstancePlan {
  int index = 0;                 // its place in the layout (the rank)
  std::vector<int> cpus;         // pinned to (all of the mask's when not pinned)
  bool pinned = true;
  std::vector<int> nodes;        // NUMA nodes of its CPUs
  bool bind_memory = true;       // set_mempolicy(MPOL_BIND, nodes)
  int threads = 1;
  std::vector<std::pair<std::string, std::string>> environment;  // set in the instance
  std::vector<std::string> unset;                                // removed from it
  std::string log_file;          // "" : none
};

struct LaunchPlan {
  std::vector<InstancePlan> instances;
  std::string allocator;       // what is preloaded, for the report ("tcmalloc (/usr/lib/...)", "none: ...")
  std::vector<std::string> warnings;  // layouts that work but may be slow (cross-node, over quota)
};

// Throws kiln::Error (invalid_argument) naming the option when the layout cannot be made on
// `topology` (more cores asked than there are, an unknown node, a rank outside the layout, a
// requested allocator not installed).
LaunchPlan plan_launch(const Topology& topology, const LaunchOptions& options, EnvironmentLookup lookup);

// The plan as text: one line per instance and one with its environment (what --dry-run prints).
std::string describe_launch_plan(const LaunchPlan& plan);

}  // namespace kiln
