"""The lines of `kiln info` that name the machine, for the bench scripts to print with their results.

kiln's speed, and which kernels it picks, differ from CPU to CPU, so a result means little without
them. bench/ort_bench.js reads the same lines for its JSON.
"""
import subprocess

MACHINE_LINE_PREFIXES = ("cpu:", "cpu capability:", "isa in effect:")


def machine_lines(kiln):
    """The `cpu:`, `cpu capability:` and `isa in effect:` lines of `kiln info`, or one line saying why
    there are none (a script that does not need kiln to time its runtime still reports its results)."""
    try:
        info = subprocess.run([kiln, "info"], check=True, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as error:
        return [f"machine: unknown ({kiln} info failed: {error})"]
    return [line for line in info.splitlines() if line.startswith(MACHINE_LINE_PREFIXES)]
