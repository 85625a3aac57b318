#!/usr/bin/python3
"""Winograd's probe error per 3x3 layer: for every model, each ungrouped stride-1 3x3 convolution Winograd
can run and each tile's probe error on the layer's own filters (docs/backends.md, "Winograd"), as
`kiln explain` reports it with Winograd asked first.

    /usr/bin/python3 bench/winograd_errors.py [--models resnet18,vgg16,...] [--kiln build/kiln]
        [--out-json FILE]
    /usr/bin/python3 bench/winograd_errors.py --compare OLD.json NEW.json [--out-md FILE]

The first form writes one JSON file of errors per layer; the second puts two such files side by side
(transforms before and after a change, say), with the ratio of their F(4x4,3x3) errors per layer and
its range per model.
"""
import argparse
import json
import math
import pathlib
import re
import subprocess
import sys

from machine import machine_lines
from run_all import REPO, export_models, log

MODELS = ["resnet18", "resnet50", "googlenet", "inception_v3", "vgg16", "alexnet", "squeezenet1_1"]
ERROR = re.compile(r"(F\((\d)x\d,3x3\)) (\d\.\de[-+]\d+|inf|nan)")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    parser.add_argument("--out-json")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    parser.add_argument("--out-md")
    return parser.parse_args()


def layer_errors(kiln, path):
    """Per Winograd-eligible Conv step: node, channels, map size and {tile: probe error}."""
    # Winograd first, then native's reference convolution: Winograd offers or refuses every layer
    # by its error alone, and both the note and the refusal list every tile's error.
    command = [kiln, "explain", path, "--json", "--batch", "1", "--conv-algorithm", "auto",
               "--prefer-conv", "winograd,native"]
    done = subprocess.run(command, text=True, capture_output=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    layers = []
    for step in json.loads(done.stdout)["steps"]:
        if step["op"] != "Conv":
            continue
        texts = step["notes"] + [r.get("detail", "") for r in step["refusals"] if r.get("backend") == "winograd"]
        errors = {}
        for text in texts:
            for _, tile, value in ERROR.findall(text):
                errors[f"F{tile}"] = float(value)
        if not errors:
            continue
        x, w = step["input_shapes"][0], step["input_shapes"][1]
        layers.append({"node": step["node"], "in_channels": w[1], "out_channels": w[0],
                       "map": f"{x[2]}x{x[3]}", "errors": errors})
    return layers


def measure(args):
    names = args.models.split(",")
    paths = export_models(names)
    result = {"machine": machine_lines(args.kiln), "models": {}}
    for name in names:
        log(f"{name}: kiln explain")
        result["models"][name] = layer_errors(args.kiln, paths[name])
    text = json.dumps(result, indent=1)
    if args.out_json:
        pathlib.Path(args.out_json).write_text(text + "\n")
    else:
        print(text)


def scientific(value):
    return "—" if value is None else f"{value:.1e}"


def compare(args):
    old, new = (json.loads(pathlib.Path(p).read_text()) for p in args.compare)
    lines = ["| model | layer | C→K | map | F(2) | F(4) before | F(4) after | after/before |",
             "|---|---|---|---|---:|---:|---:|---:|"]
    summary = ["| model | 3×3 layers | F(4) before | F(4) after | after/before |", "|---|---:|---|---|---|"]
    for model, layers in new["models"].items():
        before = {layer["node"]: layer for layer in old["models"].get(model, [])}
        ratios, olds, news = [], [], []
        for layer in layers:
            earlier = before.get(layer["node"], {"errors": {}})["errors"].get("F4")
            now = layer["errors"].get("F4")
            ratio = now / earlier if earlier and now is not None and math.isfinite(now) else None
            if ratio is not None:
                ratios.append(ratio)
                olds.append(earlier)
                news.append(now)
            short = layer["node"].removesuffix("/Conv").lstrip("/")
            lines.append(f"| {model} | {short} | {layer['in_channels']}→{layer['out_channels']} | {layer['map']} | "
                         f"{scientific(layer['errors'].get('F2'))} | {scientific(earlier)} | {scientific(now)} | "
                         f"{'—' if ratio is None else f'{ratio:.2f}'} |")
        if ratios:
            summary.append(f"| {model} | {len(layers)} | {min(olds):.1e} to {max(olds):.1e} | "
                           f"{min(news):.1e} to {max(news):.1e} | {min(ratios):.2f} to {max(ratios):.2f} |")
    text = "\n".join(new["machine"] + [""] + summary + [""] + lines) + "\n"
    if args.out_md:
        pathlib.Path(args.out_md).write_text(text)
    print(text)


def main():
    args = parse_args()
    if args.compare:
        compare(args)
    else:
        measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
