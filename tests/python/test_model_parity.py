"""Model parity: kiln's outputs match PyTorch's for torchvision CNNs and a transformer encoder.

Each model is exported with random weights, run by PyTorch (eval, no_grad) and by `kiln run` on the
same seeded input at batch 1 and 4 (the dynamic batch axis); the outputs must agree within 1e-4
relative to the output's scale.
"""
import numpy as np
import pytest
import torch

import export_models
import kiln_cli

TOLERANCE = 1e-4
SLOW = {("vgg16", 4), ("inception_v3", 4)}

CASES = [(name, 13) for name in export_models.CNNS] + [(export_models.TRANSFORMER, 13), (export_models.TRANSFORMER, 17)]


def params():
    for name, opset in CASES:
        for batch in (1, 4):
            marks = [pytest.mark.slow] if (name, batch) in SLOW else []
            yield pytest.param(name, opset, batch, marks=marks, id=f"{name}-opset{opset}-batch{batch}")


@pytest.mark.parametrize("name,opset,batch", params())
def test_matches_pytorch(name, opset, batch, kiln_bin, model_cache, tmp_path):
    torch.set_num_threads(1)
    path = export_models.cached_export(name, model_cache, opset)
    model, example = export_models.build(name)
    generator = torch.Generator().manual_seed(1000 + batch)
    x = torch.randn((batch,) + tuple(example.shape[1:]), generator=generator)
    with torch.no_grad():
        expected = model(x).numpy()
    outputs = kiln_cli.run_model(kiln_bin, path, {"input": x.numpy()}, tmp_path)
    actual = outputs["output"]
    assert actual.shape == expected.shape
    assert actual.dtype == np.float32
    scale = max(1.0, float(np.abs(expected).max()))
    difference = float(np.abs(actual - expected).max())
    assert difference <= TOLERANCE * scale, f"max |kiln - torch| = {difference:.3g} (scale {scale:.3g})"
