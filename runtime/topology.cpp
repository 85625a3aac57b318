#include "runtime/topology.h"

#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string trimmed(std::string text) {
  const auto first = text.find_first_not_of(" \t\n");
  if (first == std::string::npos) return {};
  const auto last = text.find_last_not_of(" \t\n");
  return text.substr(first, last - first + 1);
}

// The file's text without surrounding blanks, or nothing when it cannot be read.
std::optional<std::string> read_file_text(const fs::path& path) {
  std::ifstream file(path);
  if (!file) return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  return trimmed(text.str());
}

int parse_int(std::string_view text, const fs::path& path) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [last, error] = std::from_chars(text.data(), end, value);
  KILN_CHECK(error == std::errc{} && last == end, invalid_argument, path.string(), " holds '", text,
             "', expected an integer");
  return value;
}

std::optional<int> read_int(const fs::path& path) {
  const std::optional<std::string> text = read_file_text(path);
  if (!text) return std::nullopt;
  return parse_int(*text, path);
}

std::optional<std::vector<int>> read_cpu_list(const fs::path& path) {
  const std::optional<std::string> text = read_file_text(path);
  if (!text) return std::nullopt;
  return parse_cpu_list(*text, path.string());
}

// "32K", "1024K", "32M" as bytes.
int64_t cache_bytes(const std::string& text, const fs::path& path) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [last, error] = std::from_chars(text.data(), end, value);
  KILN_CHECK(error == std::errc{} && value >= 0, invalid_argument, path.string(), " holds '", text,
             "', expected a size such as 32K");
  const std::string_view unit(last, static_cast<size_t>(end - last));
  if (unit.empty()) return value;
  if (unit == "K") return value << 10;
  if (unit == "M") return value << 20;
  if (unit == "G") return value << 30;
  fail(ErrorKind::invalid_argument, path.string(), " holds '", text, "', expected a size such as 32K");
}

// "2.50": locale-independent, for quotas.
std::string two_places(double value) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof text, value, std::chars_format::fixed, 2);
  return error == std::errc{} ? std::string(text, end) : std::string("?");
}

std::vector<int> affinity_of_calling_thread() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
    }
  }
  return cpus;
}

// Cpus_allowed_list from a status file in /proc/<pid>/status's format.
std::optional<std::vector<int>> allowed_from_status(const fs::path& path) {
  std::ifstream file(path);
  if (!file) return std::nullopt;
  const std::string key = "Cpus_allowed_list:";
  for (std::string line; std::getline(file, line);) {
    if (line.rfind(key, 0) == 0) return parse_cpu_list(trimmed(line.substr(key.size())), path.string());
  }
  return std::nullopt;
}

std::vector<int> intersection(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both;
}

// The tightest of the quotas on `cgroup` and its ancestors below `mount` (a limit on a parent
// cgroup binds its children too). `read_level` gives one directory's quota, if it has one.
template <typename ReadLevel>
std::optional<CpuQuota> tightest_quota(const fs::path& mount, const std::string& cgroup, ReadLevel read_level) {
  const fs::path relative = fs::path(cgroup).relative_path();
  fs::path directory = relative.empty() ? mount : mount / relative;
  std::error_code error;
  // In a container without a cgroup namespace, /proc/self/cgroup names a path of the host's tree
  // while the container's own cgroup is mounted at the root.
  if (!fs::is_directory(directory, error)) directory = mount;
  std::optional<CpuQuota> tightest;
  for (;;) {
    if (std::optional<CpuQuota> quota = read_level(directory)) {
      if (!tightest || quota->cpus < tightest->cpus) tightest = quota;
    }
    if (directory == mount || !directory.has_relative_path() || directory.parent_path() == directory) break;
    directory = directory.parent_path();
    if (directory.string().size() < mount.string().size()) break;
  }
  return tightest;
}

std::optional<CpuQuota> cgroup_v2_quota(const fs::path& directory) {
  const fs::path file = directory / "cpu.max";
  const std::optional<std::string> text = read_file_text(file);
  if (!text) return std::nullopt;
  std::istringstream words(*text);
  std::string quota, period = "100000";
  words >> quota >> period;
  if (quota == "max") return std::nullopt;
  const int quota_us = parse_int(quota, file), period_us = parse_int(period, file);
  KILN_CHECK(quota_us > 0 && period_us > 0, invalid_argument, file.string(), " holds '", *text,
             "', expected 'max PERIOD' or 'QUOTA PERIOD' with positive numbers");
  return CpuQuota{static_cast<double>(quota_us) / period_us, str_cat("cgroup v2 ", file.string(), ": ", *text)};
}

