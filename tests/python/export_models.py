#!/usr/bin/python3
"""Exports the model-parity set from PyTorch with random weights (no downloads).

    /usr/bin/python3 tests/python/export_models.py NAME... [--opset 13 ...] [--out DIR] [--static-batch]

NAME is one of CNNS, LARGE_CNNS, TRANSFORMERS ("transformer" and the attention benchmark's encoders),
SEGMENTATION, "unet", "gpt_decoder", RECURRENT ("lstm_tagger", "gru_encoder", "lstm_packed"), or "all".
Each model is written as
DIR/<name>_opset<N>_v<EXPORT_VERSION>.onnx (DIR defaults to $KILN_MODEL_CACHE, else /tmp/kiln-models);
an existing file is reused, so bump EXPORT_VERSION after changing how a model is built or exported.
The opset defaults to the model's MIN_OPSET (13; gpt_decoder 14). Axis 0 of "input" and "output" is
dynamic ("batch") unless --static-batch, which writes <name>_opset<N>_static_v<EXPORT_VERSION>.onnx
with batch 1. lstm_packed has a second input, "lengths" (int64 [batch]), whose axis 0 is "batch" too.
"""
import argparse
import math
import os
import pathlib
import time

import torch
import torchvision
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

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
# Dense prediction (torchvision.models.segmentation: 21 classes, no auxiliary head, 224x224), each
# upsampling its logits bilinearly to the input's size (Resize). fcn_resnet50 is 26.5 G multiply-adds
# per image (torchvision's "GFLOPS", as above; a dilated ResNet-50 at output stride 8), vgg16 15.5.
SEGMENTATION = ["fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"]
# A small U-Net defined here (ConvTranspose, Resize linear, skip Concats), 128x128, 2 classes.
UNET = "unet"
# A GPT-style decoder defined here (CumSum positions, Trilu causal mask): int64 token ids in, logits out.
GPT_DECODER = "gpt_decoder"
GPT = {"vocab": 1000, "sequence": 32, "d_model": 128, "heads": 4, "layers": 2, "feed_forward": 512}
# Models with ops kiln is still gaining (Resize, ConvTranspose, Trilu, CumSum): the parity test runs
# them, but they are not in ALL, whose every model test_model_settings and the benchmarks run.
NEW_OPS = SEGMENTATION + [UNET, GPT_DECODER]
# Recurrent models defined here (nn.LSTM, nn.GRU, batch first): not CNNs, and on ops kiln gained last, so
# they are neither in ALL nor in NEW_OPS (whose batches are 1 and 2); the benchmark runs the first two as
# its "recurrent" set. lstm_tagger: int64 token ids [batch, sequence] -> Embedding -> a bidirectional
# LSTM -> a Linear to tag logits [batch, sequence, tags]. gru_encoder: features [batch, sequence,
# features] (audio-like frames) -> a unidirectional GRU -> its last layer's final hidden state -> a
# Linear to [batch, outputs]. lstm_packed: lstm_tagger's network on padded sequences of the lengths
# given in a second input, through pack_padded_sequence, which PyTorch exports as the LSTMs'
# sequence_lens.
LSTM_TAGGER, GRU_ENCODER, LSTM_PACKED = "lstm_tagger", "gru_encoder", "lstm_packed"
TAGGER = {"vocab": 5000, "sequence": 64, "embedding": 128, "hidden": 256, "layers": 2, "tags": 20}
ENCODER = {"features": 80, "sequence": 100, "hidden": 256, "layers": 2, "outputs": 128}
RECURRENT = [LSTM_TAGGER, GRU_ENCODER, LSTM_PACKED]
MODELS = ALL + NEW_OPS + RECURRENT
# The lowest opset a model exports at, where not 13: PyTorch 1.13 exports triu as Trilu (opset 14).
# The recurrent models gain nothing at 14: PyTorch 1.13 writes no LSTM/GRU `layout` attribute there; at
# 13 and 14 alike it transposes batch-first values to and from the nodes' sequence-first layout.
MIN_OPSET = {GPT_DECODER: 14}
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


def conv_block(inputs, outputs):
    """U-Net's unit: two 3x3 convs, each followed by BatchNorm and ReLU."""
    return nn.Sequential(
        nn.Conv2d(inputs, outputs, 3, padding=1, bias=False), nn.BatchNorm2d(outputs), nn.ReLU(inplace=True),
        nn.Conv2d(outputs, outputs, 3, padding=1, bias=False), nn.BatchNorm2d(outputs), nn.ReLU(inplace=True))


