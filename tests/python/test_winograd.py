"""The Winograd backend from Python: kiln.backends.winograd's controls, conv_algorithm, and a small
exported CNN (3x3 convs with ReLU and a residual, a stride-2 conv) against PyTorch under each algorithm
at batch 1 and 4, and the error budget's decision and outputs across processes. Model parity with the
default conv_algorithm (auto) over the torchvision CNNs is test_model_parity.py's."""
import json

import numpy as np
import pytest
import torch
from torch import nn

import kiln_cli


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


class Chain(nn.Module):
    """Four 3x3 convolutions of 128 channels on 28x28 with ReLU between: at batch 16, F(4x4,3x3)'s probe
    error on these layers is above Winograd's own bound and its cost model predicts it faster, so
    conv_algorithm auto weighs them against the error budget (as error_budget_test.cpp's chain)."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(128, 128, 3, padding=1) for _ in range(4))

    def forward(self, x):
        for i, conv in enumerate(self.convs):
            x = conv(x) if i == len(self.convs) - 1 else torch.relu(conv(x))
        return x


def test_error_budget_is_the_same_in_every_process(kiln_bin, tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "chain.onnx"
    torch.onnx.export(Chain().eval(), (torch.rand(1, 128, 28, 28),), str(path), opset_version=13,
                      input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})

    def decision(threads):
        result = kiln_cli.run(kiln_bin, "explain", path, "--batch", 16, "--threads", threads, "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        budget = report["error_budget"]
        assert budget is not None, "conv_algorithm auto planned no error budget for a chain of 3x3 convs"
        budget.pop("measure_ms")
        return budget, [(s["node"], s["kernel"], s["error_share"]) for s in report["steps"]]

    # Each process measures the model anew: the same layers weighed and taken, the same measured output
    # changes to the last bit, whatever the thread count.
    budget, steps = decision(1)
    assert (budget, steps) == decision(2)
    weighed = [share for _, _, share in steps if share is not None]
    if not weighed:
        pytest.skip(f"no layer has a faster form above Winograd's bound on this machine: {budget['summary']}")
    assert budget["spent"] == pytest.approx(sum(s["output_change"] for s in weighed if s["taken"]), rel=1e-3)
    assert budget["spent"] <= budget["budget"]

    # And the outputs of two processes at the same thread count are the same bytes.
    x = np.random.default_rng(0).random((16, 128, 28, 28), dtype=np.float32)
    runs = [kiln_cli.run_model(kiln_bin, str(path), {"x": x}, tmp_path / f"run{i}", threads=2) for i in range(2)]
    assert runs[0]["y"].tobytes() == runs[1]["y"].tobytes()
