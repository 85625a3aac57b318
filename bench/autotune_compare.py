#!/usr/bin/python3
"""Does autotune pick kernels at least as fast as the default choice? Per node, side by side.

    /usr/bin/python3 bench/autotune_compare.py [--models resnet18,mobilenet_v2,transformer] [--batch 1]
        [--threads 1] [--candidates 4] [--runs 20] [--rounds 2] [--precision fp32] [--kiln build/kiln]

For each model, `kiln explain --profile RUNS` runs the default plan and the autotuned plan
(`--autotune --autotune-limit CANDIDATES`: up to CANDIDATES kernels timed per node) in alternating
processes, ROUNDS times each; a step's time is the median over rounds of its median over runs. Steps
are matched by node name. Nodes where autotune timed more than one candidate (marked "autotune:" in
the plan) are counted; those where it chose another kernel than the default are compared (elsewhere
both plans run the same kernel). Prints each changed node and, per model, how many autotune made
faster, equal (within 5%) or slower, their total time, and the sum of all steps of each plan (Reorder
steps included, which a changed layout may add or remove). The machine lines of `kiln info` come
first.
"""
import argparse
import pathlib
import re
import statistics
import subprocess
import sys

from machine import machine_lines

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "python"))
import export_models  # noqa: E402

STEP = re.compile(r"^\s*(\d+) (\S+)\s+(.+?)\s+(\S+)$")
TIME = re.compile(r"(\d+\.\d+) ms$")


def profile(args, path, extra):
    """{node name: (kernel, ms)} and the set of nodes autotune timed, from one `kiln explain --profile`."""
    command = [args.kiln, "explain", path, "--batch", str(args.batch), "--threads", str(args.threads),
               "--profile", str(args.runs), "--precision", args.precision, *extra]
    lines = subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()
    steps, tuned, current = {}, set(), None
    for line in lines:
        if line.startswith("time by op"):
            break
        step = STEP.match(line)
        if step and not line.startswith("      "):
            current = step.group(3)
            steps[current] = [step.group(4), 0.0]
            continue
        if current is None:
            continue
        time = TIME.search(line)
        if time and "->" in line:
            steps[current][1] = float(time.group(1))
        if "autotune:" in line:
            tuned.add(current)
    return steps, tuned


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18,mobilenet_v2,transformer")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--candidates", type=int, default=4,
                        help="candidate kernels autotune times per node (kiln's --autotune-limit; 0: all)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    args = parser.parse_args()
    print("\n".join(machine_lines(args.kiln)))
    for name in args.models.split(","):
        path = str(export_models.cached_export(name, None, 13))
        default_runs, tuned_runs, tuned_nodes = [], [], set()
        for _ in range(args.rounds):
            default_runs.append(profile(args, path, [])[0])
            steps, tuned = profile(args, path, ["--autotune", "--autotune-limit", str(args.candidates)])
            tuned_runs.append(steps)
            tuned_nodes |= tuned
        # Where autotune kept the default kernel, any difference is noise; only changed choices count.
        changed = [node for node in sorted(tuned_nodes) if tuned_runs[0][node][0] != default_runs[0][node][0]]
        faster = equal = slower = 0
        total_default = total_tuned = 0.0
        for node in changed:
            before = statistics.median(run[node][1] for run in default_runs if node in run)
            after = statistics.median(run[node][1] for run in tuned_runs if node in run)
            total_default += before
            total_tuned += after
            verdict = "faster" if after < before * 0.95 else "slower" if after > before * 1.05 else "equal"
            faster, equal, slower = faster + (verdict == "faster"), equal + (verdict == "equal"), slower + (verdict == "slower")
            print(f"  {name} {node}: default {default_runs[0][node][0]} {before:.3f} ms, "
                  f"autotuned {tuned_runs[0][node][0]} {after:.3f} ms ({verdict})")
        whole_default = statistics.median(sum(ms for _, ms in run.values()) for run in default_runs)
        whole_tuned = statistics.median(sum(ms for _, ms in run.values()) for run in tuned_runs)
        print(f"{name}: all steps sum to {whole_default:.3f} ms default, {whole_tuned:.3f} ms autotuned "
              f"({len(default_runs[0])} and {len(tuned_runs[0])} steps)")
        print(f"{name} (batch {args.batch}, {args.threads} threads, {args.precision}): {len(tuned_nodes)} nodes timed, "
              f"{len(changed)} got another kernel than the default: faster on {faster}, equal within 5% on {equal}, "
              f"slower on {slower}; those nodes sum to {total_default:.3f} ms default, {total_tuned:.3f} ms autotuned")


if __name__ == "__main__":
    main()
