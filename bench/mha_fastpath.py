#!/usr/bin/python3
"""What the MHA fast path buys: kiln with it (default) and without (`--mha-fastpath 0`), and ONNX Runtime,
side by side on the transformer encoders, each in its own process, rotating the order per round.

    /usr/bin/python3 bench/mha_fastpath.py [--models transformer,transformer768] [--configs b1t1,b1t2,b8t1,b8t2]
        [--rounds 5] [--kiln build/kiln]

Each figure is the median over rounds of a run's median latency (`kiln bench --json`, bench/ort_bench.js with
the warm-up and iteration counts of bench/run_all.py's configs). Prints the machine lines of `kiln info`, then a
markdown table: the plan's step counts, latencies, fast/off (< 1: the fast path is faster) and each kiln
variant against ONNX Runtime.
"""
import argparse
import json
import statistics
import subprocess
import sys

import run_all
from machine import machine_lines

VARIANTS = {"kiln fast path": [], "kiln off": ["--mha-fastpath", "0"]}


def step_count(kiln, path, extra):
    text = subprocess.run([kiln, "explain", path, *extra], check=True, text=True, capture_output=True).stdout
    return int(text.splitlines()[1].split()[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="transformer,transformer768")
    parser.add_argument("--configs", default="b1t1,b1t2,b8t1,b8t2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kiln", default="build/kiln")
    args = parser.parse_args()
    models = run_all.export_models(args.models.split(","))
    print("\n".join(machine_lines(args.kiln)))
    print("\n| model | config | steps fast / off | fast path ms | off ms | fast/off | fast/ORT | off/ORT | ORT ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for name, path in models.items():
        steps = "/".join(str(step_count(args.kiln, path, extra)) for extra in VARIANTS.values())
        for config in args.configs.split(","):
            batch, threads, warmup, iters = run_all.CONFIGS[config]
            sizes = ["--batch", str(batch), "--threads", str(threads), "--warmup", str(warmup), "--iters", str(iters)]
            commands = {variant: [args.kiln, "bench", path, *sizes, *extra, "--json"] for variant, extra in VARIANTS.items()}
            commands["ort"] = ["node", str(run_all.REPO / "bench" / "ort_bench.js"), path, *sizes, "--kiln", args.kiln]
            times = {runtime: [] for runtime in commands}
            order = list(commands)
            for round_index in range(args.rounds):
                shift = round_index % len(order)
                for runtime in order[shift:] + order[:shift]:
                    result = run_all.run_json(commands[runtime])
                    if "median_ms" not in result:
                        sys.exit(f"{name} {config} {runtime}: {result.get('error')}")
                    times[runtime].append(result["median_ms"])
            ms = {runtime: statistics.median(values) for runtime, values in times.items()}
            fast, off, ort = ms["kiln fast path"], ms["kiln off"], ms["ort"]
            ratios.append(fast / off)
            print(f"| {name} | {config} | {steps} | {fast:.2f} | {off:.2f} | {fast / off:.3f} | {fast / ort:.2f} | "
                  f"{off / ort:.2f} | {ort:.2f} |", flush=True)
    print(f"| **geomean** | | | | | {run_all.geomean(ratios):.3f} | | | |")
    print("\n" + json.dumps({"machine": machine_lines(args.kiln), "fast_over_off": ratios}))


if __name__ == "__main__":
    main()
