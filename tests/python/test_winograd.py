"""The Winograd backend from Python: kiln.backends.winograd's controls, conv_algorithm, and a small
exported CNN (3x3 convs with ReLU and a residual, a stride-2 conv) against PyTorch under each algorithm
at batch 1 and 4. Model parity with the default conv_algorithm (auto) over the torchvision CNNs is
test_model_parity.py's."""
import numpy as np
import pytest
import torch
from torch import nn


@pytest.fixture(scope="module")
def kiln(kiln_module):
    return kiln_module


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(32, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 32, 3, padding=1)
        self.down = nn.Conv2d(32, 48, 3, stride=2, padding=1)

    def forward(self, x):
        y = torch.relu(self.conv2(torch.relu(self.conv1(x))) + x)
        return self.down(y)


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    torch.manual_seed(0)
    model = Block().eval()
    path = tmp_path_factory.mktemp("winograd") / "block.onnx"
    x = torch.rand(1, 32, 15, 15)
    torch.onnx.export(model, (x,), str(path), opset_version=13, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return str(path), model


def refusals_of(step, backend):
    """(kind, detail) of each refusal by `backend` in an explain step."""
    return [(r["kind"], r["detail"]) for r in step["refusals"] if r["backend"] == backend]


def relative_error(actual, expected):
    return float(np.abs(actual - expected).max() / np.abs(expected).max())


def test_backend_controls(kiln):
    w = kiln.backends.winograd
    assert w in kiln.backends.list_backends()
    assert w.is_built() and w.is_available()
    assert w.enabled
    assert w.algorithm == "auto" and kiln.backends.conv_algorithm == "auto"
    with w.flags(enabled=False, algorithm="winograd"):
        assert not w.enabled
        assert kiln.backends.conv_algorithm == "winograd"
    assert w.enabled and w.algorithm == "auto"
    w.algorithm = "direct"
    try:
        assert kiln.backends.current()["conv_algorithm"] == "direct"
    finally:
        w.algorithm = "auto"
    with pytest.raises(Exception, match="conv_algorithm"):
        kiln.backends.set_settings(conv_algorithm="fast")


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("algorithm", ["auto", "direct", "winograd"])
def test_block_matches_pytorch(kiln, block, algorithm, batch):
    path, model = block
    x = torch.rand(batch, 32, 15, 15)
    with torch.no_grad():
        expected = model(x).numpy()
    with kiln.backends.settings(conv_algorithm=algorithm):
        session = kiln.Session(path)
        out = session.run({"x": x.numpy()})["y"]
        steps = [s for s in session.explain({"x": x.numpy()}) if s["op"] == "Conv"]
    assert relative_error(out, expected) <= 1e-4
    kernels = [s["kernel"] for s in steps]
    # The stride-2 conv is never Winograd's, and says why.
    assert not kernels[-1].startswith("winograd:")
    why = ("excluded_by_setting", "conv_algorithm is direct") if algorithm == "direct" else \
        ("unsupported_attribute", "stride 2x2, not 1")
    assert why in refusals_of(steps[-1], "winograd")
    if algorithm == "winograd":
        assert all(k.startswith("winograd:f") for k in kernels[:-1])
        assert all("transformed filters" in " ".join(s["notes"]) for s in steps[:-1])
    if algorithm == "direct":
        assert not any(k.startswith("winograd:") for k in kernels)
    if algorithm == "auto":
        # Nothing timed: each 3x3 stride-1 conv is Winograd's where its cost model predicts it
        # faster (the note says by how much), else refused with the prediction.
        for step in steps[:-1]:
            assert step["rule"] == "first_offer" and not step["timed"], step
            if step["kernel"].startswith("winograd:"):
                assert "predicted at " in " ".join(step["notes"]), step["notes"]
            else:
                assert "predicted_slower" in [kind for kind, _ in refusals_of(step, "winograd")], step["refusals"]


def test_disabled_backend_is_not_asked(kiln, block):
    path, _ = block
    x = np.random.rand(1, 32, 15, 15).astype(np.float32)
    with kiln.backends.winograd.flags(enabled=False, algorithm="winograd"):
        steps = kiln.Session(path).explain({"x": x})
    for step in steps:
        if step["op"] == "Conv":
            assert not step["kernel"].startswith("winograd:")
            assert ("disabled", "backend disabled") in refusals_of(step, "winograd")
