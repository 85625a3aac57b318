#!/usr/bin/python3
"""Is a change to kiln speed-neutral? Two kiln binaries, `kiln bench` interleaved, same machine, same run.

    /usr/bin/python3 bench/compare_binaries.py OLD_KILN NEW_KILN [--models resnet18,mobilenet_v2,...]
        [--threads 1,2] [--rounds 3] [--iters 50] [--warmup 10] [--model-cache /tmp/kiln-models]

For every model and thread count, each round runs OLD then NEW (alternating which goes first), each
in its own process with `kiln bench --json`. A binary's time for a (model, threads) pair is the
median over rounds of each process's median run. Prints NEW/OLD per pair (below 1: NEW is faster),
the geometric mean per thread count and over all pairs, and the largest deviation. Models come
from the export cache tests/python/export_models.py fills (`<name>_opset13_v2.onnx`).
"""
import argparse
import json
import math
import pathlib
import statistics
import subprocess
import sys

from machine import machine_lines

DEFAULT_MODELS = "resnet18,mobilenet_v2,squeezenet1_1,googlenet,transformer"


def bench(kiln, model, threads, args):
    command = [kiln, "bench", str(model), "--json", "--threads", str(threads), "--iters", str(args.iters),
               "--warmup", str(args.warmup)]
    result = subprocess.run(command, check=True, capture_output=True, text=True, timeout=1800)
    return json.loads(result.stdout)["median_ms"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--model-cache", default="/tmp/kiln-models")
    args = parser.parse_args()

    for line in machine_lines(args.new):
        print(line)
    ratios = {}
    for threads in [int(t) for t in args.threads.split(",")]:
        for name in args.models.split(","):
            model = pathlib.Path(args.model_cache) / f"{name}_opset13_v2.onnx"
            if not model.exists():
                sys.exit(f"{model} is missing: export it first (tests/python/export_models.py)")
            times = {"old": [], "new": []}
            for round_index in range(args.rounds):
                order = ["old", "new"] if round_index % 2 == 0 else ["new", "old"]
                for which in order:
                    times[which].append(bench(getattr(args, which), model, threads, args))
            old, new = statistics.median(times["old"]), statistics.median(times["new"])
            ratios[(name, threads)] = new / old
            print(f"{name:20s} {threads} thread(s): old {old:8.3f} ms  new {new:8.3f} ms  new/old {new / old:.3f}",
                  flush=True)

    def geomean(values):
        return math.exp(sum(math.log(v) for v in values) / len(values))

    for threads in sorted({t for _, t in ratios}):
        print(f"geomean new/old at {threads} thread(s): {geomean([r for (_, t), r in ratios.items() if t == threads]):.3f}")
    print(f"geomean new/old overall: {geomean(list(ratios.values())):.3f}")
    worst = max(ratios.items(), key=lambda item: abs(math.log(item[1])))
    print(f"largest deviation: {worst[0][0]} at {worst[0][1]} thread(s): {worst[1]:.3f}")


if __name__ == "__main__":
    main()
