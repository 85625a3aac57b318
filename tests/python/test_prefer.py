"""Positive backend choice from Python: kiln.backends.prefer (scoped), set_prefer (global),
preferred_linalg_library and the blas_threshold setting; explain shows the kernels chosen, and a node
no listed backend takes is an error naming every candidate's reason."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
import onnx


@pytest.fixture(scope="module")
def kiln(kiln_module):
    return kiln_module


def save_model(path, nodes, inputs, outputs, weights):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(w, n) for n, w in weights.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return str(path)


@pytest.fixture
def product_model(tmp_path):
    """x [8, 64] -> MatMul (64 x 48) -> Relu -> Transpose: a product, an activation, a data move."""
    rng = np.random.default_rng(0)
    return save_model(tmp_path / "product.onnx",
                      [helper.make_node("MatMul", ["x", "w"], ["p"], name="product"),
                       helper.make_node("Relu", ["p"], ["r"], name="relu"),
                       helper.make_node("Transpose", ["r"], ["y"], name="move")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [48, 8])],
                      {"w": rng.standard_normal((64, 48)).astype(np.float32)})


def backends_of(session, x):
    return {step["node"]: step["kernel"].split(":")[0] for step in session.explain({"x": x})}


def test_prefer_orders_and_filters_per_op_family(kiln, product_model, demo_model):
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    expected = np.maximum(x @ numpy_helper.to_array(onnx.load(product_model).graph.initializer[0]), 0).T
    with kiln.backends.prefer(["native"], ops=["matmul"]):
        assert kiln.backends.preferred("matmul") == ["native"]
        assert kiln.backends.preferred("conv") == []
        session = kiln.Session(product_model)
        assert backends_of(session, x)["product"] == "native"
        np.testing.assert_allclose(session.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-5)
    assert kiln.backends.preferred("matmul") == []
    # With every family on native only, no step runs elsewhere, and the result is the same.
    with kiln.backends.prefer(["native"]):
        session = kiln.Session(product_model)
        assert set(backends_of(session, x).values()) == {"native"}
        np.testing.assert_allclose(session.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-5)
    # On the demo CNN, convolutions alone move to native; the text of explain names the kernels.
    with kiln.backends.prefer(["native", "onednn"], ops=["conv"]):
        text = kiln.Session(str(demo_model)).explain_text({"input": np.zeros((1, 3, 64, 64), np.float32)})
    conv_lines = [line for line in text.splitlines() if line.split()[1:2] == ["Conv"]]
    assert conv_lines and all("native:conv" in line for line in conv_lines), text
    assert "prefer_conv=native,onednn" in text.splitlines()[0]


def test_prefer_can_leave_native_out_and_the_error_names_every_reason(kiln, product_model):
    if not kiln.backends.onednn.is_built():
        pytest.skip("kiln was built without oneDNN")
    x = np.ones((8, 64), np.float32)
    with kiln.backends.prefer(["onednn"], ops=["matmul"]):
        assert backends_of(kiln.Session(product_model), x)["product"] == "onednn"
    with kiln.backends.prefer(["onednn"]):
        with pytest.raises(Exception) as error:
            kiln.Session(product_model).run({"x": x})
    message = str(error.value)
    assert "Transpose" in message and "native: not in prefer_other (onednn)" in message, message
    assert "onednn: no oneDNN kernel for Transpose" in message, message


def test_blas_threshold_and_preferred_linalg_library(kiln, product_model):
    if not kiln.backends.blas.is_built():
        pytest.skip("kiln was built without BLAS")
    x = np.ones((8, 64), np.float32)
    # 8 x 48 x 64 = 24576 multiply-adds: BLAS's under the default threshold, once the Relu is not
    # fused (BLAS applies no post-ops, so only a list without oneDNN leaves it unfused).
    with kiln.backends.prefer(["blas", "native"], ops=["matmul"]):
        assert backends_of(kiln.Session(product_model), x)["product"] == "blas"
        with kiln.backends.settings(blas_threshold=1000):
            steps = kiln.Session(product_model).explain({"x": x})
    product = next(step for step in steps if step["node"] == "product")
    assert product["kernel"].startswith("native:"), product
    assert any(r["kind"] == "above_threshold" and "above blas_threshold 1000" in r["detail"]
               for r in product["refusals"]), product
    assert kiln.backends.blas_threshold == 32768
    assert kiln.backends.preferred_linalg_library() == "default"
    try:
        assert kiln.backends.preferred_linalg_library("native") == "native"
        assert kiln.backends.preferred("matmul")[0] == "native"
        assert backends_of(kiln.Session(product_model), x)["product"] == "native"
    finally:
        kiln.backends.preferred_linalg_library("default")
    assert kiln.backends.preferred("matmul") == []
    with pytest.raises(ValueError, match="unknown backend 'cusolver'"):
        kiln.backends.preferred_linalg_library("cusolver")


def test_set_prefer_settings_and_sessions_take_the_same_lists(kiln, product_model):
    try:
        kiln.backends.set_prefer(["native", "onednn"], ops=["matmul", "attention"])
        assert kiln.backends.current()["prefer_matmul"] == ["native", "onednn"]
        assert kiln.backends.current()["prefer_attention"] == ["native", "onednn"]
        assert kiln.backends.current()["prefer_conv"] == []
    finally:
        kiln.backends.set_prefer([])
    assert kiln.backends.current()["prefer_matmul"] == []
    with kiln.backends.settings(prefer="native"):
        assert all(kiln.backends.current()[f"prefer_{family}"] == ["native"] for family in kiln.backends.op_families())
    session = kiln.Session(product_model, prefer_matmul=["native"])
    assert backends_of(session, np.ones((8, 64), np.float32))["product"] == "native"
    with pytest.raises(ValueError, match="unknown op family 'pooling'"):
        kiln.backends.prefer(["native"], ops=["pooling"])
    with pytest.raises(ValueError, match="unknown backend or kernel 'mkl'"):
        kiln.backends.prefer(["mkl"])
    with pytest.raises(ValueError, match="listed twice"):
        kiln.backends.prefer(["native", "native"])
