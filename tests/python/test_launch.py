"""`kiln launch`: instances pinned to their own cores (read back from each child's
/proc/self/status), the environment they get, the throughput they report per instance and in total,
exit codes and signals passed back, jemalloc preloaded, and bad options named."""
import os
import re
import subprocess

import pytest

import kiln_cli

DEMO = kiln_cli.REPO / "models" / "demo.onnx"
CORES = sorted(os.sched_getaffinity(0))


def launch(kiln_bin, *args, env=None):
    """Runs `kiln launch ARGS...` with `env` added to this environment."""
    return subprocess.run([str(kiln_bin), "launch", *map(str, args)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def instance_lines(stdout, index):
    prefix = f"[instance {index}] "
    return [line[len(prefix):] for line in stdout.splitlines() if line.startswith(prefix)]


def test_instances_are_pinned_to_their_own_cores(kiln_bin):
    if len(CORES) < 2:
        pytest.skip("needs 2 cores to pin 2 instances apart")
    result = launch(kiln_bin, "--instances", 2, "--cores-per-instance", 1, "--",
                    "grep", "Cpus_allowed_list", "/proc/self/status")
    assert result.returncode == 0, result.stderr
    allowed = []
    for index in range(2):
        (line,) = instance_lines(result.stdout, index)
        allowed.append(line.split(":")[1].strip())
    assert allowed == [str(CORES[0]), str(CORES[1])]
    assert "instance 1 (pid" in result.stdout and f"on cpus {CORES[1]}" in result.stdout


def test_environment_reaches_every_instance(kiln_bin):
    script = 'echo "$OMP_NUM_THREADS $KILN_NUM_THREADS $KILN_LAUNCH_INSTANCE $OMP_WAIT_POLICY $KILN_TEST_MARK"'
    # GOMP_SPINCOUNT would override --wait-policy in libgomp: the option takes it out.
    result = launch(kiln_bin, "--throughput", "--wait-policy", "passive", "--", "sh", "-c",
                    script + '; echo "[$GOMP_SPINCOUNT]"', env={"KILN_TEST_MARK": "kept", "GOMP_SPINCOUNT": "1234"})
    assert result.returncode == 0, result.stderr
    for index in range(len(CORES)):
        assert instance_lines(result.stdout, index) == [f"1 1 {index} passive kept", "[]"]
    # One instance on every core: the thread counts are the cores it has.
    result = launch(kiln_bin, "--latency", "--", "sh", "-c", script)
    assert instance_lines(result.stdout, 0) == [f"{len(CORES)} {len(CORES)} 0  "]


def test_throughput_is_reported_per_instance_and_in_total(kiln_bin):
    result = launch(kiln_bin, "--throughput", "--", kiln_bin, "bench", DEMO, "--warmup", 1, "--iters", 5, "--json")
    assert result.returncode == 0, result.stderr
    per_instance = [float(value) for value in re.findall(r"exited with 0; throughput ([0-9.]+) samples/s", result.stdout)]
    assert len(per_instance) == len(CORES) and all(value > 0 for value in per_instance)
    total = float(re.search(r"aggregate throughput ([0-9.]+) samples/s over (\d+) instances", result.stdout).group(1))
    assert total == pytest.approx(sum(per_instance), abs=0.01 * len(per_instance))


def test_exit_codes_and_signals_come_back(kiln_bin):
    assert launch(kiln_bin, "--", "sh", "-c", "exit 3").returncode == 3
    assert launch(kiln_bin, "--", "sh", "-c", "kill -TERM $$").returncode == 128 + 15
    missing = launch(kiln_bin, "--", "/nonexistent/command")
    assert missing.returncode == 127 and "cannot run '/nonexistent/command'" in missing.stderr


def test_jemalloc_is_preloaded_on_request(kiln_bin):
    result = launch(kiln_bin, "--jemalloc", "--", "grep", "-c", "libjemalloc", "/proc/self/maps")
    assert result.returncode == 0, result.stderr
    assert int(instance_lines(result.stdout, 0)[0]) > 0


@pytest.mark.parametrize("args,message", [
    (["--"], "expects a command after '--'"),
    (["--instances", "0", "--", "true"], "--instances expects an integer"),
    (["--instances", "1", "--cores-per-instance", str(len(CORES) + 1), "--", "true"], "--cores-per-instance"),
    (["--wait-policy", "sleepy", "--", "true"], "--wait-policy expects 'passive' or 'active'"),
    (["--throughput", "--latency", "--", "true"], "contradict"),
    (["--pin-harder", "--", "true"], "unknown option '--pin-harder'"),
])
def test_bad_options_are_named(kiln_bin, args, message):
    result = launch(kiln_bin, *args)
    assert result.returncode != 0 and message in result.stderr, result.stderr