class UNet(nn.Module):
    """A small U-Net (Ronneberger et al. 2015): 3 levels of 16/32/64 channels at 128/64/32 pixels.

    Down: conv blocks and 2x2 max pooling. Up: a transposed conv, the same level's encoder output
    concatenated on channels, a conv block; then a 1x1 conv to `classes`. The two upsamplings cover
    ConvTranspose's attributes: kernel 2 stride 2 (the usual one), and kernel 3 stride 2 padding 1
    output_padding 1. A side path upsamples the bottom level bilinearly (F.interpolate, scale 2: Resize
    linear, half_pixel) and is summed into the first upsampling."""

    def __init__(self, channels=(16, 32, 64), classes=2):
        super().__init__()
        c1, c2, c3 = channels
        self.down1, self.down2, self.bottom = conv_block(3, c1), conv_block(c1, c2), conv_block(c2, c3)
        self.pool = nn.MaxPool2d(2)
        self.up2 = nn.ConvTranspose2d(c3, c2, 2, stride=2)
        self.side = nn.Conv2d(c3, c2, 1)
        self.decode2 = conv_block(2 * c2, c2)
        self.up1 = nn.ConvTranspose2d(c2, c1, 3, stride=2, padding=1, output_padding=1)
        self.decode1 = conv_block(2 * c1, c1)
        self.head = nn.Conv2d(c1, classes, 1)  # the last layer with a weight, which calibrate scales

    def forward(self, x):
        skip1 = self.down1(x)
        skip2 = self.down2(self.pool(skip1))
        bottom = self.bottom(self.pool(skip2))
        side = F.interpolate(self.side(bottom), scale_factor=2, mode="bilinear", align_corners=False)
        x = self.decode2(torch.cat([self.up2(bottom) + side, skip2], dim=1))
        x = self.decode1(torch.cat([self.up1(x), skip1], dim=1))
        return self.head(x)


class CausalSelfAttention(nn.Module):
    """Masked multi-head self-attention written out (q/k/v and output Linears, MatMul, Softmax), so the
    export has no fused attention."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.scale = 1 / math.sqrt(d_model // heads)
        self.query, self.key, self.value = (nn.Linear(d_model, d_model) for _ in range(3))
        self.projection = nn.Linear(d_model, d_model)

    def forward(self, x, mask):
        batch, sequence, _ = x.shape

        def heads(t):  # [batch, sequence, d_model] -> [batch, heads, sequence, d_model / heads]
            return t.reshape(batch, sequence, self.heads, -1).transpose(1, 2)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        weights = torch.softmax(q @ k.transpose(-2, -1) * self.scale + mask, dim=-1)
        return self.projection((weights @ v).transpose(1, 2).reshape(batch, sequence, -1))


class DecoderBlock(nn.Module):
    """GPT-2's pre-LayerNorm block: x + attention(LN(x)), then x + MLP(LN(x)), the MLP's activation GELU."""

    def __init__(self, d_model, heads, feed_forward):
        super().__init__()
        self.norm1, self.attention = nn.LayerNorm(d_model), CausalSelfAttention(d_model, heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, feed_forward), nn.GELU(), nn.Linear(feed_forward, d_model))

    def forward(self, x, mask):
        x = x + self.attention(self.norm1(x), mask)
        return x + self.mlp(self.norm2(x))


class GPTDecoder(nn.Module):
    """A GPT-style decoder-only model: int64 token ids [batch, sequence] -> logits [batch, sequence, vocab].

    Token and learned position embeddings, `layers` DecoderBlocks, a final LayerNorm and a Linear to the
    vocabulary. Positions and the causal mask are computed in the graph from the input, as models that
    take variable lengths do: positions as cumsum(ones_like(ids)) - 1 (ONNX CumSum on int64), the mask
    as triu(full((s, s), -inf), 1) with s the input's length (ConstantOfShape, then Trilu)."""

    def __init__(self, vocab, sequence, d_model, heads, layers, feed_forward):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, d_model), nn.Embedding(sequence, d_model)
        self.blocks = nn.ModuleList(DecoderBlock(d_model, heads, feed_forward) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, vocab)

    def forward(self, ids):
        positions = torch.cumsum(torch.ones_like(ids), dim=1) - 1
        sequence = ids.shape[1]
        mask = torch.triu(torch.full((sequence, sequence), float("-inf")), diagonal=1)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


