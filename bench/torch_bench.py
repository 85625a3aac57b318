#!/usr/bin/python3
"""Times PyTorch (CPU, fp32) on one model of the parity set, the way bench/ort_bench.js times ONNX Runtime.

    /usr/bin/python3 bench/torch_bench.py NAME [--batch B] [--threads N] [--warmup W] [--iters N]
        [--kiln build/kiln]

NAME is a model known to tests/python/export_models.py; the module is built by its build(), so the
weights are the same seeded ones that were exported to ONNX. The module is traced, frozen and passed
through torch.jit.optimize_for_inference under no_grad (falling back to eager eval if that fails; the
"mode" key says which ran). At least 2 warm-up runs are made (see main). Prints one JSON line with the
keys of ort_bench.js (including "machine", the cpu lines of `kiln info`) plus "warmup", "mode" and
"openblas".
"""
import argparse
import ctypes
import json
import pathlib
import sys
import time

import torch

from machine import machine_lines

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "python"))
import export_models  # noqa: E402  (needs the path above)

JIT_PROFILING_RUNS = 2


def pin_openblas_to_one_thread():
    """OpenBLAS keeps its own thread count, independent of torch.set_num_threads; pin it to 1 so that
    PyTorch uses exactly the threads we ask for. Returns a note for the JSON output."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "openblas" in line.split()[-1]}
    for path in sorted(paths):
        try:
            ctypes.CDLL(path).openblas_set_num_threads(1)
            return f"pinned to 1 thread ({path})"
        except (OSError, AttributeError):
            continue
    return "not pinned: no loaded library exports openblas_set_num_threads"


def compile_for_inference(model, example):
    """The fastest module PyTorch 1.13 offers for inference, and a word on how it was made."""
    try:
        traced = torch.jit.trace(model, example)
        return torch.jit.optimize_for_inference(torch.jit.freeze(traced)), "trace+freeze+optimize_for_inference"
    except Exception as error:  # noqa: BLE001  (any failure here just means: time the eager module)
        return model, f"eager (trace/freeze failed: {type(error).__name__}: {error})".splitlines()[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=export_models.MODELS)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"), help="kiln binary that names the machine")
    args = parser.parse_args()
    machine = machine_lines(args.kiln)

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # only allowed before any inter-op work; the default is 1 here anyway
        pass
    openblas = pin_openblas_to_one_thread()

    model, _ = export_models.build(args.name)
    example = export_models.random_input(args.name, args.batch, torch.Generator().manual_seed(export_models.SEED))
    with torch.no_grad():
        model, mode = compile_for_inference(model, example)
        # A scripted module's first two calls profile and then optimize its graph (the JIT's profiling
        # executor) and run ~1.5-2x slower: never time them, whatever --warmup says.
        warmup = max(args.warmup, JIT_PROFILING_RUNS)
        for _ in range(warmup):
            model(example)
        times_ms = []
        for _ in range(args.iters):
            start = time.perf_counter()
            model(example)
            times_ms.append((time.perf_counter() - start) * 1e3)
    times_ms.sort()

    def pick(fraction):  # same rounding as ort_bench.js and kiln bench
        return times_ms[min(len(times_ms) - 1, int(fraction * (len(times_ms) - 1) + 0.5))]

    print(json.dumps({"runtime": "pytorch", "version": torch.__version__, "model": args.name, "batch": args.batch,
                      "threads": torch.get_num_threads(), "median_ms": pick(0.5), "p10_ms": pick(0.1),
                      "p90_ms": pick(0.9), "warmup": warmup, "mode": mode, "openblas": openblas, "machine": machine}))


if __name__ == "__main__":
    main()
