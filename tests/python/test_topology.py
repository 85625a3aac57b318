"""kiln on machines it cannot be run on here, through models of them (recorded_machines.py, read
through KILN_TOPOLOGY_ROOT): what `kiln info` reports (physical cores, nodes, the quota, the default
thread count and why), and how a malformed topology is reported."""
import os
import re
import subprocess

import pytest

import recorded_machines
from recorded_machines import MACHINES, cpu_list


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("machines")
    return {name: machine.write(base / name) for name, machine in MACHINES.items()}


def kiln(kiln_bin, root, *args):
    return subprocess.run([str(kiln_bin), *map(str, args)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KILN_TOPOLOGY_ROOT": str(root)})


@pytest.mark.parametrize("name,cores,nodes,threads,reason", [
    ("xeon_2s_56c", 56, 2, 56, "56 physical cores in the affinity mask (112 CPUs; SMT siblings"),
    ("epyc_2s_nps4", 128, 8, 128, "128 physical cores in the affinity mask (256 CPUs"),
    ("laptop_4c_smt", 4, 1, 4, "4 physical cores in the affinity mask (8 CPUs"),
    ("vm_2vcpu_siblings", 1, 1, 2, "every CPU in the affinity mask is an SMT sibling of one physical core"),
    ("container_quota_2of16", 8, 1, 2, "the cgroup CPU quota of 2.00 CPUs"),
])
def test_info_reports_the_machine_and_why_its_default_is_what_it_is(kiln_bin, roots, name, cores, nodes, threads,
                                                                    reason):
    machine = MACHINES[name]
    result = kiln(kiln_bin, roots[name], "info")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"{nodes} NUMA node" in out and f"{cores} physical cores, {machine.cpu_count} CPUs" in out
    (default,) = re.findall(r"^default threads: (\d+) \((.*)\)$", out, re.M)
    assert int(default[0]) == threads and reason in default[1]
    assert re.search(rf"^threads: {threads} \(from cores; {threads} cores available", out, re.M)
    for node in range(nodes):
        node_cpus = [cpu for cpu, _, _, n in machine.cpus() if n == node]
        assert f"numa node {node}: CPUs {cpu_list(node_cpus)}\n" in out
    # The thread budget and the inter-op pool count the same cores.
    parallel = kiln(kiln_bin, roots[name], "info", "--parallel").stdout
    assert re.search(rf"thread budget: {threads} threads \(from cores\)", parallel)
    assert re.search(rf"inter-op threads: {threads} \(from cores", parallel)


def test_quota_in_a_parent_cgroup_and_under_cgroup_v1(kiln_bin, tmp_path):
    """The tightest quota on the way up binds; cgroup v1's cfs files count as well."""
    machine = MACHINES["container_quota_2of16"]
    v2 = machine.write(tmp_path / "v2")
    (v2 / "sys/fs/cgroup/cpu.max").write_text("300000 100000\n")
    recorded_machines.write(v2 / "proc/self/cgroup", "0::/service/worker\n")
    recorded_machines.write(v2 / "sys/fs/cgroup/service/cpu.max", "150000 100000\n")
    recorded_machines.write(v2 / "sys/fs/cgroup/service/worker/cpu.max", "max 100000\n")
    out = kiln(kiln_bin, v2, "info").stdout
    assert re.search(r"^default threads: 1 \(the cgroup CPU quota of 1.50 CPUs .*service/cpu.max", out, re.M), out

    v1 = machine.write(tmp_path / "v1")
    (v1 / "sys/fs/cgroup/cgroup.controllers").unlink()
    (v1 / "sys/fs/cgroup/cpu.max").unlink()
    recorded_machines.write(v1 / "proc/self/cgroup", "4:cpu,cpuacct:/job\n0::/\n")
    recorded_machines.write(v1 / "sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us", "400000\n")
    recorded_machines.write(v1 / "sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us", "100000\n")
    out = kiln(kiln_bin, v1, "info").stdout
    assert re.search(r"^default threads: 4 \(the cgroup CPU quota of 4.00 CPUs \(cgroup v1 ", out, re.M), out


@pytest.mark.parametrize("file,text,message", [
    ("sys/devices/system/cpu/online", "0-x", "is not a CPU list"),
    ("sys/devices/system/cpu/cpu3/topology/physical_package_id", "one", "expected an integer"),
    ("sys/fs/cgroup/cpu.max", "lots 100000", "expected an integer"),
    ("sys/devices/system/cpu/cpu0/cache/index0/size", "32Q", "expected a size such as 32K"),
    ("proc/self/status", "Cpus_allowed_list:\t64-65\n", "holds no online CPU"),
])
def test_a_malformed_topology_is_named(kiln_bin, tmp_path, file, text, message):
    root = MACHINES["laptop_4c_smt"].write(tmp_path / "bad")
    (root / file).write_text(text)
    result = kiln(kiln_bin, root, "info")
    assert result.returncode != 0 and message in result.stderr, result.stderr
    missing = kiln(kiln_bin, tmp_path / "nowhere", "info")
    assert missing.returncode != 0 and "KILN_TOPOLOGY_ROOT=" in missing.stderr
