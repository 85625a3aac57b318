#!/usr/bin/python3
"""Exports the model-parity set from PyTorch with random weights (no downloads).

    /usr/bin/python3 tests/python/export_models.py NAME... [--opset 13 ...] [--out DIR] [--static-batch]

NAME is one of CNNS, LARGE_CNNS, TRANSFORMERS ("transformer" and the attention benchmark's encoders), or "all". Each model is written as
DIR/<name>_opset<N>_v<EXPORT_VERSION>.onnx (DIR defaults to $KILN_MODEL_CACHE, else /tmp/kiln-models);
an existing file is reused, so bump EXPORT_VERSION after changing how a model is built or exported.
Axis 0 of "input" and "output" is dynamic ("batch") unless --static-batch, which writes
<name>_opset<N>_static_v<EXPORT_VERSION>.onnx with batch 1.
"""
import argparse
import os
import pathlib
import time

import torch
import torchvision
from torch import nn

CNNS = ["resnet18", "resnet50", "resnext50_32x4d", "mobilenet_v2", "squeezenet1_1", "shufflenet_v2_x1_0",
        "googlenet", "alexnet", "vgg16", "inception_v3", "mobilenet_v1"]
# The benchmark's deeper models: 7.8 (resnet101), 11.5 (resnet152) and 16.5 (resnext101_32x8d) GFLOPs
# per image, so the tests that run them are in the slow tier.
LARGE_CNNS = ["resnet101", "resnet152", "resnext101_32x8d"]
TRANSFORMER = "transformer"
# Encoders (nn.TransformerEncoder, GELU, 4 layers, batch first): d_model, heads, feed-forward width,
# sequence length. "transformer" is the BERT-like one of the model-parity set; the others are the
# attention benchmark's grid (bench/attention.py), a BERT-base-sized one among them.
TRANSFORMERS = {
    TRANSFORMER: (256, 4, 2048, 128),
    "transformer_s512": (256, 4, 2048, 512),
    "transformer768": (768, 12, 3072, 128),
    "transformer768_s512": (768, 12, 3072, 512),
}
ALL = CNNS + LARGE_CNNS + list(TRANSFORMERS)
SEED = 0
# Part of every cached file name: bump it whenever a change here changes an exported graph or weights,
# so caches from older versions are not reused.
EXPORT_VERSION = 2


def default_cache_dir():
    return pathlib.Path(os.environ.get("KILN_MODEL_CACHE") or "/tmp/kiln-models")


def depthwise_separable(inputs, outputs, stride):
    """MobileNet v1's block: a 3x3 depthwise conv, then a 1x1 conv, each followed by BatchNorm and ReLU."""
    return nn.Sequential(
        nn.Conv2d(inputs, inputs, 3, stride, 1, groups=inputs, bias=False), nn.BatchNorm2d(inputs), nn.ReLU(inplace=True),
        nn.Conv2d(inputs, outputs, 1, bias=False), nn.BatchNorm2d(outputs), nn.ReLU(inplace=True))


def mobilenet_v1():
    """MobileNet v1 (Howard et al. 2017, width 1.0, 224x224): not in torchvision, so defined here."""
    # (output channels, stride) of the 13 depthwise-separable blocks, in the paper's Table 1.
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5, (1024, 2), (1024, 1)]
    layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True)]
    channels = 32
    for outputs, stride in blocks:
        layers.append(depthwise_separable(channels, outputs, stride))
        channels = outputs
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 1000))


def build(name):
    """The eval-mode module and an example input (batch 1) for `name`; deterministic (seeded)."""
    if name not in ALL:
        raise ValueError(f"unknown model '{name}' (known: {', '.join(ALL)})")
    torch.manual_seed(SEED)
    if name in TRANSFORMERS:
        d_model, heads, feed_forward, _ = TRANSFORMERS[name]
        layer = nn.TransformerEncoderLayer(d_model=d_model, nhead=heads, dim_feedforward=feed_forward,
                                           activation="gelu", batch_first=True)
        model = nn.TransformerEncoder(layer, num_layers=4).eval()
    elif name == "mobilenet_v1":
        model = mobilenet_v1()
        calibrate(model, name)
    else:
        kwargs = {"weights": None}
        if name in ("googlenet", "inception_v3"):
            kwargs.update(aux_logits=False, init_weights=True)
        model = getattr(torchvision.models, name)(**kwargs)
        calibrate(model, name)
    return model.eval(), torch.randn(input_shape(name))