std::optional<CpuQuota> cgroup_v1_quota(const fs::path& directory) {
  const fs::path quota_file = directory / "cpu.cfs_quota_us";
  const std::optional<int> quota = read_int(quota_file);
  if (!quota || *quota <= 0) return std::nullopt;  // -1: no limit
  const std::optional<int> period = read_int(directory / "cpu.cfs_period_us");
  if (!period || *period <= 0) return std::nullopt;
  return CpuQuota{static_cast<double>(*quota) / *period,
                  str_cat("cgroup v1 ", quota_file.string(), ": ", *quota, " per ", *period, " us period")};
}

// The CPU quota of this process's cgroups, v2 and v1 (whichever are mounted), the tightest found.
std::optional<CpuQuota> read_quota(const fs::path& root) {
  std::ifstream file(root / "proc/self/cgroup");
  if (!file) return std::nullopt;
  std::optional<CpuQuota> tightest;
  const auto consider = [&](std::optional<CpuQuota> quota) {
    if (quota && (!tightest || quota->cpus < tightest->cpus)) tightest = quota;
  };
  const fs::path cgroups = root / "sys/fs/cgroup";
  for (std::string line; std::getline(file, line);) {
    // "hierarchy-id:controllers:path"; v2's line is "0::path".
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    std::error_code error;
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      // Unified mount at /sys/fs/cgroup, or at /sys/fs/cgroup/unified beside v1 (hybrid).
      const fs::path mount =
          fs::exists(cgroups / "cgroup.controllers", error) ? cgroups : cgroups / "unified";
      consider(tightest_quota(mount, path, cgroup_v2_quota));
      continue;
    }
    std::istringstream names(controllers);
    bool has_cpu = false;
    for (std::string name; std::getline(names, name, ',');) has_cpu = has_cpu || name == "cpu";
    if (!has_cpu) continue;
    for (const char* mount_name : {"cpu", "cpu,cpuacct", "cpuacct,cpu"}) {
      const fs::path mount = cgroups / mount_name;
      if (!fs::is_directory(mount, error)) continue;
      consider(tightest_quota(mount, path, cgroup_v1_quota));
      break;
    }
  }
  return tightest;
}

}  // namespace

std::string size_text(int64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return str_cat(bytes >> 20, " MiB");
  return str_cat(bytes >> 10, " KiB");
}

std::string format_cpu_list(const std::vector<int>& ids) {
  std::string text;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    text += str_cat(text.empty() ? "" : ",", ids[i]);
    if (j > i) text += str_cat("-", ids[j]);
    i = j + 1;
  }
  return text;
}

std::vector<int> parse_cpu_list(std::string_view text, std::string_view what) {
  std::set<int> ids;
  const auto bad = [&]() {
    fail(ErrorKind::invalid_argument, what, ": '", text,
         "' is not a CPU list (expected ids below ", CPU_SETSIZE, " and ascending ranges such as 0-3,8,10-11)");
  };
  if (trimmed(std::string(text)).empty()) return {};
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string item = trimmed(std::string(text.substr(begin, end - begin)));
    const auto dash = item.find('-');
    int first = 0, last = 0;
    const auto number = [&](std::string_view digits, int& value) {
      auto [stop, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
      if (digits.empty() || error != std::errc{} || stop != digits.data() + digits.size() || value < 0 ||
          value >= CPU_SETSIZE)
        bad();
    };
    if (dash == std::string::npos) {
      number(item, first);
      last = first;
    } else {
      number(std::string_view(item).substr(0, dash), first);
      number(std::string_view(item).substr(dash + 1), last);
      if (last < first) bad();
    }
    for (int id = first; id <= last; ++id) ids.insert(id);
    begin = end + 1;
  }
  return {ids.begin(), ids.end()};
}

std::string memory_policy() {
  int mode = 0;
  unsigned long nodes[16] = {};
  constexpr int kBits = 8 * sizeof(unsigned long);
  if (syscall(SYS_get_mempolicy, &mode, nodes, sizeof(nodes) * 8, nullptr, 0UL) != 0) {
    return str_cat("unknown (get_mempolicy: ", std::strerror(errno), ")");
  }
  std::vector<int> ids;
  for (int node = 0; node < static_cast<int>(sizeof(nodes) * 8); ++node) {
    if (nodes[node / kBits] & (1UL << (node % kBits))) ids.push_back(node);
  }
  switch (mode & ~(MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES)) {
    case MPOL_DEFAULT: return "default (pages on the node of the CPU that first touches them)";
    case MPOL_BIND: return str_cat("bind to NUMA nodes ", format_cpu_list(ids));
    case MPOL_PREFERRED: return str_cat("preferred NUMA node ", format_cpu_list(ids));
    case MPOL_INTERLEAVE: return str_cat("interleave over NUMA nodes ", format_cpu_list(ids));
    default: return str_cat("mode ", mode, " over NUMA nodes ", format_cpu_list(ids));
  }
}

