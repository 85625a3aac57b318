#!/usr/bin/python3
"""Inter-op parallelism, measured: kiln's parallel execution mode against its sequential one and
against ONNX Runtime's sequential and parallel executors, and concurrent callers with and without
kiln's thread budget.

    /usr/bin/python3 bench/interop.py [--models googlenet,inception_v3] [--threads 1,2] [--rounds 3]
        [--iters 20] [--callers 2] [--caller-models googlenet,resnet50] [--kiln build/kiln]

Part 1, per model and thread count, runs in separate processes, interleaved, the order rotated per
round: `kiln bench --execution-mode sequential|parallel` and bench/ort_bench.js with
`--execution-mode sequential` (inter-op 1) and `parallel` (inter-op threads = the cores, as many as
kiln's parallel mode may use beside the intra-op ones). Each cell is the median over rounds of each process's median
latency. Part 2 runs `kiln bench --callers C` with `--thread-budget 0` (no budget: every caller's run
takes its threads) and with the default budget (the cores), and reports runs per second over all
callers and the median latency. Prints a markdown table after the machine lines of `kiln info`.
Needs onnxruntime-node in bench/node_modules (see docs/performance.md); without it the ONNX
Runtime columns read n/a.
"""
import argparse
import os
import pathlib
import statistics

from machine import machine_lines
from run_all import export_models, log, run_json

REPO = pathlib.Path(__file__).resolve().parent.parent


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="googlenet,inception_v3")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--callers", type=int, default=2)
    parser.add_argument("--caller-models", default="googlenet,resnet50")
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    return parser.parse_args()


def run_result(command):
    """The JSON object `command` prints last, or None (logged) when it failed."""
    result = run_json(command)
    if "error" in result:
        log(f"  failed: {' '.join(command)}: {result['error']}")
        return None
    return result


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def cell(value, digits=2):
    return "n/a" if value is None else f"{value:.{digits}f}"


def ratio(a, b):
    return None if a is None or b is None else a / b


def main():
    args = parse_args()
    models = args.models.split(",")
    caller_models = args.caller_models.split(",")
    thread_counts = [int(t) for t in args.threads.split(",")]
    paths = export_models(sorted(set(models + caller_models)))
    warmup = "5"
    iters = str(args.iters)

    def kiln(path, threads, mode):
        result = run_result([args.kiln, "bench", path, "--threads", str(threads), "--execution-mode", mode,
                             "--warmup", warmup, "--iters", iters, "--json"])
        return result and result["median_ms"]

    def ort(path, threads, mode):
        interop = len(os.sched_getaffinity(0)) if mode == "parallel" else 1
        result = run_result(["node", "bench/ort_bench.js", path, "--threads", str(threads), "--execution-mode",
                             mode, "--interop", str(interop), "--warmup", warmup, "--iters", iters, "--kiln", args.kiln])
        return result and result["median_ms"]

    runners = {"kiln sequential": lambda p, t: kiln(p, t, "sequential"),
               "kiln parallel": lambda p, t: kiln(p, t, "parallel"),
               "ORT sequential": lambda p, t: ort(p, t, "sequential"),
               "ORT parallel": lambda p, t: ort(p, t, "parallel")}
    latencies = {}
    for round_index in range(args.rounds):
        for name in models:
            for threads in thread_counts:
                order = list(runners)
                order = order[round_index % len(order):] + order[:round_index % len(order)]
                for runner in order:
                    log(f"round {round_index + 1}/{args.rounds}: {name} t{threads} {runner}")
                    latencies.setdefault((name, threads, runner), []).append(runners[runner](paths[name], threads))

    callers = {}
    for round_index in range(args.rounds):
        for name in caller_models:
            for budget in (["0", None] if round_index % 2 == 0 else [None, "0"]):
                log(f"round {round_index + 1}/{args.rounds}: {name} {args.callers} callers, budget {budget or 'default'}")
                command = [args.kiln, "bench", paths[name], "--threads", "2", "--callers", str(args.callers),
                           "--warmup", "10", "--iters", str(max(args.iters, 50)), "--json"]
                if budget is not None:
                    command += ["--thread-budget", budget]
                result = run_result(command)
                key = (name, "off" if budget == "0" else "default")
                callers.setdefault(key, []).append(result)

    print("\n".join(machine_lines(args.kiln)))
    print()
    print(f"Batch 1, median latency in ms (median over {args.rounds} rounds of each process's median of {iters} runs).")
    print()
    print(f"ONNX Runtime parallel: inter-op threads {len(os.sched_getaffinity(0))} (the cores).")
    print()
    print("| model | threads | kiln sequential | kiln parallel | parallel/sequential | ORT sequential | ORT parallel"
          " | kiln parallel/ORT best |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in models:
        for threads in thread_counts:
            m = {runner: median_or_none(latencies[(name, threads, runner)]) for runner in runners}
            ort_values = [v for v in (m["ORT sequential"], m["ORT parallel"]) if v is not None]
            ort_best = min(ort_values) if ort_values else None
            print(f"| {name} | {threads} | {cell(m['kiln sequential'])} | {cell(m['kiln parallel'])} | "
                  f"{cell(ratio(m['kiln parallel'], m['kiln sequential']))} | {cell(m['ORT sequential'])} | "
                  f"{cell(m['ORT parallel'])} | {cell(ratio(m['kiln parallel'], ort_best))} |")
    print()
    print(f"{args.callers} callers, 2 threads each, batch 1: runs per second over all callers and the median "
          "latency (median over rounds).")
    print()
    print("| model | budget | runs/s | median ms | p90 ms |")
    print("|---|---|---:|---:|---:|")
    for name in caller_models:
        for budget in ("off", "default"):
            results = [r for r in callers.get((name, budget), []) if r]
            label = "off (--thread-budget 0)" if budget == "off" else "the cores (default)"
            print(f"| {name} | {label} | {cell(median_or_none([r['throughput_per_s'] for r in results]), 1)} | "
                  f"{cell(median_or_none([r['median_ms'] for r in results]))} | "
                  f"{cell(median_or_none([r['p90_ms'] for r in results]))} |")


if __name__ == "__main__":
    main()
