"""The fast RNN path and its switch: nn.LSTM, nn.GRU and nn.RNN exported by PyTorch run on oneDNN's RNN
primitives where those take them and on the native kernel otherwise, each choice and refusal visible
in explain, outputs equal to PyTorch's either way; kiln.backends.rnn turns the path off."""
import numpy as np
import pytest
import torch
from torch import nn


@pytest.fixture(scope="module")
def kiln(kiln_module):
    return kiln_module


@pytest.fixture(scope="module", params=["LSTM", "GRU", "RNN"])
def layer(request, tmp_path_factory):
    """A 2-layer bidirectional batch-first layer of the cell type, exported with a dynamic batch."""
    torch.manual_seed(0)
    module = getattr(nn, request.param)(24, 32, num_layers=2, bidirectional=True, batch_first=True).eval()
    path = tmp_path_factory.mktemp("recurrent") / f"{request.param}.onnx"

    class Outputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = module

        def forward(self, x):
            return self.layer(x)[0]

    x = torch.randn(1, 10, 24)
    torch.onnx.export(Outputs().eval(), x, str(path), opset_version=13, input_names=["input"],
                      output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    return request.param, module, path


def recurrent_steps(session, x, op):
    return [step for step in session.explain({"input": x}) if step["op"] == op]


def test_fast_path_and_its_refusals_match_pytorch(kiln, layer):
    op, module, path = layer
    for batch in (2, 8):  # oneDNN leaves batches of up to 4 to the native kernel
        x = np.random.default_rng(batch).standard_normal((batch, 10, 24)).astype(np.float32)
        with torch.no_grad():
            expected = module(torch.from_numpy(x))[0].numpy()
        for fast in (True, False):
            with kiln.backends.settings(rnn_fastpath=fast):
                session = kiln.Session(str(path))
                actual = session.run({"input": x})["output"]
                steps = recurrent_steps(session, x, op)
            assert len(steps) == 2
            np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=0)
            for step in steps:
                onednn = [r for r in step["refusals"] if r["backend"] == "onednn"]
                if fast and batch > 4:
                    assert step["kernel"].startswith("onednn:"), step
                    assert not onednn
                else:
                    assert step["kernel"] == "native:" + op.lower(), step
                    assert onednn[0]["kind"] == ("predicted_slower" if fast else "excluded_by_setting")


def test_get_and_set_fastpath_enabled(kiln):
    assert kiln.backends.rnn.get_fastpath_enabled() is True
    try:
        kiln.backends.rnn.set_fastpath_enabled(False)
        assert kiln.backends.rnn.get_fastpath_enabled() is False
        assert kiln.backends.current()["rnn_fastpath"] is False
        with kiln.backends.settings(rnn_fastpath=True):
            assert kiln.backends.rnn.get_fastpath_enabled() is True
    finally:
        kiln.backends.rnn.set_fastpath_enabled(True)
    assert kiln.backends.current()["rnn_fastpath"] is True