int CpuQuota::whole_cpus() const {
  return std::max(1, static_cast<int>(std::floor(cpus + 1e-9)));
}

const LogicalCpu* Topology::cpu(int id) const {
  const auto found = std::lower_bound(cpus.begin(), cpus.end(), id,
                                      [](const LogicalCpu& cpu, int value) { return cpu.id < value; });
  return found != cpus.end() && found->id == id ? &*found : nullptr;
}

std::vector<int> Topology::current_mask() const {
  if (root != "/") return allowed;
  std::vector<int> online;
  for (const LogicalCpu& logical : cpus) online.push_back(logical.id);
  return intersection(affinity_of_calling_thread(), online);
}

int Topology::cores_in(const std::vector<int>& mask) const {
  std::vector<bool> seen(cores.size());
  int count = 0;
  for (int id : mask) {
    const LogicalCpu* logical = cpu(id);
    if (logical != nullptr && !seen[logical->core]) {
      seen[logical->core] = true;
      ++count;
    }
  }
  return count;
}

DefaultThreads Topology::default_threads(const std::vector<int>& mask) const {
  const int logical = std::max<int>(1, static_cast<int>(mask.size()));
  const int physical = std::max(1, cores_in(mask));
  DefaultThreads result;
  if (physical == 1 && logical > 1) {
    result = {logical, str_cat(logical, " CPUs: every CPU in the affinity mask is an SMT sibling of one "
                                        "physical core; a VM's vCPUs need not share a host core, so each gets "
                                        "a thread")};
  } else if (physical == logical) {
    result = {physical, str_cat(physical, " physical cores in the affinity mask")};
  } else {
    result = {physical, str_cat(physical, " physical cores in the affinity mask (", logical,
                                " CPUs; SMT siblings would share a core's FMA units)")};
  }
  if (quota && quota->whole_cpus() < result.threads) {
    result = {quota->whole_cpus(), str_cat("the cgroup CPU quota of ", two_places(quota->cpus), " CPUs (",
                                           quota->source, ") caps the ", result.threads, " the affinity mask gives")};
  }
  return result;
}

std::vector<CpuCache> Topology::read_caches() const {
  // A core's siblings share each of its caches, so its first CPU lists them all.
  std::vector<CpuCache> caches;
  std::set<std::tuple<int, std::string, std::vector<int>>> seen;
  for (const PhysicalCore& core : cores) {
    const fs::path directory = fs::path(root) / str_cat("sys/devices/system/cpu/cpu", core.cpus.front());
    for (int index = 0;; ++index) {
      const fs::path cache = directory / str_cat("cache/index", index);
      const std::optional<int> level = read_int(cache / "level");
      if (!level) break;
      CpuCache entry{*level, read_file_text(cache / "type").value_or("Unified"), 0, {}};
      if (std::optional<std::string> size = read_file_text(cache / "size")) {
        entry.bytes = cache_bytes(*size, cache / "size");
      }
      entry.cpus = read_cpu_list(cache / "shared_cpu_list").value_or(core.cpus);
      if (seen.insert({entry.level, entry.type, entry.cpus}).second) caches.push_back(std::move(entry));
    }
  }
  return caches;
}

std::string Topology::describe() const {
  std::set<int> allowed_nodes;
  for (int id : allowed) {
    if (const LogicalCpu* logical = cpu(id)) allowed_nodes.insert(logical->node);
  }
  std::string text = str_cat("topology: ", packages, packages == 1 ? " package, " : " packages, ", nodes.size(),
                             nodes.size() == 1 ? " NUMA node, " : " NUMA nodes, ", cores.size(),
                             " physical cores, ", cpus.size(), " CPUs", root == "/" ? "" : str_cat(" (read from ", root, ")"),
                             "\n");
  text += str_cat("affinity mask: CPUs ", format_cpu_list(allowed), ": ", cores_in(allowed), " physical cores, ",
                  allowed.size(), " CPUs, on NUMA nodes ",
                  format_cpu_list(std::vector<int>(allowed_nodes.begin(), allowed_nodes.end())), "\n");
  text += str_cat("cpu quota: ",
                  quota ? str_cat(two_places(quota->cpus), " CPUs (", quota->source, ")") : std::string("none"),
                  "\n");
  for (const NumaNode& node : nodes) {
    text += str_cat("numa node ", node.id, ": CPUs ", format_cpu_list(node.cpus), "\n");
  }
  // One line per cache level and type: its size, how many there are and how many CPUs share one.
  std::map<std::pair<int, std::string>, std::vector<const CpuCache*>> by_kind;
  const std::vector<CpuCache> caches = read_caches();
  for (const CpuCache& cache : caches) by_kind[{cache.level, cache.type}].push_back(&cache);
  std::string summary;
  for (const auto& [kind, instances] : by_kind) {
    const char* letter = kind.second == "Data" ? "d" : kind.second == "Instruction" ? "i" : "";
    summary +=
        str_cat(summary.empty() ? "" : "; ", "L", kind.first, letter, " ", size_text(instances[0]->bytes),
                " x", instances.size(), " (", instances[0]->cpus.size(), " CPUs each)");
  }
  if (!summary.empty()) text += str_cat("caches: ", summary, "\n");
  const DefaultThreads threads = default_threads(allowed);
  text += str_cat("default threads: ", threads.threads, " (", threads.reason, ")\n");
  return text;
}

