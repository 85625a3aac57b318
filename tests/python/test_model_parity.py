"""Model parity: kiln's outputs match PyTorch's for torchvision CNNs, a transformer encoder, the
NEW_OPS models (torchvision segmentation models, a U-Net and a GPT-style decoder) and the RECURRENT
ones (an LSTM tagger, the same on padded sequences of given lengths, and a GRU encoder).

Each model is exported with random weights, run by PyTorch (eval, no_grad) and by `kiln run` on the
same seeded input (float32 normal; for gpt_decoder int64 token ids) at batch 1 and 4, the NEW_OPS models
at batch 1 and 2 (the dynamic batch axis; the LARGE_CNNS only in the slow tier), once with the default backends (Winograd
under conv_algorithm auto, oneDNN, BLAS, native) and once with the native reference alone; the outputs must agree within 1e-4
relative to the output's scale (the deep LARGE_CNNS and fcn_resnet50: PyTorch's float64 output, within 3x
PyTorch's own float32 error, see References.run). Cases run model by model: a model is built once, exported once (cached
in $KILN_MODEL_CACHE across runs), and its PyTorch reference is computed once per batch (the
transformer's is shared by its opset 13 and 17 exports).

The RECURRENT models run at batch 1, 4 and 16, each on both backend sets in the default tier (they are
small). oneDNN's RNN primitives take a layer only above batch 4 (below, the native kernel is faster),
so batch 16 is where the default backends check oneDNN's, and the smaller batches check the native
kernel either way. lstm_packed runs natively at every batch, oneDNN leaving shortened sequences to
the native kernel: its one sequence at batch 1 is shorter than the input's 64 steps, and its batches
4 and 16 have that many different lengths.
"""
import copy

import numpy as np
import pytest
import torch

import export_models
import kiln_cli

TOLERANCE = 1e-4
BATCHES = (1, 4)
NEW_OPS_BATCHES = (1, 2)
# 16: above the batches that oneDNN's RNN primitives leave to the native kernel (up to 4).
RECURRENT_BATCHES = (1, 4, 16)
# fcn_resnet50 is 26.5 G multiply-adds per image (vgg16: 15.5; PyTorch takes 0.9-1.0 s at batch 1 on
# 1 thread, and 7 s to calibrate it): its batch 2 and its native-reference runs are in the slow tier.
SLOW = {("vgg16", 4), ("inception_v3", 4), ("fcn_resnet50", 2)}
SLOW_NATIVE = {"fcn_resnet50"}
# Ill-conditioned with random weights (see References.run): compared with PyTorch's float64 output.
FLOAT64_REFERENCE = set(export_models.LARGE_CNNS) | {"fcn_resnet50"}

CASES = ([(name, 13) for name in export_models.CNNS + export_models.LARGE_CNNS]
         + [(export_models.TRANSFORMER, 13), (export_models.TRANSFORMER, 17)]
         + [(name, export_models.min_opset(name)) for name in export_models.NEW_OPS + export_models.RECURRENT])


# The default backends (Winograd, oneDNN and BLAS first, as users run kiln) and the native reference alone.
BACKENDS = {"default": (), "native": ("--disable", "onednn", "--disable", "blas", "--disable", "winograd")}


def batches(name):
    if name in export_models.RECURRENT:
        return RECURRENT_BATCHES
    return NEW_OPS_BATCHES if name in export_models.NEW_OPS else BATCHES


def params():
    for name, opset in CASES:  # model by model, so each PyTorch model is built once
        for backends in BACKENDS:
            for batch in batches(name):
                # The native reference at batch 4 (2) only in the slow tier: it repeats what batch 1 checks
                # (but for RECURRENT, see the module's docstring).
                native_repeats = batch > 1 and name not in export_models.RECURRENT
                slow = ((name, batch) in SLOW or (backends == "native" and (native_repeats or name in SLOW_NATIVE))
                        or name in export_models.LARGE_CNNS)
                marks = [pytest.mark.slow] if slow else []
                yield pytest.param(name, opset, batch, backends, marks=marks,
                                   id=f"{name}-opset{opset}-batch{batch}-{backends}")


