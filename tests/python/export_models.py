#!/usr/bin/python3
"""Exports the model-parity set from PyTorch with random weights (no downloads).

    /usr/bin/python3 tests/python/export_models.py NAME... [--opset 13] [--out DIR]

Each model is written as DIR/<name>_opset<N>.onnx; exports are cached by that name.
"""
import argparse
import pathlib

import torch
import torchvision
from torch import nn

CNNS = ["resnet18", "resnet50", "resnext50_32x4d", "mobilenet_v2", "squeezenet1_1", "shufflenet_v2_x1_0",
        "googlenet", "alexnet", "vgg16", "inception_v3"]
TRANSFORMER = "transformer"
SEED = 0


def build(name):
    """The eval-mode module and an example input (batch 1) for `name`."""
    torch.manual_seed(SEED)
    if name == TRANSFORMER:
        layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, activation="gelu", batch_first=True)
        model = nn.TransformerEncoder(layer, num_layers=4).eval()
        return model, torch.randn(1, 128, 256)
    kwargs = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=True)
    model = getattr(torchvision.models, name)(**kwargs).eval()
    size = 299 if name == "inception_v3" else 224
    return model, torch.randn(1, 3, size, size)


def export(name, path, opset=13):
    """Exports `name` to `path` with a dynamic batch axis; returns the module."""
    model, example = build(name)
    # The transformer must be exported with grad enabled: under no_grad PyTorch 1.13 takes a fused
    # fast path that cannot be exported.
    torch.onnx.export(model, example, str(path), opset_version=opset, input_names=["input"],
                      output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    return model


def cached_export(name, cache_dir, opset=13):
    """Path of the exported model in `cache_dir`, exporting it first if needed."""
    path = pathlib.Path(cache_dir) / f"{name}_opset{opset}.onnx"
    if not path.exists():
        partial = path.with_suffix(".partial")
        export(name, partial, opset)
        partial.rename(path)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="+", choices=CNNS + [TRANSFORMER])
    parser.add_argument("--opset", type=int, default=13)
    parser.add_argument("--out", default="/tmp/kiln-models")
    args = parser.parse_args()
    pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    for name in args.names:
        print(cached_export(name, args.out, args.opset))


if __name__ == "__main__":
    main()
