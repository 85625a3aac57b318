// The topology read from this machine agrees with the kernel's own calls, and the default thread
// count follows the rules of runtime/topology.h on hand-made topologies. Recorded big machines are
// tested through the CLI (tests/python/test_topology.py).
#include "runtime/topology.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <set>

#include "core/error.h"
#include "runtime/threads.h"

namespace kiln {
namespace {

TEST(Topology, CpuListsRoundTrip) {
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11", "test"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5,1", "test"), (std::vector<int>{1, 5}));
  EXPECT_EQ(parse_cpu_list("", "test"), std::vector<int>{});
  for (const char* bad : {"3-1", "a", "1,,2", "-1", "1-", "99999"}) {
    EXPECT_THROW(parse_cpu_list(bad, "test"), Error) << bad;
  }
}

TEST(Topology, ThisMachineAgreesWithTheKernel) {
  const Topology topology = read_topology("/");
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(static_cast<int>(topology.allowed.size()), CPU_COUNT(&set));
  EXPECT_EQ(static_cast<long>(topology.cpus.size()), sysconf(_SC_NPROCESSORS_ONLN));
  // Every online CPU belongs to exactly one core and one node, and a core's CPUs name it.
  std::set<int> in_nodes;
  for (const NumaNode& node : topology.nodes) in_nodes.insert(node.cpus.begin(), node.cpus.end());
  EXPECT_EQ(in_nodes.size(), topology.cpus.size());
  for (const LogicalCpu& cpu : topology.cpus) {
    const PhysicalCore& core = topology.cores.at(cpu.core);
    EXPECT_NE(std::find(core.cpus.begin(), core.cpus.end(), cpu.id), core.cpus.end());
  }
  EXPECT_LE(topology.cores_in(topology.allowed), static_cast<int>(topology.allowed.size()));
  EXPECT_EQ(available_cores(), process_topology().default_threads(process_topology().current_mask()).threads);
}

// Two cores of two siblings each: CPUs 0,2 are core 0 and 1,3 core 1.
Topology two_cores_with_siblings() {
  Topology topology;
  topology.root = "test";
  topology.cpus = {{0, 0, 0, 0}, {1, 1, 0, 0}, {2, 0, 0, 0}, {3, 1, 0, 0}};
  topology.cores = {{0, 0, {0, 2}}, {0, 0, {1, 3}}};
  topology.nodes = {{0, {0, 1, 2, 3}}};
  topology.allowed = {0, 1, 2, 3};
  return topology;
}

TEST(Topology, DefaultThreadsCountPhysicalCores) {
  Topology topology = two_cores_with_siblings();
  EXPECT_EQ(topology.default_threads({0, 1, 2, 3}).threads, 2);
  EXPECT_EQ(topology.default_threads({0, 1}).threads, 2);
  EXPECT_EQ(topology.default_threads({0, 1}).reason, "2 physical cores in the affinity mask");
  // Only the siblings of one core: a thread per CPU (docs/backends.md says why).
  const DefaultThreads siblings = topology.default_threads({0, 2});
  EXPECT_EQ(siblings.threads, 2);
  EXPECT_NE(siblings.reason.find("SMT sibling of one physical core"), std::string::npos);
  EXPECT_EQ(topology.default_threads({3}).threads, 1);
}

TEST(Topology, AQuotaCapsTheDefaultRoundingDown) {
  Topology topology = two_cores_with_siblings();
  topology.quota = CpuQuota{1.5, "cgroup v2 test/cpu.max: 150000 100000"};
  const DefaultThreads capped = topology.default_threads({0, 1, 2, 3});
  EXPECT_EQ(capped.threads, 1);
  EXPECT_NE(capped.reason.find("1.50 CPUs"), std::string::npos) << capped.reason;
  topology.quota = CpuQuota{0.2, "tiny"};
  EXPECT_EQ(topology.default_threads({0, 1}).threads, 1);  // never below one
  topology.quota = CpuQuota{8, "loose"};
  EXPECT_EQ(topology.default_threads({0, 1}).threads, 2);  // a quota above the cores changes nothing
}

}  // namespace
}  // namespace kiln
