#include "tools/launch_plan.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"

namespace kiln {
namespace {

// Where Debian's libtcmalloc-minimal4, libgoogle-perftools4 and libjemalloc2 put the libraries,
// and where a hand-built one usually lands.
constexpr const char* kLibraryDirectories[] = {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                                               "/usr/lib", "/usr/local/lib", "/usr/lib64"};
constexpr const char* kTcmallocNames[] = {"libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc.so"};
constexpr const char* kJemallocNames[] = {"libjemalloc.so.2", "libjemalloc.so"};
// run_cpu's setting for jemalloc: return large blocks at once, purge from a background thread.
constexpr const char* kJemallocConfig = "oversize_threshold:1,background_thread:true,metadata_thp:auto";

template <size_t N>
std::string find_library(const char* const (&names)[N]) {
  for (const char* directory : kLibraryDirectories) {
    for (const char* name : names) {
      const std::string path = str_cat(directory, "/", name);
      if (access(path.c_str(), R_OK) == 0) return path;
    }
  }
  return {};
}

std::string value_of(EnvironmentLookup lookup, const char* name) {
  const char* value = lookup(name);
  return value != nullptr ? value : "";
}

// The CPUs instances are carved from, ascending: each physical core's first CPU in the mask, or
// every CPU in the mask with `logical`; only those on `node` when it is not -1.
std::vector<int> candidate_cpus(const Topology& topology, const std::vector<int>& mask, bool logical, int node) {
  std::vector<int> cpus;
  std::set<int> cores_taken;
  for (int id : mask) {
    const LogicalCpu* cpu = topology.cpu(id);
    if (cpu == nullptr || (node >= 0 && cpu->node != node)) continue;
    if (logical || cores_taken.insert(cpu->core).second) cpus.push_back(id);
  }
  return cpus;
}

// `cpus` by NUMA node, each list ascending.
std::map<int, std::vector<int>> by_node(const Topology& topology, const std::vector<int>& cpus) {
  std::map<int, std::vector<int>> nodes;
  for (int id : cpus) nodes[topology.cpu(id)->node].push_back(id);
  return nodes;
}

// Instances of `per_instance` CPUs taken in turn from each node's CPUs; a node's leftover CPUs
// (fewer than `per_instance`) are skipped, so no instance straddles two nodes.
std::vector<std::vector<int>> within_nodes(const Topology& topology, const std::vector<int>& cpus, int per_instance,
                                           std::vector<std::string>& warnings) {
  std::vector<std::vector<int>> layout;
  for (const auto& [node, node_cpus] : by_node(topology, cpus)) {
    const size_t whole = node_cpus.size() / per_instance * per_instance;
    for (size_t begin = 0; begin < whole; begin += per_instance) {
      layout.emplace_back(node_cpus.begin() + begin, node_cpus.begin() + begin + per_instance);
    }
    if (whole < node_cpus.size()) {
      warnings.push_back(str_cat("CPUs ", format_cpu_list({node_cpus.begin() + whole, node_cpus.end()}),
                                 " of NUMA node ", node, " are left idle: fewer than the ", per_instance,
                                 " an instance takes"));
    }
  }
  return layout;
}

// Consecutive runs of `per_instance` CPUs, as run_cpu slices its sorted core list.
std::vector<std::vector<int>> in_turn(const std::vector<int>& cpus, int instances, int per_instance) {
  std::vector<std::vector<int>> layout;
  for (int i = 0; i < instances; ++i) {
    layout.emplace_back(cpus.begin() + i * per_instance, cpus.begin() + (i + 1) * per_instance);
  }
  return layout;
}

std::vector<std::vector<int>> layout_for(const Topology& topology, const std::vector<int>& mask,
                                         const LaunchOptions& options, std::vector<std::string>& warnings) {
  const bool counts_given = options.instances != -1 || options.cores_per_instance != -1;
  if (options.latency_mode || options.throughput_mode) {
    const char* mode = options.latency_mode ? "--latency-mode" : "--throughput-mode";
    KILN_CHECK(!(options.latency_mode && options.throughput_mode), invalid_argument,
               "kiln launch: --latency-mode and --throughput-mode contradict each other");
    KILN_CHECK(!counts_given && options.node == -1 && !options.use_logical_cores && !options.core_list,
               invalid_argument, "kiln launch: ", mode,
               " sets the layout itself; drop --ninstances, --ncores-per-instance, --node-id, --core-list and "
               "--use-logical-core, or drop ", mode);
    const std::vector<int> cores = candidate_cpus(topology, mask, false, -1);
    if (options.throughput_mode) {  // one instance per NUMA node, on its physical cores
      std::vector<std::vector<int>> layout;
      for (auto& [node, node_cores] : by_node(topology, cores)) layout.push_back(std::move(node_cores));
      return layout;
    }
    // Latency: 4 physical cores per instance, every core used (fewer than 4: one instance on them).
    if (cores.size() < 4) {
      warnings.push_back(str_cat("--latency-mode: ", cores.size(),
                                 " physical cores, fewer than the 4 an instance takes: one instance on them"));
      return {cores};
    }
    return within_nodes(topology, cores, 4, warnings);
  }

  int instances = options.instances, per_instance = options.cores_per_instance;
  KILN_CHECK(!options.skip_cross_node_cores || (per_instance != -1 && instances == -1 && !options.core_list),
             invalid_argument,
             "kiln launch: --skip-cross-node-cores works with --ncores-per-instance alone (it decides the number of "
             "instances itself; not with --ninstances or --core-list)");
  if (options.core_list) {
    std::vector<int> cores = *options.core_list;
    std::sort(cores.begin(), cores.end());
    std::vector<int> outside;
    std::set_difference(cores.begin(), cores.end(), mask.begin(), mask.end(), std::back_inserter(outside));
    KILN_CHECK(outside.empty(), invalid_argument, "kiln launch: --core-list names CPUs ", format_cpu_list(outside),
               " outside this process's affinity mask (CPUs ", format_cpu_list(mask), ")");
    KILN_CHECK(per_instance != -1, invalid_argument,
               "kiln launch: --core-list needs --ncores-per-instance (how many of its CPUs each instance takes)");
    KILN_CHECK(per_instance <= static_cast<int>(cores.size()), invalid_argument,
               "kiln launch: --ncores-per-instance ", per_instance, " is more than the ", cores.size(),
               " CPUs of --core-list");
    if (instances > 1 && instances * per_instance < static_cast<int>(cores.size())) {
      warnings.push_back(str_cat("only the first ", instances * per_instance, " CPUs of --core-list are used"));
    } else {
      instances = static_cast<int>(cores.size()) / per_instance;
    }
    return in_turn(cores, instances, per_instance);
  }

  if (options.node != -1) {
    const bool known = std::any_of(topology.nodes.begin(), topology.nodes.end(),
                                   [&](const NumaNode& node) { return node.id == options.node; });
    std::string ids;
    for (const NumaNode& node : topology.nodes) ids += str_cat(ids.empty() ? "" : ",", node.id);
    KILN_CHECK(known, invalid_argument, "kiln launch: --node-id ", options.node, " is not a NUMA node of this machine (",
               ids, ")");
  }
  const std::vector<int> cores = candidate_cpus(topology, mask, options.use_logical_cores, options.node);
  const int available = static_cast<int>(cores.size());
  const char* unit = options.use_logical_cores ? "CPUs" : "physical cores";
  KILN_CHECK(available > 0, invalid_argument, "kiln launch: NUMA node ", options.node,
             " has no CPU in this process's affinity mask (CPUs ", format_cpu_list(mask), ")");
  if (instances == -1 && per_instance == -1) return {cores};  // one instance on everything
  if (per_instance == -1) {
    KILN_CHECK(instances <= available, invalid_argument, "kiln launch: --ninstances ", instances, " is more than the ",
               available, " ", unit, " there are");
    return in_turn(cores, instances, available / instances);
  }
  KILN_CHECK(per_instance <= available, invalid_argument, "kiln launch: --ncores-per-instance ", per_instance,
             " is more than the ", available, " ", unit, " there are");
  if (instances == -1) {
    if (!options.skip_cross_node_cores) return in_turn(cores, available / per_instance, per_instance);
    std::vector<std::vector<int>> layout = within_nodes(topology, cores, per_instance, warnings);
    KILN_CHECK(!layout.empty(), invalid_argument, "kiln launch: --skip-cross-node-cores: no NUMA node has ",
               per_instance, " ", unit, " (--ncores-per-instance)");
    return layout;
  }
  KILN_CHECK(instances * per_instance <= available, invalid_argument, "kiln launch: ", instances, " instances x ",
             per_instance, " cores need ", instances * per_instance, " ", unit, "; there are ", available, " (CPUs ",
             format_cpu_list(cores), ")");
  return in_turn(cores, instances, per_instance);
}

}  // namespace

LaunchPlan plan_launch(const Topology& topology, const LaunchOptions& options, EnvironmentLookup lookup) {
  LaunchPlan plan;
  const std::vector<int> mask = topology.current_mask();
  std::vector<std::vector<int>> layout = layout_for(topology, mask, options, plan.warnings);
  KILN_CHECK(options.rank < static_cast<int>(layout.size()), invalid_argument, "kiln launch: --rank ", options.rank,
             " is outside the layout's ", layout.size(), " instances");

  std::string preload;
  const std::string existing_preload = value_of(lookup, "LD_PRELOAD");
  const auto already_preloaded = [&](const char* name) { return existing_preload.find(name) != std::string::npos; };
  bool jemalloc = false;
  switch (options.allocator) {
    case LaunchAllocator::tcmalloc:
      preload = find_library(kTcmallocNames);
      KILN_CHECK(!preload.empty(), invalid_argument,
                 "--enable-tcmalloc: libtcmalloc not found (install Debian's libtcmalloc-minimal4)");
      break;
    case LaunchAllocator::jemalloc:
      preload = find_library(kJemallocNames);
      KILN_CHECK(!preload.empty(), invalid_argument,
                 "--enable-jemalloc: libjemalloc.so.2 not found (install Debian's libjemalloc2)");
      jemalloc = true;
      break;
    case LaunchAllocator::automatic:
      preload = find_library(kTcmallocNames);
      if (preload.empty()) {
        preload = find_library(kJemallocNames);
        jemalloc = !preload.empty();
      }
      break;
    case LaunchAllocator::system:
      break;
  }
  if (!preload.empty() && (already_preloaded("libtcmalloc") || already_preloaded("libjemalloc"))) {
    plan.allocator = str_cat("as LD_PRELOAD already has it (", existing_preload, ")");
    preload.clear();
    jemalloc = false;
  } else if (!preload.empty()) {
    plan.allocator = str_cat(jemalloc ? "jemalloc (" : "tcmalloc (", preload, ")");
  } else {
    plan.allocator = options.allocator == LaunchAllocator::system
                         ? "the C library's (--use-default-allocator)"
                         : "the C library's (neither tcmalloc nor jemalloc is installed)";
  }

  int total_threads = 0;
  for (int index = 0; index < static_cast<int>(layout.size()); ++index) {
    if (options.rank != -1 && index != options.rank) continue;
    InstancePlan instance;
    instance.index = index;
    instance.cpus = std::move(layout[index]);
    instance.threads = static_cast<int>(instance.cpus.size());
    total_threads += instance.threads;
    std::set<int> nodes;
    for (int id : instance.cpus) nodes.insert(topology.cpu(id)->node);
    instance.nodes.assign(nodes.begin(), nodes.end());
    instance.pinned = instance.bind_memory = !options.disable_numactl;
    if (instance.nodes.size() > 1 && layout.size() > 1) {
      plan.warnings.push_back(str_cat("instance ", index, " spans NUMA nodes ", format_cpu_list(instance.nodes),
                                      ": its memory is bound to all of them (--skip-cross-node-cores or an "
                                      "--ncores-per-instance that divides a node's cores keeps instances on one)"));
    }
    const std::string threads = std::to_string(instance.threads);
    instance.environment = {{"OMP_NUM_THREADS", threads},
                            {"KILN_NUM_THREADS", threads},
                            {"KILN_LAUNCH_INSTANCE", std::to_string(index)}};
    if (!options.wait_policy.empty()) {
      instance.environment.emplace_back("OMP_WAIT_POLICY", options.wait_policy);
      instance.unset.push_back("GOMP_SPINCOUNT");  // libgomp lets it override OMP_WAIT_POLICY
    }
    if (!preload.empty()) {
      instance.environment.emplace_back("LD_PRELOAD",
                                        existing_preload.empty() ? preload : str_cat(preload, ":", existing_preload));
    }
    if (jemalloc && value_of(lookup, "MALLOC_CONF").empty()) {
      instance.environment.emplace_back("MALLOC_CONF", kJemallocConfig);
    }
    if (!options.log_path.empty()) {
      instance.log_file = str_cat(options.log_path, "/", options.log_file_prefix, "_instance_", index, ".log");
    }
    plan.instances.push_back(std::move(instance));
  }
  if (topology.quota && total_threads > topology.quota->whole_cpus()) {
    plan.warnings.push_back(str_cat("the instances run ", total_threads, " threads on a cgroup CPU quota of ",
                                    topology.quota->whole_cpus(), " CPUs (", topology.quota->source,
                                    "): they will be throttled; fewer instances or cores fit it"));
  }
  return plan;
}

std::string describe_launch_plan(const LaunchPlan& plan) {
  std::string text = str_cat("kiln launch: allocator: ", plan.allocator, "\n");
  for (const InstancePlan& instance : plan.instances) {
    text += str_cat("kiln launch: instance ", instance.index, ": cpus ", format_cpu_list(instance.cpus),
                    instance.pinned ? "" : " (not pinned: --disable-numactl)", ", ", instance.threads,
                    instance.threads == 1 ? " thread" : " threads", ", numa nodes ", format_cpu_list(instance.nodes), ", memory ",
                    instance.bind_memory ? str_cat("bound to nodes ", format_cpu_list(instance.nodes))
                                         : std::string("not bound"),
                    instance.log_file.empty() ? "" : str_cat(", log ", instance.log_file), "\n");
    std::string environment;
    for (const auto& [name, value] : instance.environment) environment += str_cat(" ", name, "=", value);
    for (const std::string& name : instance.unset) environment += str_cat(" -", name);
    text += str_cat("kiln launch: instance ", instance.index, " environment:", environment, "\n");
  }
  for (const std::string& warning : plan.warnings) text += str_cat("kiln launch: warning: ", warning, "\n");
  return text;
}

}  // namespace kiln