Topology read_topology(const std::string& root) {
  Topology topology;
  topology.root = root;
  const fs::path base(root);
  const fs::path cpu_directory = base / "sys/devices/system/cpu";
  std::vector<int> online;
  if (std::optional<std::vector<int>> listed = read_cpu_list(cpu_directory / "online")) {
    online = *listed;
  } else if (root == "/") {
    online = affinity_of_calling_thread();  // no sysfs (a locked-down container): the CPUs we may use
  } else if (std::optional<std::vector<int>> status = allowed_from_status(base / "proc/self/status")) {
    online = *status;
  }
  if (online.empty()) {
    const int count = std::max(1U, std::thread::hardware_concurrency());
    for (int id = 0; id < count; ++id) online.push_back(id);
  }

  // NUMA nodes: nodeN/cpulist, or one node 0 holding every CPU.
  std::map<int, int> node_of;
  std::error_code error;
  const fs::path node_directory = base / "sys/devices/system/node";
  if (fs::is_directory(node_directory, error)) {
    for (const fs::directory_entry& entry : fs::directory_iterator(node_directory, error)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("node", 0) != 0 || name.size() == 4 ||
          name.find_first_not_of("0123456789", 4) != std::string::npos)
        continue;
      NumaNode node{parse_int(std::string_view(name).substr(4), entry.path()), {}};
      if (std::optional<std::vector<int>> listed = read_cpu_list(entry.path() / "cpulist")) {
        node.cpus = intersection(*listed, online);
      }
      for (int id : node.cpus) node_of[id] = node.id;
      topology.nodes.push_back(std::move(node));
    }
  }
  std::sort(topology.nodes.begin(), topology.nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  std::erase_if(topology.nodes, [](const NumaNode& node) { return node.cpus.empty(); });  // memory-only nodes
  if (topology.nodes.empty()) topology.nodes.push_back({0, online});

  // Cores: a CPU's siblings (core_cpus_list, or thread_siblings_list before Linux 5.7) form one core.
  std::map<int, int> core_of_first_cpu;
  std::set<int> packages;
  for (int id : online) {
    const fs::path directory = cpu_directory / str_cat("cpu", id);
    LogicalCpu logical{id, 0, read_int(directory / "topology/physical_package_id").value_or(0),
                       node_of.count(id) ? node_of[id] : topology.nodes.front().id};
    if (logical.package < 0) logical.package = 0;  // -1 where the firmware does not say
    packages.insert(logical.package);
    std::optional<std::vector<int>> siblings = read_cpu_list(directory / "topology/core_cpus_list");
    if (!siblings) siblings = read_cpu_list(directory / "topology/thread_siblings_list");
    std::vector<int> core_cpus = siblings ? intersection(*siblings, online) : std::vector<int>{};
    if (std::find(core_cpus.begin(), core_cpus.end(), id) == core_cpus.end()) core_cpus = {id};
    const auto [found, added] = core_of_first_cpu.try_emplace(core_cpus.front(), topology.cores.size());
    if (added) topology.cores.push_back({logical.package, logical.node, core_cpus});
    logical.core = found->second;
    topology.cpus.push_back(logical);

  }
  topology.packages = static_cast<int>(packages.size());

  std::vector<int> mask;
  if (root == "/") {
    mask = affinity_of_calling_thread();
  } else {
    mask = allowed_from_status(base / "proc/self/status").value_or(online);
  }
  topology.allowed = intersection(mask, online);
  KILN_CHECK(!topology.allowed.empty(), invalid_argument, "the affinity mask (CPUs ", format_cpu_list(mask),
             ") holds no online CPU (online: ", format_cpu_list(online), ")");
  topology.quota = read_quota(base);
  return topology;
}

const Topology& process_topology() {
  // A throwing initializer leaves the static unset, so a bad root is reported to every caller.
  static const Topology topology = [] {
    const char* root = std::getenv("KILN_TOPOLOGY_ROOT");
    if (root == nullptr || *root == '\0') return read_topology("/");
    std::error_code error;
    KILN_CHECK(fs::is_directory(root, error), invalid_argument, "KILN_TOPOLOGY_ROOT='", root,
               "' is not a directory (expected a root holding sys/devices/system/cpu)");
    return read_topology(root);
  }();
  return topology;
}

}  // namespace kiln
