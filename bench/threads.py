#!/usr/bin/python3
"""How latency and throughput move with threads: a sweep of kiln's intra-op threads from 1 to twice
the cores (so oversubscription shows), and of splits into concurrent callers x intra-op threads.

    /usr/bin/python3 bench/threads.py MODEL.onnx [--batch 1] [--warmup 5] [--iters 20]
        [--max-threads 2xCORES] [--out-dir bench/results] [--kiln build/kiln]

Every point is one `kiln bench MODEL --json` process:
- intra-op: `--threads T` for T = 1 .. max-threads, one caller;
- splits: `--callers C --threads T --thread-budget 0` for every C x T <= max-threads with C >= 2 (the
  budget is off so that oversubscription shows; with it, kiln would hand out fewer threads).
Writes threads.csv (kind, callers, threads, total threads, median and p90 latency in ms, samples/s)
and threads.png (latency and throughput against total threads, the cores marked), like the figure
in PyTorch's CPU threading note, and prints the machine lines of `kiln info` and the CSV's path.
"""
import argparse
import csv
import json
import os
import pathlib
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.ticker import MaxNLocator  # noqa: E402

from machine import machine_lines  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
COLUMNS = ["kind", "callers", "threads", "total_threads", "median_ms", "p90_ms", "throughput_per_s"]


def parse_args():
    cores = len(os.sched_getaffinity(0))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--max-threads", type=int, default=2 * cores)
    parser.add_argument("--out-dir", default=str(REPO / "bench" / "results"))
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    args = parser.parse_args()
    args.cores = cores
    return args


def bench(args, callers, threads):
    command = [args.kiln, "bench", args.model, "--batch", str(args.batch), "--warmup", str(args.warmup),
               "--iters", str(args.iters), "--threads", str(threads), "--callers", str(callers), "--json"]
    if callers > 1:
        command += ["--thread-budget", "0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"threads.py: {' '.join(command)} failed: {done.stderr.strip()}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {"kind": "intra-op" if callers == 1 else "split", "callers": callers, "threads": threads,
            "total_threads": callers * threads, "median_ms": result["median_ms"], "p90_ms": result["p90_ms"],
            "throughput_per_s": result["throughput_per_s"]}


def plot(rows, args, path):
    figure, (latency, throughput) = plt.subplots(1, 2, figsize=(11, 4.2))
    intra = [row for row in rows if row["kind"] == "intra-op"]
    latency.plot([r["total_threads"] for r in intra], [r["median_ms"] for r in intra], "o-", label="1 caller")
    throughput.plot([r["total_threads"] for r in intra], [r["throughput_per_s"] for r in intra], "o-",
                    label="1 caller, T threads")
    for callers in sorted({row["callers"] for row in rows if row["kind"] == "split"}):
        split = [row for row in rows if row["callers"] == callers]
        latency.plot([r["total_threads"] for r in split], [r["median_ms"] for r in split], "s--",
                     label=f"{callers} callers")
        throughput.plot([r["total_threads"] for r in split], [r["throughput_per_s"] for r in split], "s--",
                        label=f"{callers} callers x T threads")
    for axis, label in ((latency, "median latency (ms)"), (throughput, "samples/s (all callers)")):
        axis.axvline(args.cores, color="grey", linestyle=":", label=f"{args.cores} cores")
        axis.set_xlabel("threads in use (callers x intra-op threads)")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle(f"{pathlib.Path(args.model).name}, batch {args.batch}: {machine_lines(args.kiln)[0]}",
                    fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main():
    args = parse_args()
    rows = [bench(args, 1, threads) for threads in range(1, args.max_threads + 1)]
    for callers in range(2, args.max_threads + 1):
        for threads in range(1, args.max_threads // callers + 1):
            rows.append(bench(args, callers, threads))
    out_dir = pathlib.Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "threads.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, args, out_dir / "threads.png")
    print("\n".join(machine_lines(args.kiln)))
    print(f"wrote {out_dir / 'threads.csv'} and {out_dir / 'threads.png'}")


if __name__ == "__main__":
    main()
