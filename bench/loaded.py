#!/usr/bin/python3
"""Latency on a machine where another process keeps one core busy, for kiln, ONNX Runtime and PyTorch.

    /usr/bin/python3 bench/loaded.py [--models resnet50,mobilenet_v2] [--runtimes kiln,kiln_default,ort,pytorch]
        [--rounds 2] [--warmup 5] [--iters 20] [--kiln build/kiln] [--kiln-args "..."]

The loader is one process spinning in a busy loop (`/usr/bin/python3 -c "while True: pass"`), not
pinned: the scheduler shares the cores between it and the runtime as it would with any other
tenant. Per round and model, every runtime runs in its own process (bench/run_all.py's runners, order
rotated per round) at 1 and 2 threads without the loader, then at 1 and 2 threads with it. Each cell
is the median over rounds of each process's median latency (batch 1). The last column is the loaded
2-thread latency over the runtime's own unloaded 1-thread latency: how much worse a user does by
keeping 2 threads on a machine that has lost a core than by using one core. Prints a markdown table
after the machine lines of `kiln info`.

`kiln` is given `--threads 2`: a count the user chose, which kiln keeps under load. `kiln_default` is
given no count at 2 threads, so it runs at its default (the cores: 2 on a 2-core machine) and gives up
the cores other processes keep busy (the adapt_to_load setting).
"""
import argparse
import statistics
import subprocess
import sys
import time
from types import SimpleNamespace

from machine import machine_lines
from run_all import REPO, export_models, kiln_has_json, log, run_once

CONFIGS = [("unloaded", 1), ("unloaded", 2), ("loaded", 1), ("loaded", 2)]
LOADER = ["/usr/bin/python3", "-c", "while True: pass"]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2")
    parser.add_argument("--runtimes", default="kiln,kiln_default,ort,pytorch")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    parser.add_argument("--kiln-args", default="", help="extra `kiln bench` options")
    return parser.parse_args()


class Loader:
    """A busy process for the duration of a `with` block."""

    def __enter__(self):
        self.process = subprocess.Popen(LOADER)
        time.sleep(0.5)  # let it reach its loop
        return self

    def __exit__(self, *exc):
        self.process.kill()
        self.process.wait()


def main():
    args = parse_args()
    models = args.models.split(",")
    runtimes = args.runtimes.split(",")
    paths = export_models(models)
    runner_args = SimpleNamespace(kiln=args.kiln, kiln_args=args.kiln_args, kiln_json=kiln_has_json(args.kiln))
    latencies = {}

    def measure(name, load, threads, round_index):
        shift = round_index % len(runtimes)
        for runtime in runtimes[shift:] + runtimes[:shift]:
            result = run_once(runtime, name, paths[name], 1, threads, args.warmup, args.iters, runner_args)
            shown = f"{result['median_ms']:.2f} ms" if "median_ms" in result else f"error: {result['error']}"
            log(f"  round {round_index + 1}/{args.rounds} {name} {load} t{threads} {runtime}: {shown}")
            latencies.setdefault((name, runtime, load, threads), []).append(result.get("median_ms"))

    for round_index in range(args.rounds):
        for name in models:
            for threads in (1, 2):
                measure(name, "unloaded", threads, round_index)
            with Loader():
                for threads in (1, 2):
                    measure(name, "loaded", threads, round_index)

    def median(key):
        values = [v for v in latencies.get(key, []) if v is not None]
        return statistics.median(values) if values else None

    def cell(value):
        return "n/a" if value is None else f"{value:.2f}"

    print("\n".join(machine_lines(args.kiln)))
    print()
    print(f"Batch 1, median latency in ms (median over {args.rounds} rounds of each process's median of "
          f"{args.iters} runs); loaded: `{' '.join(LOADER)}` running beside it, unpinned.")
    print()
    print("| model | runtime | unloaded 1t | unloaded 2t | loaded 1t | loaded 2t | loaded 2t / unloaded 1t |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in models:
        for runtime in runtimes:
            m = {config: median((name, runtime, *config)) for config in CONFIGS}
            base, worst = m[("unloaded", 1)], m[("loaded", 2)]
            ratio = worst / base if base and worst else None
            print(f"| {name} | {runtime} | " + " | ".join(cell(m[config]) for config in CONFIGS) +
                  f" | {cell(ratio)} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