class References:
    """The PyTorch module of the current model and its outputs per batch; holds one model at a time."""

    def __init__(self):
        self.name = None
        self.model = None
        self.outputs = {}

    def module(self, name):
        if name != self.name:
            torch.set_num_threads(1)
            self.name, self.outputs = None, {}
            self.model, _ = export_models.build(name)
            self.name = name
        return self.model

    def run(self, name, batch):
        """({input name: array}, expected output, tolerance relative to the output's scale) for `name`
        at `batch`.

        The deep LARGE_CNNS and fcn_resnet50 (FLOAT64_REFERENCE) are ill-conditioned with random weights:
        PyTorch's own float32 output is 1e-4 to 3.4e-4 (resnet152) of the scale away from its float64 one
        (fcn_resnet50: 1.2e-4 at batch 1, 1.0e-4 at batch 2). For them the expected output is PyTorch's in
        float64 and the tolerance 3x PyTorch's float32 error (at least TOLERANCE)."""
        model = self.module(name)
        if batch not in self.outputs:
            generator = torch.Generator().manual_seed(1000 + batch)
            # int64 token ids for gpt_decoder and the LSTM taggers; lstm_packed also takes "lengths"
            inputs = export_models.random_inputs(name, batch, generator)
            with torch.no_grad():
                expected = model(*inputs.values()).numpy()
                tolerance = TOLERANCE
                if name in FLOAT64_REFERENCE:
                    exact = copy.deepcopy(model).double()(inputs["input"].double()).numpy()
                    scale = max(1.0, float(np.abs(exact).max()))
                    tolerance = max(TOLERANCE, 3 * float(np.abs(expected - exact).max()) / scale)
                    expected = exact.astype(np.float32)
            self.outputs[batch] = ({key: value.numpy() for key, value in inputs.items()}, expected, tolerance)
        return self.outputs[batch]


@pytest.fixture(scope="module")
def references():
    return References()


@pytest.mark.parametrize("name,opset,batch,backends", params())
def test_matches_pytorch(name, opset, batch, backends, kiln_bin, model_cache, references, tmp_path):
    path = export_models.cached_export(name, model_cache, opset, model=references.module(name))
    inputs, expected, tolerance = references.run(name, batch)
    outputs = kiln_cli.run_model(kiln_bin, path, inputs, tmp_path, extra_args=BACKENDS[backends])
    assert "output" in outputs, f"kiln wrote {sorted(outputs)}"
    actual = outputs["output"]
    assert actual.shape == expected.shape
    assert actual.dtype == np.float32
    scale = max(1.0, float(np.abs(expected).max()))
    difference = float(np.abs(actual - expected).max())
    assert difference <= tolerance * scale, \
        f"max |kiln - torch| = {difference:.3g} (scale {scale:.3g}, tolerance {tolerance:.3g} of it)"


def test_mapped_read_and_shared_loads_give_identical_outputs(kiln_module, model_cache, references):
    """use_mmap on (views of the file, pages released once packed) and off (read and copied), and a
    second session sharing the first's packed weights, give the same bits; a released page is read
    back from the file when a later plan (another batch size) needs the weights again."""
    path = export_models.cached_export("resnet18", model_cache, 13, model=references.module("resnet18"))
    inputs, expected, tolerance = references.run("resnet18", 1)
    mapped = kiln_module.Session(path, threads=1, use_mmap=True)
    read = kiln_module.Session(path, threads=1, use_mmap=False)
    shared = kiln_module.Session(path, threads=1)
    first = mapped.run(inputs)["output"]
    assert np.array_equal(first, read.run(inputs)["output"])
    assert np.array_equal(first, shared.run(inputs)["output"])
    scale = max(1.0, float(np.abs(expected).max()))
    assert float(np.abs(first - expected).max()) <= tolerance * scale
    batch2 = {name: np.concatenate([value, value]) for name, value in inputs.items()}
    again = mapped.run(batch2)["output"]
    assert np.array_equal(again, read.run(batch2)["output"])
    # One thread, fixed kernels: batch rows are computed independently of each other.
    np.testing.assert_allclose(again[0], first[0], rtol=1e-5, atol=1e-5 * scale)