class LSTMTagger(nn.Module):
    """A sequence tagger: int64 token ids [batch, sequence] -> logits [batch, sequence, tags].

    Embedding, a bidirectional `layers`-layer LSTM (batch first), a Linear from both directions' hidden
    states to the tags. With `packed`, forward also takes the sequences' lengths (int64 [batch], any
    order) and runs the LSTM on pack_padded_sequence's packing; PyTorch exports that as the lengths cast
    to int32 into every LSTM node's sequence_lens (and a TopK/Gather sort and its inverse for
    enforce_sorted=False), and the padding past each length comes out as zeros, then the Linear's bias."""

    def __init__(self, vocab, sequence, embedding, hidden, layers, tags, packed=False):
        super().__init__()
        self.packed = packed
        self.embedding = nn.Embedding(vocab, embedding)
        self.lstm = nn.LSTM(embedding, hidden, layers, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, tags)

    def forward(self, ids, lengths=None):
        x = self.embedding(ids)
        if not self.packed:
            return self.head(self.lstm(x)[0])
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        # total_length keeps the output as long as the input, as the exported LSTM's Y is; without it
        # PyTorch cuts the output to the longest length and the export does not.
        y, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=ids.shape[1])
        return self.head(y)


class GRUEncoder(nn.Module):
    """An utterance encoder: features [batch, sequence, features] -> [batch, outputs].

    A unidirectional `layers`-layer GRU (batch first; PyTorch's GRU exports with linear_before_reset=1),
    then the last layer's final hidden state through a Linear: the export uses both GRU outputs, Y
    between the layers and Y_h at the end."""

    def __init__(self, features, sequence, hidden, layers, outputs):
        super().__init__()
        self.gru = nn.GRU(features, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, outputs)

    def forward(self, x):
        return self.head(self.gru(x)[1][-1])


class OutputOnly(nn.Module):
    """A torchvision segmentation model that returns its "out" tensor alone (they return {"out": ...})."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def build(name):
    """The eval-mode module and an example input (batch 1) for `name`; deterministic (seeded)."""
    if name not in MODELS:
        raise ValueError(f"unknown model '{name}' (known: {', '.join(MODELS)})")
    torch.manual_seed(SEED)
    if name in TRANSFORMERS:
        d_model, heads, feed_forward, _ = TRANSFORMERS[name]
        layer = nn.TransformerEncoderLayer(d_model=d_model, nhead=heads, dim_feedforward=feed_forward,
                                           activation="gelu", batch_first=True)
        model = nn.TransformerEncoder(layer, num_layers=4).eval()
    elif name == "mobilenet_v1":
        model = mobilenet_v1()
        calibrate(model, name)
    elif name in SEGMENTATION:
        kwargs = {"weights": None, "weights_backbone": None}
        if name != "lraspp_mobilenet_v3_large":  # LRASPP has no auxiliary head
            kwargs.update(aux_loss=False)
        model = OutputOnly(getattr(torchvision.models.segmentation, name)(**kwargs))
        calibrate(model, name)
    elif name == UNET:
        model = UNet()
        calibrate(model, name)
    elif name == GPT_DECODER:
        model = GPTDecoder(**GPT).eval()
    elif name in (LSTM_TAGGER, LSTM_PACKED):
        model = LSTMTagger(**TAGGER, packed=name == LSTM_PACKED)
        calibrate(model, name)
    elif name == GRU_ENCODER:
        model = GRUEncoder(**ENCODER)
        calibrate(model, name)
    else:
        kwargs = {"weights": None}
        if name in ("googlenet", "inception_v3"):
            kwargs.update(aux_logits=False, init_weights=True)
        model = getattr(torchvision.models, name)(**kwargs)
        calibrate(model, name)
    return model.eval(), random_input(name)


def calibrate(model, name):
    """Gives a randomly initialised CNN trained-like activation scales, so parity is a real check.

    Straight from init, BatchNorm's running statistics (mean 0, variance 1) normalise nothing: outputs
    come out at ~1e-9 (mobilenet_v2), where a 1e-4 tolerance passes anything, or ~1e12 (inception_v3).
    So: recompute every BatchNorm's statistics as the plain average over two seeded random batches,
    then scale the output layers (see output_layers) so the output's standard deviation is ~1.
    The recurrent models have no BatchNorm but come out at a standard deviation of 0.03-0.06, below
    the tolerance's floor of 1 for the output's scale: only their head is scaled. Deterministic; costs a
    few forward passes."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    generator = torch.Generator().manual_seed(SEED + 1)
    batch = random_inputs(name, 2, generator).values()
    with torch.no_grad():
        if norms:
            for norm in norms:
                norm.reset_running_stats()
                norm.momentum = None  # cumulative average
            model.train()
            for _ in range(2):
                model(*random_inputs(name, 2, generator).values())
        model.eval()
        std = float(model(*batch).std())
        if std > 0:
            for layer in output_layers(model):
                layer.weight /= std
                if layer.bias is not None:
                    layer.bias /= std


