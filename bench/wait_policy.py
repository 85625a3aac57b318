#!/usr/bin/python3
"""kiln's latency under libgomp wait policies, alone and beside a busy process.

    /usr/bin/python3 bench/wait_policy.py [--models resnet50,mobilenet_v2]
        [--policies default,passive,active,spin:1000,spin:10000,spin:100000] [--threads 2]
        [--rounds 4] [--warmup 5] [--iters 30] [--kiln build/kiln]

libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when a process loads it, so every point is a
`kiln bench` process of its own with one policy in its environment ("default": neither variable
set; "spin:N": GOMP_SPINCOUNT=N). The runs use an explicit `--threads`: a count the user chose,
which kiln keeps under load (the default count adapts instead, see docs/backends.md "Under load").
Per round, every model and policy runs without a loader, then with one (bench/loaded.py's: one
unpinned busy process), policies interleaved so that drift of the machine hits them alike. Also per
round, each model runs at 1 thread without a loader (default policy): the reference a user with one
free core would get. Cells are medians over rounds of each process's median latency, in ms. Prints
a markdown table after the machine lines of `kiln info`.
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys

from loaded import Loader
from machine import machine_lines
from run_all import REPO, export_models, log

POLICY_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2")
    parser.add_argument("--policies", default="default,passive,active,spin:1000,spin:10000,spin:100000")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    return parser.parse_args()


def policy_environment(policy):
    env = {name: value for name, value in os.environ.items() if name not in POLICY_VARIABLES}
    if policy in ("passive", "active"):
        env["OMP_WAIT_POLICY"] = policy
    elif policy.startswith("spin:"):
        env["GOMP_SPINCOUNT"] = policy.split(":", 1)[1]
    elif policy != "default":
        sys.exit(f"unknown policy '{policy}' (expected default, passive, active or spin:N)")
    return env


def bench(args, path, threads, policy):
    command = [args.kiln, "bench", str(path), "--threads", str(threads), "--warmup", str(args.warmup),
               "--iters", str(args.iters), "--json"]
    result = subprocess.run(command, env=policy_environment(policy), capture_output=True, text=True, timeout=1800)
    try:
        return json.loads(result.stdout)["median_ms"]
    except (ValueError, KeyError):
        log(f"    failed ({result.returncode}): {result.stderr.strip()[-300:]}")
        return None


def main():
    args = parse_args()
    models = args.models.split(",")
    policies = args.policies.split(",")
    for policy in policies:
        policy_environment(policy)  # an unknown policy stops here, before any run
    paths = export_models(models)
    latencies = {}

    def record(key, value, label):
        latencies.setdefault(key, []).append(value)
        log(f"  {label}: {'failed' if value is None else f'{value:.2f} ms'}")

    for round_index in range(args.rounds):
        tag = f"round {round_index + 1}/{args.rounds}"
        for name in models:
            record((name, "reference"), bench(args, paths[name], 1, "default"), f"{tag} {name} 1 thread alone")
        for load in ("alone", "loaded"):
            with Loader() if load == "loaded" else contextlib.nullcontext():
                for name in models:
                    for policy in policies:
                        record((name, policy, load), bench(args, paths[name], args.threads, policy),
                               f"{tag} {name} {policy} {load}")

    def median(key):
        values = [v for v in latencies.get(key, []) if v is not None]
        return statistics.median(values) if values else None

    def cell(value, digits=2):
        return "n/a" if value is None else f"{value:.{digits}f}"

    print("\n".join(machine_lines(args.kiln)))
    print()
    print(f"kiln bench --threads {args.threads}, batch 1, median latency in ms (median over {args.rounds} rounds of "
          f"each process's median of {args.iters} runs); loaded: one busy process beside it, unpinned. "
          "The last column divides the loaded latency by the model's 1-thread latency alone.")
    print()
    print("| model | policy | alone | loaded | loaded / 1 thread alone |")
    print("|---|---|---:|---:|---:|")
    for name in models:
        reference = median((name, "reference"))
        print(f"| {name} | 1 thread, default | {cell(reference)} | | |")
        for policy in policies:
            alone, loaded = median((name, policy, "alone")), median((name, policy, "loaded"))
            ratio = loaded / reference if loaded and reference else None
            print(f"| {name} | {policy} | {cell(alone)} | {cell(loaded)} | {cell(ratio)} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
