"""The MHA fast path on exported encoder layers: kiln.backends.mha's switch, one ResidualLayerNorm step
per attention block replacing the residual Add, the transposition before it and the LayerNorm, with the
outputs of the plan without it and of PyTorch."""
import numpy as np
import pytest
import torch
from torch import nn


@pytest.fixture(scope="module")
def kiln(kiln_module):
    return kiln_module


def relative_error(actual, expected):
    return float(np.abs(actual - expected).max() / np.abs(expected).max())


def export_layer(tmp_path, batch_first, opset):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation="gelu", batch_first=batch_first).eval()
    x = torch.randn((2, 10, 32) if batch_first else (10, 2, 32))
    path = tmp_path / f"layer_{batch_first}_{opset}.onnx"
    with torch.enable_grad():
        torch.onnx.export(layer, (x,), str(path), opset_version=opset, input_names=["x"], output_names=["y"])
    with torch.no_grad():
        return str(path), x.numpy(), layer(x).numpy()


def plan(kiln, path, x):
    session = kiln.Session(path)
    return session, [step["op"] for step in session.explain({"x": x})]


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("batch_first", [False, True])
def test_exported_layer_has_one_residual_layer_norm_step_and_the_same_output(kiln, tmp_path, batch_first, opset):
    path, x, expected = export_layer(tmp_path, batch_first, opset)
    fast, fast_ops = plan(kiln, path, x)
    with kiln.backends.settings(mha_fastpath=False):
        exported, exported_ops = plan(kiln, path, x)
        reference = exported.run({"x": x})["y"]
    actual = fast.run({"x": x})["y"]
    assert fast_ops.count("ResidualLayerNorm") >= 1, fast_ops
    assert "ResidualLayerNorm" not in exported_ops
    assert len(fast_ops) < len(exported_ops), (fast_ops, exported_ops)
    assert relative_error(actual, reference) <= 1e-5
    assert relative_error(actual, expected) <= 1e-4


def test_the_encoder_model_loses_two_steps_per_layer(kiln, model_cache):
    import export_models
    for opset in (13, 17):
        path = str(export_models.cached_export("transformer", model_cache, opset=opset))
        for batch in (1, 3):
            x = np.random.default_rng(batch).standard_normal((batch, 128, 256), dtype=np.float32)
            session = kiln.Session(path)
            ops = [step["op"] for step in session.explain({"input": x})]
            with kiln.backends.settings(mha_fastpath=False):
                exported = kiln.Session(path)
                exported_ops = [step["op"] for step in exported.explain({"input": x})]
                reference = exported.run({"input": x})["output"]
            assert ops.count("ResidualLayerNorm") == 4
            assert len(ops) == len(exported_ops) - 2 * 4
            assert relative_error(session.run({"input": x})["output"], reference) <= 1e-5


def test_get_and_set_fastpath_enabled(kiln):
    assert kiln.backends.mha.get_fastpath_enabled() is True
    try:
        kiln.backends.mha.set_fastpath_enabled(False)
        assert kiln.backends.mha.get_fastpath_enabled() is False
        assert kiln.backends.current()["mha_fastpath"] is False
        with kiln.backends.settings(mha_fastpath=True):
            assert kiln.backends.mha.get_fastpath_enabled() is True
    finally:
        kiln.backends.mha.set_fastpath_enabled(True)
    assert kiln.backends.mha_fastpath is True
