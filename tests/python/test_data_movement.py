"""Data movement planned around channels-last convolutions: ShuffleNet's channel shuffle (Reshape,
Transpose, Reshape) becomes one ChannelShuffle step in the layout its value is stored in, and the
channel splits (Slice) read that layout too, so a shuffle unit between convolutions needs no Reorder;
outputs match PyTorch's with the fast backends and with the native reference alone."""
import numpy as np
import pytest
import torch
from torch import nn


@pytest.fixture(scope="module")
def kiln(kiln_module):
    return kiln_module


def channel_shuffle(x, groups):  # torchvision's ShuffleNet v2 shuffle, as it exports
    batch, channels, height, width = x.size()
    x = x.view(batch, groups, channels // groups, height, width)
    return torch.transpose(x, 1, 2).contiguous().view(batch, -1, height, width)


class ShuffleUnit(nn.Module):
    """A ShuffleNet v2 stride-1 unit (split, a conv branch, concat, shuffle) and a conv reading it."""

    def __init__(self, channels, groups):
        super().__init__()
        half = channels // 2
        self.groups = groups
        self.stem = nn.Conv2d(channels, channels, 1)
        self.branch = nn.Sequential(nn.Conv2d(half, half, 1), nn.ReLU(), nn.Conv2d(half, half, 3, padding=1, groups=half),
                                    nn.Conv2d(half, half, 1), nn.ReLU())
        self.head = nn.Conv2d(channels, 8, 1)

    def forward(self, x):
        x = self.stem(x)
        x1, x2 = x.chunk(2, dim=1)
        x = channel_shuffle(torch.cat((x1, self.branch(x2)), dim=1), self.groups)
        return self.head(x)


class BareShuffle(nn.Module):
    def __init__(self, groups):
        super().__init__()
        self.groups = groups

    def forward(self, x):
        return channel_shuffle(x, self.groups)


def export(module, x, path):
    torch.manual_seed(0)
    with torch.enable_grad():
        torch.onnx.export(module.eval(), (x,), str(path), opset_version=13, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return str(path)


FAST_AND_NATIVE = [{}, {"onednn_enabled": False, "blas_enabled": False, "winograd_enabled": False}]


@pytest.mark.parametrize("disabled", FAST_AND_NATIVE, ids=["default", "native"])
@pytest.mark.parametrize("groups", [2, 4])
def test_shuffle_unit_is_one_step_without_reorders_and_matches_pytorch(kiln, tmp_path, groups, disabled):
    torch.manual_seed(groups)
    module = ShuffleUnit(48, groups).eval()
    path = export(module, torch.randn(1, 48, 10, 10), tmp_path / "unit.onnx")
    for batch in (1, 3):
        x = torch.randn(batch, 48, 10, 10, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            expected = module(x).numpy()
        with kiln.backends.settings(**disabled):
            session = kiln.Session(path)
            steps = session.explain({"x": x.numpy()})
            actual = session.run({"x": x.numpy()})["y"]
        ops = [step["op"] for step in steps]
        assert ops.count("ChannelShuffle") == 1, ops
        assert "Transpose" not in ops, ops
        shuffle = next(step for step in steps if step["op"] == "ChannelShuffle")
        layout = "plain" if disabled else "nhwc"
        assert shuffle["kernel"] == f"native:channel_shuffle_{layout}", shuffle
        if not disabled:
            # Only the graph input's and output's conversions remain.
            assert ops.count("Reorder") == 2, ops
        np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-4 * max(1.0, float(np.abs(expected).max())))


@pytest.mark.parametrize("groups", [1, 3, 6])
def test_bare_shuffle_of_a_graph_input_is_exact(kiln, tmp_path, groups):
    path = export(BareShuffle(groups), torch.randn(2, 12, 3, 5), tmp_path / "bare.onnx")
    x = np.arange(2 * 12 * 3 * 5, dtype=np.float32).reshape(2, 12, 3, 5)
    session = kiln.Session(path)
    assert [step["op"] for step in session.explain({"x": x})] == ["ChannelShuffle"]
    expected = x.reshape(2, groups, 12 // groups, 3, 5).transpose(0, 2, 1, 3, 4).reshape(2, 12, 3, 5)
    assert np.array_equal(session.run({"x": x})["y"], expected)


def test_a_transpose_that_is_not_a_shuffle_is_left_alone(kiln, tmp_path):
    class SwapSpatial(nn.Module):
        def forward(self, x):
            b, c, h, w = x.size()
            return x.view(b, 2, c // 2, h, w).permute(0, 2, 1, 4, 3).reshape(b, c, w, h)

    path = export(SwapSpatial(), torch.randn(1, 8, 3, 4), tmp_path / "swap.onnx")
    x = np.random.default_rng(0).standard_normal((1, 8, 3, 4)).astype(np.float32)
    session = kiln.Session(path)
    ops = [step["op"] for step in session.explain({"x": x})]
    assert "ChannelShuffle" not in ops and "Transpose" in ops, ops
    expected = x.reshape(1, 2, 4, 3, 4).transpose(0, 2, 1, 4, 3).reshape(1, 8, 4, 3)
    assert np.array_equal(session.run({"x": x})["y"], expected)