def output_layers(model):
    """The layers whose outputs sum to the model's output, up to layers without a weight (pooling,
    activations, Resize): scaling their weights and biases scales the output. That is the last layer
    carrying a weight (classifier Linear, squeezenet's final Conv, a segmentation head's last 1x1 Conv),
    but for LRASPP, whose output is the sum of two classifiers (low_classifier(low) + high_classifier(x))."""
    heads = [m for m in model.modules() if isinstance(m, torchvision.models.segmentation.lraspp.LRASPPHead)]
    if heads:
        return [heads[0].low_classifier, heads[0].high_classifier]
    return [[m for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))][-1]]


def input_shape(name, batch=1):
    """The shape of the model's input "input" at `batch`."""
    if name in TRANSFORMERS:
        d_model, _, _, sequence = TRANSFORMERS[name]
        return (batch, sequence, d_model)
    if name == GPT_DECODER:
        return (batch, GPT["sequence"])
    if name in (LSTM_TAGGER, LSTM_PACKED):
        return (batch, TAGGER["sequence"])
    if name == GRU_ENCODER:
        return (batch, ENCODER["sequence"], ENCODER["features"])
    size = {"inception_v3": 299, UNET: 128}.get(name, 224)
    return (batch, 3, size, size)


def random_input(name, batch=1, generator=None):
    """A random "input" for `name` at `batch` from `generator` (default: the global one): int64 token
    ids uniform in [0, vocab) for gpt_decoder and the LSTM taggers, standard normal float32 otherwise."""
    if name == GPT_DECODER:
        return torch.randint(0, GPT["vocab"], input_shape(name, batch), generator=generator)
    if name in (LSTM_TAGGER, LSTM_PACKED):
        return torch.randint(0, TAGGER["vocab"], input_shape(name, batch), generator=generator)
    return torch.randn(input_shape(name, batch), generator=generator)


def random_inputs(name, batch=1, generator=None):
    """Every input of `name` by ONNX input name, in the order forward takes them: "input" as
    random_input draws it, then for lstm_packed "lengths", distinct lengths in [1, sequence] in random
    order (a batch that pack_padded_sequence must sort, and whose every sequence but at most one is
    padded)."""
    inputs = {"input": random_input(name, batch, generator)}
    if name == LSTM_PACKED:
        sequence = TAGGER["sequence"]
        if batch > sequence:
            raise ValueError(f"{name}: distinct lengths need batch <= {sequence}, not {batch}")
        inputs["lengths"] = torch.randperm(sequence, generator=generator)[:batch] + 1
    return inputs


def min_opset(name):
    return MIN_OPSET.get(name, 13)


def export(name, path, opset=13, batch_dynamic=True, model=None):
    """Exports `name` (or the already built `model` of that name) to `path`; returns the module.

    Axis 0 of every input and of "output" is dynamic and named "batch" when batch_dynamic."""
    if opset < min_opset(name):
        raise ValueError(f"{name} exports at opset {min_opset(name)} or later, not {opset}")
    if model is None:
        model, _ = build(name)
    # Batch 1 matters for lstm_packed: PyTorch 1.13 exports its LSTMs' zero initial states as a constant
    # of the example's batch expanded to the run's, which only a batch of 1 broadcasts.
    example = random_inputs(name, generator=torch.Generator().manual_seed(SEED))
    dynamic_axes = ({**{input_name: {0: "batch"} for input_name in example}, "output": {0: "batch"}}
                    if batch_dynamic else None)
    # Grad stays enabled: under no_grad PyTorch 1.13 runs TransformerEncoder on a fused fast path that
    # the exporter cannot trace.
    with torch.enable_grad():
        torch.onnx.export(model, tuple(example.values()), str(path), opset_version=opset, input_names=list(example),
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
    parser.add_argument("names", nargs="+", choices=MODELS + ["all"], metavar="NAME")
    parser.add_argument("--opset", type=int, action="append",
                        help="opset (repeatable; default: the model's MIN_OPSET, 13 for most)")
    parser.add_argument("--out", default=None, help="output folder (default: $KILN_MODEL_CACHE or /tmp/kiln-models)")
    parser.add_argument("--static-batch", action="store_true", help="batch fixed at 1 instead of a dynamic axis")
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = MODELS if "all" in args.names else args.names
    for name in args.names:
        if name != "all" and min(args.opset or [min_opset(name)]) < min_opset(name):
            parser.error(f"{name} exports at opset {min_opset(name)} or later")
    for name in names:
        # "all" with --opset below a model's MIN_OPSET skips that opset for it.
        for opset in [opset for opset in args.opset or [min_opset(name)] if opset >= min_opset(name)]:
            start = time.perf_counter()
            path = cached_export(name, args.out, opset, not args.static_batch)
            print(f"{path} ({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
