#!/usr/bin/python3
"""Where BLAS beats oneDNN on a single MatMul [M, K] x [K, N] (constant B), the measurement behind
the default of the blas_threshold setting (backends/setting_table.h).

    /usr/bin/python3 bench/blas_crossover.py [--kiln build/kiln] [--threads 1] [--iters 2000]

For each size, builds a one-node model in a temporary folder and times it with `kiln bench`, once with
only BLAS (`--prefer-matmul blas` with the threshold lifted) and once with only oneDNN
(`--prefer-matmul onednn`), and prints the median latencies after the
machine lines of `kiln info`.
"""
import argparse
import json
import subprocess
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from machine import machine_lines

SIZES = [4, 8, 16, 24, 32, 48, 64, 96, 128]


def matmul_model(size, path):
    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((size, size)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size, size])], [weights])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def median_us(kiln, model, backend, threads, iters):
    command = [kiln, "bench", model, "--json", "--threads", str(threads), "--iters", str(iters), "--warmup", "100",
               "--prefer-matmul", backend, "--blas-threshold", str(1 << 30)]
    result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    return result["median_ms"] * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kiln", default="build/kiln")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--iters", type=int, default=2000)
    args = parser.parse_args()
    print("\n".join(machine_lines(args.kiln)))
    print(f"{'M=N=K':>6} {'M*N*K':>9} {'blas us':>9} {'onednn us':>10} {'blas/onednn':>12}")
    with tempfile.TemporaryDirectory() as folder:
        for size in SIZES:
            path = f"{folder}/matmul_{size}.onnx"
            matmul_model(size, path)
            blas = median_us(args.kiln, path, "blas", args.threads, args.iters)
            onednn = median_us(args.kiln, path, "onednn", args.threads, args.iters)
            print(f"{size:>6} {size ** 3:>9} {blas:>9.2f} {onednn:>10.2f} {blas / onednn:>12.2f}")


if __name__ == "__main__":
    main()
