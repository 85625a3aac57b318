"""`kiln launch` on this machine: instances pinned to their own cores and their memory bound to
their nodes exactly as --dry-run says (read back from each child's /proc/self/status and `kiln info`),
the environment they get, log files, the throughput they report per instance and in total, exit
codes and signals passed back and on, the allocators preloaded, and bad options named. The layouts
on machines this one is not are in test_topology.py."""
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

import kiln_cli
from recorded_machines import cpu_list, parse_cpu_list

DEMO = kiln_cli.REPO / "models" / "demo.onnx"
CORES = sorted(os.sched_getaffinity(0))


def first_cpus_of_cores():
    """The first CPU in the mask of each physical core (what kiln launch pins to without
    --use-logical-core); on a VM whose vCPUs are siblings of one core, one CPU. Under
    KILN_TOPOLOGY_ROOT, as kiln would read it there (so this file can run on a model of this
    machine with other siblings)."""
    firsts = set()
    for cpu in CORES:
        siblings = Path(os.environ.get("KILN_TOPOLOGY_ROOT", "/"),
                        f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        in_mask = [c for c in (parse_cpu_list(siblings.read_text().strip()) if siblings.exists() else [cpu])
                   if c in CORES]
        firsts.add(min(in_mask or [cpu]))
    return sorted(firsts)


PHYSICAL = first_cpus_of_cores()
# Tests that want one instance per CPU say so, so that they hold on SMT machines too.
PER_CPU = ["--use-logical-core", "--ncores-per-instance", "1"]


def launch(kiln_bin, *args, env=None):
    """Runs `kiln launch ARGS...` with `env` added to this environment."""
    return subprocess.run([str(kiln_bin), "launch", *map(str, args)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def launch_kiln(kiln_bin, *args):
    """`kiln launch ARGS... -- kiln ...`: kiln may be a sanitizer build, which must load before any
    preloaded allocator, so these launches preload none."""
    return launch(kiln_bin, "--use-default-allocator", *args)


def dry_run_layout(kiln_bin, *options):
    """{instance: (cpus, memory)} as `kiln launch --dry-run OPTIONS` prints them."""
    result = launch(kiln_bin, "--dry-run", *options)
    assert result.returncode == 0, result.stderr
    return {int(index): (cpus, memory) for index, cpus, memory in
            re.findall(r"^kiln launch: instance (\d+): cpus ([0-9,-]+)(?: \(not pinned[^)]*\))?, \d+ threads?, numa nodes [0-9,-]+, "
                       r"memory (bound to nodes [0-9,-]+|not bound)", result.stdout, re.M)}


def instance_lines(stdout, index):
    prefix = f"[instance {index}] "
    return [line[len(prefix):] for line in stdout.splitlines() if line.startswith(prefix)]


def test_instances_are_pinned_to_their_own_cores(kiln_bin):
    if len(CORES) < 2:
        pytest.skip("needs 2 cores to pin 2 instances apart")
    result = launch(kiln_bin, "--use-logical-core", "--instances", 2, "--cores-per-instance", 1, "--",
                    "grep", "Cpus_allowed_list", "/proc/self/status")
    assert result.returncode == 0, result.stderr
    allowed = []
    for index in range(2):
        (line,) = instance_lines(result.stdout, index)
        allowed.append(line.split(":")[1].strip())
    assert allowed == [str(CORES[0]), str(CORES[1])]
    assert "instance 1 started (pid" in result.stdout and f"on cpus {CORES[1]}" in result.stdout


@pytest.mark.parametrize("options", [[], ["--ninstances", "2"], ["--latency-mode"], ["--throughput-mode"],
                                     ["--core-list", "LAST", "--ncores-per-instance", "1"],
                                     ["--rank", "1", "--ninstances", "2"],
                                     ["--use-logical-core", "--ncores-per-instance", "1"], ["--disable-numactl"]])
def test_each_instance_runs_where_dry_run_said(kiln_bin, options):
    if len(PHYSICAL) < 2 and "2" in options:
        pytest.skip("needs 2 physical cores")
    options = [str(CORES[-1]) if option == "LAST" else option for option in options]
    planned = dry_run_layout(kiln_bin, *options)
    assert planned
    # Each instance reports its CPUs and nodes from the kernel, and its memory policy through kiln.
    result = launch_kiln(kiln_bin, *options, "--", "sh", "-c",
                         f"grep -E 'Cpus_allowed_list|Mems_allowed_list' /proc/self/status; {kiln_bin} info")
    assert result.returncode == 0, result.stderr
    for index, (cpus, memory) in planned.items():
        lines = instance_lines(result.stdout, index)
        status = dict(line.split(":\t") for line in lines if line.startswith(("Cpus_allowed_list", "Mems_allowed_list")))
        policy = next(line for line in lines if line.startswith("memory policy: "))
        if "--disable-numactl" in options:
            assert status["Cpus_allowed_list"] == cpu_list(CORES) and memory == "not bound"
            assert policy.startswith("memory policy: default")
            continue
        assert status["Cpus_allowed_list"] == cpus
        nodes = memory.removeprefix("bound to nodes ")
        # Mems_allowed_list is the cpuset's nodes (all of them, on one node the bound one); the policy
        # kiln info reads back is the binding itself.
        assert set(parse_cpu_list(nodes)) <= set(parse_cpu_list(status["Mems_allowed_list"]))
        assert policy == f"memory policy: bind to NUMA nodes {nodes}"


def test_environment_reaches_every_instance(kiln_bin):
    script = 'echo "$OMP_NUM_THREADS $KILN_NUM_THREADS $KILN_LAUNCH_INSTANCE $OMP_WAIT_POLICY $KILN_TEST_MARK"'
    # GOMP_SPINCOUNT would override --wait-policy in libgomp: the option takes it out.
    result = launch(kiln_bin, *PER_CPU, "--wait-policy", "passive", "--", "sh", "-c",
                    script + '; echo "[$GOMP_SPINCOUNT]"', env={"KILN_TEST_MARK": "kept", "GOMP_SPINCOUNT": "1234"})
    assert result.returncode == 0, result.stderr
    for index in range(len(CORES)):
        assert instance_lines(result.stdout, index) == [f"1 1 {index} passive kept", "[]"]
    # One instance on every physical core (the default layout): the thread counts are its cores.
    result = launch(kiln_bin, "--", "sh", "-c", script)
    assert instance_lines(result.stdout, 0) == [f"{len(PHYSICAL)} {len(PHYSICAL)} 0  "]


def test_output_goes_to_log_files_too(kiln_bin, tmp_path):
    logs = tmp_path / "logs"
    result = launch(kiln_bin, *PER_CPU, "--log-path", logs, "--log-file-prefix", "job", "--",
                    "sh", "-c", 'echo "out $KILN_LAUNCH_INSTANCE"; echo "err $KILN_LAUNCH_INSTANCE" >&2')
    assert result.returncode == 0, result.stderr
    for index in range(len(CORES)):
        log = (logs / f"job_instance_{index}.log").read_text().splitlines()
        assert sorted(log) == [f"err {index}", f"out {index}"]
        assert f"[instance {index}] out {index}" in result.stdout
        assert f"[instance {index}] err {index}" in result.stderr
    assert f"log {logs}/job_instance_0.log" in result.stdout


def test_a_log_file_that_cannot_be_written_stops_the_launch_before_any_instance(kiln_bin, tmp_path):
    (tmp_path / "run_instance_0.log").mkdir()
    ran = tmp_path / "ran"
    result = launch(kiln_bin, "--log-path", tmp_path, "--", "touch", ran)
    assert result.returncode != 0 and "--log-path: cannot write" in result.stderr, result.stderr
    assert not ran.exists()


def test_an_instance_inherits_no_other_instances_pipes_or_logs(kiln_bin, tmp_path):
    result = launch(kiln_bin, *PER_CPU, "--log-path", tmp_path, "--", "sh", "-c", "ls -l /proc/$$/fd")
    assert result.returncode == 0, result.stderr
    for index in range(len(CORES)):
        links = dict(line.split(" -> ")[0].split()[-1:] + line.split(" -> ")[1:]
                     for line in instance_lines(result.stdout, index) if " -> " in line)
        assert links["1"].startswith("pipe:") and links["2"].startswith("pipe:")
        extra = {fd: target for fd, target in links.items() if int(fd) > 2}
        assert not extra, f"instance {index} inherited {extra}"


def test_throughput_is_reported_per_instance_and_in_total(kiln_bin):
    result = launch_kiln(kiln_bin, *PER_CPU, "--", kiln_bin, "bench", DEMO, "--warmup", 1,
                         "--iters", 5, "--json")
    assert result.returncode == 0, result.stderr
    per_instance = [float(value) for value in re.findall(r"exited with 0; throughput ([0-9.]+) samples/s", result.stdout)]
    assert len(per_instance) == len(CORES) and all(value > 0 for value in per_instance)
    total = float(re.search(r"aggregate throughput ([0-9.]+) samples/s over (\d+) instances", result.stdout).group(1))
    assert total == pytest.approx(sum(per_instance), abs=0.01 * len(per_instance))


def test_signals_are_passed_on(kiln_bin):
    """SIGTERM to kiln launch reaches every instance, and their exit codes come back."""
    script = 'trap "echo terminated; exit 7" TERM; echo ready; i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done'
    process = subprocess.Popen([str(kiln_bin), "launch", *PER_CPU, "--", "sh", "-c", script],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready = 0
    deadline = time.monotonic() + 60
    while ready < len(CORES) and time.monotonic() < deadline:
        line = process.stdout.readline()
        ready += line.endswith("] ready\n")
    assert ready == len(CORES)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 7, stderr
    assert stdout.count("] terminated") == len(CORES)


def test_exit_codes_and_signals_come_back(kiln_bin):
    assert launch(kiln_bin, "--", "sh", "-c", "exit 3").returncode == 3
    assert launch(kiln_bin, "--", "sh", "-c", "kill -TERM $$").returncode == 128 + 15
    missing = launch(kiln_bin, "--", "/nonexistent/command")
    assert missing.returncode == 127 and "cannot run '/nonexistent/command'" in missing.stderr


@pytest.mark.parametrize("options,library", [([], "libtcmalloc"), (["--enable-tcmalloc"], "libtcmalloc"),
                                             (["--enable-jemalloc"], "libjemalloc"), (["--jemalloc"], "libjemalloc"),
                                             (["--use-default-allocator"], None)])
def test_the_allocator_asked_for_is_preloaded(kiln_bin, options, library):
    result = launch(kiln_bin, *options, "--", "sh", "-c", "grep -o 'lib[a-z_]*malloc[a-z_]*' /proc/self/maps | sort -u")
    assert result.returncode == 0, result.stderr
    loaded = [line for line in instance_lines(result.stdout, 0) if "tcmalloc" in line or "jemalloc" in line]
    assert [library] == [name.split("_")[0].split(".")[0] for name in loaded] if library else loaded == []


@pytest.mark.parametrize("args,message", [
    (["--"], "expects a command after '--'"),
    (["--instances", "0", "--", "true"], "--instances expects an integer"),
    (["--instances", "1", "--cores-per-instance", str(len(CORES) + 1), "--", "true"], "--ncores-per-instance"),
    (["--ninstances", str(len(CORES) + 1), "--", "true"], "is more than the"),
    (["--ninstances", "1", "--instances", "1", "--", "true"], "are the same option"),
    (["--wait-policy", "sleepy", "--", "true"], "--wait-policy expects 'passive' or 'active'"),
    (["--throughput", "--latency", "--", "true"], "contradict"),
    (["--latency-mode", "--ninstances", "1", "--", "true"], "sets the layout itself"),
    (["--node-id", "7", "--", "true"], "--node-id 7 is not a NUMA node"),
    (["--core-list", "0", "--", "true"], "--core-list needs --ncores-per-instance"),
    (["--core-list", "1000", "--ncores-per-instance", "1", "--", "true"], "outside this process's affinity mask"),
    (["--core-list", "3-1", "--ncores-per-instance", "1", "--", "true"], "is not a CPU list"),
    (["--rank", "5", "--", "true"], "--rank 5 is outside the layout"),
    (["--skip-cross-node-cores", "--", "true"], "--skip-cross-node-cores works with --ncores-per-instance alone"),
    (["--skip-cross-node-cores", "--ncores-per-instance", "1", "--ninstances", "1", "--", "true"],
     "not with --ninstances"),
    (["--enable-tcmalloc", "--use-default-allocator", "--", "true"], "contradict each other"),
    (["--log-path", "/proc/kiln-logs", "--", "true"], "--log-path: cannot create directory"),
    (["--log-file-prefix", "a/b", "--", "true"], "--log-file-prefix expects"),
    (["--pin-harder", "--", "true"], "unknown option '--pin-harder'"),
])
def test_bad_options_are_named(kiln_bin, args, message):
    result = launch(kiln_bin, *args)
    assert result.returncode != 0 and message in result.stderr, result.stderr
