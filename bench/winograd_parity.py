#!/usr/bin/python3
"""How far each model's output moves from PyTorch's under each conv_algorithm: max |kiln - torch| / max(1,
max |torch|) on the model-parity test's inputs (tests/python/test_model_parity.py, whose tolerance is
1e-4), with the Winograd tiles each plan took (`kiln explain`).

    /usr/bin/python3 bench/winograd_parity.py [--models resnet18,vgg16,...] [--batches 1,4]
        [--algorithms direct,auto,winograd] [--kiln build/kiln] [--kiln-args "..."] [--out-md FILE]
"""
import argparse
import collections
import json
import pathlib
import shlex
import subprocess
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "python"))

import export_models  # noqa: E402
import kiln_cli  # noqa: E402
from machine import machine_lines  # noqa: E402
from test_model_parity import References  # noqa: E402

MODELS = ["resnet18", "resnet50", "googlenet", "inception_v3", "vgg16", "alexnet", "squeezenet1_1"]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="1,4")
    parser.add_argument("--algorithms", default="direct,auto,winograd")
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    parser.add_argument("--kiln-args", default="", help="further options for kiln run and explain")
    parser.add_argument("--model-cache", default="/tmp/kiln-models")
    parser.add_argument("--out-md")
    return parser.parse_args()


def tiles(args, path, batch, algorithm):
    """'F(4) on 3, F(2) on 9': the Winograd tiles of the plan `kiln run` makes."""
    command = [args.kiln, "explain", path, "--json", "--batch", str(batch), "--conv-algorithm", algorithm,
               *shlex.split(args.kiln_args)]
    plan = json.loads(subprocess.run(command, check=True, text=True, capture_output=True).stdout)
    counts = collections.Counter(step["kernel"].split(":")[1][:2].upper() for step in plan["steps"]
                                 if step["backend"] == "winograd")
    return ", ".join(f"F({tile[1]}) on {counts[tile]}" for tile in sorted(counts, reverse=True)) or "none"


def main():
    args = parse_args()
    references = References()
    rows = []
    for name in args.models.split(","):
        path = export_models.cached_export(name, pathlib.Path(args.model_cache), 13,
                                           model=references.module(name))
        for batch in (int(b) for b in args.batches.split(",")):
            inputs, expected, tolerance = references.run(name, batch)
            scale = max(1.0, float(np.abs(expected).max()))
            cells = []
            for algorithm in args.algorithms.split(","):
                with tempfile.TemporaryDirectory() as workdir:
                    outputs = kiln_cli.run_model(args.kiln, path, inputs, workdir,
                                                 extra_args=("--conv-algorithm", algorithm,
                                                             *shlex.split(args.kiln_args)))
                error = float(np.abs(outputs["output"] - expected).max()) / scale
                mark = "**" if error > tolerance else ""
                cells.append(f"{mark}{error:.1e}{mark} ({tiles(args, path, batch, algorithm)})")
            rows.append(f"| {name}, batch {batch} | " + " | ".join(cells) + " |")
            print(rows[-1], file=sys.stderr, flush=True)
    header = ["| model | " + " | ".join(f"`{a}`" for a in args.algorithms.split(",")) + " |",
              "|---|" + "---|" * len(args.algorithms.split(","))]
    text = "\n".join(machine_lines(args.kiln) + [""] + header + rows) + "\n"
    if args.out_md:
        pathlib.Path(args.out_md).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
