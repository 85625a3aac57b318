"""kiln on machines it cannot be run on here, through models of them (recorded_machines.py, read
through KILN_TOPOLOGY_ROOT): what `kiln info` reports (physical cores, nodes, the quota, the default
thread count and why), and the layouts `kiln launch --dry-run` prints, each compared with the one
PyTorch 1.13's torch.backends.xeon.run_cpu computes from the same machine's lscpu text.

run_cpu has two bugs these comparisons meet; where they change its answer, the test says so and
checks kiln against what run_cpu means instead of what it does:
- it reads lscpu's Core column (core numbers) and hands those numbers to `numactl -C`, which takes
  CPU ids. Where a core's number is its first CPU's id (Xeon and EPYC servers number CPUs so), both
  agree; where siblings are numbered next to each other (the laptop model), run_cpu pins two
  instances' "cores" onto the two siblings of one core. kiln pins each core's first CPU.
- its lscpu pattern takes one digit of the Node column, so node 10 reads as node 1. No model here
  has ten nodes; the parse is checked directly below.
kiln also differs by design where run_cpu starts nothing: --latency-mode on fewer than 4 physical
cores starts one instance on them (run_cpu starts zero)."""
import argparse
import os
import re
import subprocess

import pytest

import recorded_machines
from recorded_machines import MACHINES, cpu_list, parse_cpu_list

run_cpu = pytest.importorskip("torch.backends.xeon.run_cpu")


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("machines")
    return {name: machine.write(base / name) for name, machine in MACHINES.items()}


def kiln(kiln_bin, root, *args):
    return subprocess.run([str(kiln_bin), *map(str, args)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KILN_TOPOLOGY_ROOT": str(root)})


def kiln_layout(kiln_bin, root, options):
    """[(cpus, nodes)] per instance from `kiln launch --dry-run OPTIONS`."""
    result = kiln(kiln_bin, root, "launch", "--dry-run", "--use-default-allocator", *options)
    assert result.returncode == 0, result.stderr
    layout = re.findall(r"^kiln launch: instance \d+: cpus ([0-9,-]+), \d+ threads?, numa nodes ([0-9,-]+), "
                        r"memory bound to nodes \2", result.stdout, re.M)
    return [(parse_cpu_list(cpus), parse_cpu_list(nodes)) for cpus, nodes in layout]


def run_cpu_layout(machine, options, monkeypatch):
    """[(ids, nodes)] per instance as run_cpu would start them: the ids it passes to `numactl -C`
    and the nodes to `-m`, from the machine's lscpu text; nothing is started."""
    parser = argparse.ArgumentParser()
    run_cpu.create_args(parser)
    args = parser.parse_args(["--" + option[2:].replace("-", "_") if option.startswith("--") else option
                              for option in options] + ["--no_python", "--log_path", "", "true"])
    launcher = run_cpu._Launcher.__new__(run_cpu._Launcher)
    launcher.cpuinfo = run_cpu._CPUinfo(test_input=machine.lscpu())
    monkeypatch.setattr(launcher, "set_multi_thread_and_allocator", lambda *a, **k: None)
    started = {}

    class Context:
        def wait(self):
            pass

    def start_processes(name, entrypoint, args, envs, log_dir, tee):
        started.update(args)
        return Context()

    monkeypatch.setattr(run_cpu, "start_processes", start_processes)
    launcher.launch(args)
    layout = []
    for index in sorted(started):
        argv = started[index]
        layout.append((parse_cpu_list(argv[argv.index("-C") + 1]), parse_cpu_list(argv[argv.index("-m") + 1])))
    return layout


def lscpu_cores(machine):
    """CPU id -> lscpu's Core number."""
    return {int(cpu): int(core) for cpu, core, _, _ in
            (line.split(",") for line in machine.lscpu().splitlines() if not line.startswith("#"))}


MODES = {
    "latency": ["--latency-mode"],
    "throughput": ["--throughput-mode"],
    "default": [],
    "two_instances": ["--ninstances", "2"],
    "cores_per_instance_2": ["--ncores-per-instance", "2"],
    "node_1": ["--node-id", "1"],
    "logical_two_instances": ["--use-logical-core", "--ninstances", "2"],
    "skip_cross_node_5": ["--ncores-per-instance", "5", "--skip-cross-node-cores"],
    "core_list": ["--core-list", "0,1,2,3", "--ncores-per-instance", "2"],
    "rank_1": ["--ninstances", "2", "--rank", "1"],
}


def applicable(machine, mode):
    if mode == "node_1":
        return machine.sockets * machine.nodes_per_socket > 1
    if mode == "skip_cross_node_5":
        return machine.cores_per_socket // machine.nodes_per_socket >= 5
    if mode in ("two_instances", "rank_1", "cores_per_instance_2"):
        return machine.cores >= 2
    if mode == "core_list":
        return machine.cpu_count >= 4
    return True


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", sorted(MACHINES))
def test_dry_run_lays_instances_out_as_run_cpu_does(kiln_bin, roots, name, mode, monkeypatch):
    machine = MACHINES[name]
    if not applicable(machine, mode):
        pytest.skip(f"{mode} needs more cores or nodes than {name} has")
    options = MODES[mode]
    ours = kiln_layout(kiln_bin, roots[name], options)
    theirs = run_cpu_layout(machine, options, monkeypatch)
    physical = "--use-logical-core" not in options and "--core-list" not in options
    if mode == "latency" and machine.cores < 4:
        # run_cpu: 1 // 4 instances, so it starts none.
        assert theirs == []
        assert ours == [([0], [0])]
        return
    if physical:
        # run_cpu's ids are lscpu core numbers (its first bug): compare kiln's CPUs as core numbers.
        core_of = lscpu_cores(machine)
        ours_as_cores = [([core_of[cpu] for cpu in cpus], nodes) for cpus, nodes in ours]
        assert ours_as_cores == theirs
        first_cpu_is_core_number = all(core_of[cpu] == cpu for cpus, _ in ours for cpu in cpus)
        if not machine.siblings_adjacent:
            assert first_cpu_is_core_number, "on servers a core's number is its first CPU's id"
            assert ours == theirs
        else:
            # The bug bites: run_cpu's "cores" 0-3 are CPUs 0-3, two siblings each of cores 0 and 1.
            assert not first_cpu_is_core_number
    else:
        assert ours == theirs


def test_run_cpu_reads_node_ten_as_node_one():
    """run_cpu's second bug, which kiln (reading sysfs, not lscpu text) does not share."""
    info = run_cpu._CPUinfo(test_input="# CPU,Core,Socket,Node\n0,0,0,10\n")
    assert info.node_nums == 2  # it took "1" of "10"


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
