#!/usr/bin/python3
"""`kiln launch` layouts compared: one single-core instance per core against one instance on every
core, at batch 1, with each allocator it can preload (tcmalloc, its default; jemalloc; the C library's).

    /usr/bin/python3 bench/launch.py [--models resnet50,mobilenet_v2] [--rounds 3] [--iters 30]
        [--kiln build/kiln]

Per round and model, runs `kiln launch --ncores-per-instance 1 -- kiln bench MODEL --json` and
`kiln launch -- kiln bench MODEL --json` (each with --enable-tcmalloc, --enable-jemalloc and
--use-default-allocator), order rotated per round, and reads the aggregate throughput and each
instance's median latency. Prints a markdown table (medians
over rounds) after the machine lines of `kiln info`.
"""
import argparse
import json
import re
import statistics
import subprocess

from machine import machine_lines
from run_all import REPO, export_models, log

SPLITS = {"one instance per core, 1 thread each": ["--ncores-per-instance", "1"], "one instance, every core": []}
ALLOCATORS = {"tcmalloc": "--enable-tcmalloc", "jemalloc": "--enable-jemalloc", "C library": "--use-default-allocator"}
LAYOUTS = [(split, allocator) for allocator in ALLOCATORS for split in SPLITS]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    return parser.parse_args()


def run_layout(kiln, path, split, allocator, iters):
    """(aggregate samples/s, median of the instances' median latencies in ms), or None on failure."""
    command = [kiln, "launch", *SPLITS[split], ALLOCATORS[allocator], "--", kiln, "bench", path,
               "--warmup", "5", "--iters", str(iters), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    total = re.search(r"aggregate throughput ([0-9.]+) samples/s", done.stdout)
    if done.returncode != 0 or not total:
        log(f"  failed: {' '.join(command)}: {done.stderr.strip()[-300:]}")
        return None
    medians = [json.loads(line.split("] ", 1)[1])["median_ms"]
               for line in done.stdout.splitlines() if line.startswith("[instance ") and '"median_ms"' in line]
    return float(total.group(1)), statistics.median(medians)


def main():
    args = parse_args()
    models = args.models.split(",")
    paths = export_models(models)
    results = {}
    for round_index in range(args.rounds):
        for name in models:
            shift = round_index % len(LAYOUTS)
            for split, allocator in LAYOUTS[shift:] + LAYOUTS[:shift]:
                log(f"round {round_index + 1}/{args.rounds}: {name}, {split}, {allocator}")
                results.setdefault((name, split, allocator), []).append(
                    run_layout(args.kiln, paths[name], split, allocator, args.iters))

    def median_of(values, index):
        values = [v[index] for v in values if v is not None]
        return f"{statistics.median(values):.2f}" if values else "n/a"

    print("\n".join(machine_lines(args.kiln)))
    print()
    print(f"Batch 1; medians over {args.rounds} rounds; each instance times {args.iters} runs.")
    print()
    print("| model | layout | allocator | samples/s (all instances) | median latency ms |")
    print("|---|---|---|---:|---:|")
    for name in models:
        for split, allocator in LAYOUTS:
            values = results[(name, split, allocator)]
            print(f"| {name} | {split} | {allocator} | {median_of(values, 0)} | {median_of(values, 1)} |")


if __name__ == "__main__":
    main()
