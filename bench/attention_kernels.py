#!/usr/bin/python3
"""Times kiln's attention kernels (math, flash, onednn; bf16 with --bf16) against PyTorch's unfused
attention (matmul, softmax, matmul in eager mode, as PyTorch 1.13 runs an exported encoder's), on the
same arrays in one process, and kiln's peak memory per kernel.

    /usr/bin/python3 bench/attention_kernels.py [--threads 1] [--shapes 4x128x64,1x2048x64] [--iters 50] [--bf16]

Shapes are heads x L x head dim (L queries and keys, no mask). Each figure is the median of --iters
calls after two untimed ones. Memory: the counting allocator's peak while one call runs on a fresh
thread (kernels keep per-thread buffers), one thread.
"""
import argparse
import pathlib
import statistics
import sys
import threading
import time

import numpy as np
import torch

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "build" / "python"))
import kiln  # noqa: E402
from machine import machine_lines  # noqa: E402

KERNELS = ["math", "flash", "onednn"]
DEFAULT_SHAPES = "4x128x64,12x128x64,96x128x64,4x512x64,12x512x64,1x2048x64"


def median_ms(fn, iters):
    fn()
    fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def peak_mib(kernel, q):
    peak = {}

    def measure():
        with kiln.backends.sdpa_kernel([kernel]), kiln.backends.settings(threads=1):
            kiln.backends.allocator.reset_counts()
            before = kiln.backends.allocator.counts()["live_bytes"]
            kiln.functional.scaled_dot_product_attention(q, q, q)
            peak["mib"] = (kiln.backends.allocator.counts()["peak_live_bytes"] - before) / 2**20

    thread = threading.Thread(target=measure)
    thread.start()
    thread.join()
    return peak["mib"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--shapes", default=DEFAULT_SHAPES)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--bf16", action="store_true", help="also time the kernels under matmul_precision bf16")
    args = parser.parse_args()
    kiln.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    print("```")
    print("\n".join(machine_lines(str(REPO / "build" / "kiln"))))
    print("```")
    print(f"\n{args.threads} thread(s), median ms of {args.iters} calls; peak MiB on one thread\n")
    variants = [(kernel, "fp32") for kernel in KERNELS] + ([(k, "bf16") for k in KERNELS] if args.bf16 else [])
    print("| heads x L x E | " + " | ".join(f"{k} {p}" for k, p in variants) + " | PyTorch unfused | "
          + " | ".join(f"{k} MiB" for k in KERNELS) + " |")
    print("|---|" + "---:|" * (len(variants) + 1 + len(KERNELS)))
    rng = np.random.default_rng(0)
    previous_allocator = kiln.backends.allocator.name()
    for text in args.shapes.split(","):
        shape = tuple(int(d) for d in text.split("x"))
        q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
        cells = []
        for kernel, precision in variants:
            with kiln.backends.sdpa_kernel([kernel]), kiln.backends.settings(matmul_precision=precision):
                cells.append(f"{median_ms(lambda: kiln.functional.scaled_dot_product_attention(q, k, v), args.iters):.3f}")
        tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
        scale = 1 / shape[-1] ** 0.5
        with torch.no_grad():
            cells.append(f"{median_ms(lambda: torch.softmax(tq @ tk.transpose(-1, -2) * scale, -1) @ tv, args.iters):.3f}")
        kiln.backends.allocator.use("counting")
        try:
            cells += [f"{peak_mib(kernel, q):.1f}" for kernel in KERNELS]
        finally:
            kiln.backends.allocator.use(previous_allocator)
        print(f"| {text} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