def calibrate(model, name):
    """Gives a randomly initialised CNN trained-like activation scales, so parity is a real check.

    Straight from init, BatchNorm's running statistics (mean 0, variance 1) normalise nothing: outputs
    come out at ~1e-9 (mobilenet_v2), where a 1e-4 tolerance passes anything, or ~1e12 (inception_v3).
    So: recompute every BatchNorm's statistics as the plain average over two seeded random batches,
    then scale the last layer that carries a weight (classifier Linear, or squeezenet's final Conv) so
    the output's standard deviation is ~1. Deterministic; costs a few forward passes."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    generator = torch.Generator().manual_seed(SEED + 1)
    batch = torch.randn(input_shape(name, 2), generator=generator)
    with torch.no_grad():
        if norms:
            for norm in norms:
                norm.reset_running_stats()
                norm.momentum = None  # cumulative average
            model.train()
            for _ in range(2):
                model(torch.randn(input_shape(name, 2), generator=generator))
        model.eval()
        last = [m for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))][-1]
        std = float(model(batch).std())
        if std > 0:
            last.weight /= std
            if last.bias is not None:
                last.bias /= std


def input_shape(name, batch=1):
    """The shape of the model's input "input" at `batch`."""
    if name in TRANSFORMERS:
        d_model, _, _, sequence = TRANSFORMERS[name]
        return (batch, sequence, d_model)
    size = 299 if name == "inception_v3" else 224
    return (batch, 3, size, size)


def export(name, path, opset=13, batch_dynamic=True, model=None):
    """Exports `name` (or the already built `model` of that name) to `path`; returns the module.

    Axis 0 of "input" and "output" is dynamic and named "batch" when batch_dynamic."""
    if model is None:
        model, _ = build(name)
    example = torch.randn(input_shape(name), generator=torch.Generator().manual_seed(SEED))
    dynamic_axes = {"input": {0: "batch"}, "output": {0: "batch"}} if batch_dynamic else None
    # Grad stays enabled: under no_grad PyTorch 1.13 runs TransformerEncoder on a fused fast path that
    # the exporter cannot trace.
    with torch.enable_grad():
        torch.onnx.export(model, example, str(path), opset_version=opset, input_names=["input"],
                          output_names=["output"], dynamic_axes=dynamic_axes)
    return model


def cache_path(name, cache_dir=None, opset=13, batch_dynamic=True):
    suffix = "" if batch_dynamic else "_static"
    return pathlib.Path(cache_dir or default_cache_dir()) / f"{name}_opset{opset}{suffix}_v{EXPORT_VERSION}.onnx"


def cached_export(name, cache_dir=None, opset=13, batch_dynamic=True, model=None):
    """Path of the exported model in `cache_dir` (default: $KILN_MODEL_CACHE), exporting it first if needed.

    The export goes to a per-process temporary name and is renamed into place, so concurrent test
    processes never read a half-written file."""
    path = cache_path(name, cache_dir, opset, batch_dynamic)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        try:
            export(name, partial, opset, batch_dynamic, model)
            partial.replace(path)
        finally:
            partial.unlink(missing_ok=True)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="+", choices=ALL + ["all"], metavar="NAME")
    parser.add_argument("--opset", type=int, action="append", help="opset (repeatable; default 13)")
    parser.add_argument("--out", default=None, help="output folder (default: $KILN_MODEL_CACHE or /tmp/kiln-models)")
    parser.add_argument("--static-batch", action="store_true", help="batch fixed at 1 instead of a dynamic axis")
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = ALL if "all" in args.names else args.names
    for name in names:
        for opset in args.opset or [13]:
            start = time.perf_counter()
            path = cached_export(name, args.out, opset, not args.static_batch)
            print(f"{path} ({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
