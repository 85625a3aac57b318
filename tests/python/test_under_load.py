"""Under load: a kiln run at the default thread count gives up the cores other processes keep busy
(adapt_to_load), says so in verbose and in kiln bench, and keeps its threads when a count was set
or the setting is off. The logic with a simulated load is in tests/unit/session_test.cpp; this runs
real busy processes beside kiln."""
import os
import re
import subprocess
import time

import pytest

import kiln_cli

DEMO = kiln_cli.REPO / "models" / "demo.onnx"
CORES = len(os.sched_getaffinity(0))
COUNT_VARIABLES = ("KILN_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS", "KILN_ADAPT_TO_LOAD")


@pytest.fixture
def busy_cores():
    """Busy processes on all cores but one, for the duration of a test."""
    if not 2 <= CORES <= 8:
        pytest.skip(f"needs 2 to 8 cores to keep all but one busy (this process may use {CORES})")
    loaders = [subprocess.Popen(["/usr/bin/python3", "-c", "while True: pass"]) for _ in range(CORES - 1)]
    time.sleep(0.3)
    yield CORES - 1
    for loader in loaders:
        loader.kill()
        loader.wait()


def bench_runs(kiln_bin, *options):
    """`kiln bench` of the demo for about a second: its `run` lines and its stdout. The verbose level
    is the native backend's, which runs none of the demo's steps: only runs and the info line print."""
    env = {name: value for name, value in os.environ.items() if name not in COUNT_VARIABLES}
    result = subprocess.run([str(kiln_bin), "bench", DEMO, "--warmup", "0", "--iters", "20000", "--native-verbose", "1",
                             *map(str, options)], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if line.startswith("kiln_verbose,run,")], result.stdout


def test_runs_at_the_default_count_give_up_busy_cores(kiln_bin, busy_cores):
    runs, stdout = bench_runs(kiln_bin)
    adapted = [line for line in runs if ",free cores:" in line]
    assert adapted, f"no run adapted to {busy_cores} busy cores: {runs[:5]}"
    for line in adapted:
        threads, asked, free = map(int, re.search(r"threads:(\d+),asked:(\d+),free cores:(\d+)", line).groups())
        assert asked == CORES and threads == free < CORES, line
        assert float(re.search(r"busy elsewhere:([0-9.]+) cores", line).group(1)) >= 0.5, line
    assert re.search(rf"fewer threads: \d+ of 20000 timed runs ran on fewer than {CORES}", stdout), stdout


def test_a_count_that_was_set_or_the_setting_off_keeps_every_thread(kiln_bin, busy_cores):
    for options in (("--threads", CORES), ("--adapt-to-load", 0)):
        runs, stdout = bench_runs(kiln_bin, *options)
        assert not [line for line in runs if ",free cores:" in line], options
        assert "fewer threads:" not in stdout, options
