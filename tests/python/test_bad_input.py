"""Bad input never crashes kiln: each case exits non-zero with one clear `kiln: error:` line that
names what was wrong. Run against the sanitizer build too (ctest --preset asan -L bad_input)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln_cli


def expect_error(kiln_bin, *args, mentions=()):
    result = kiln_cli.run(kiln_bin, *args)
    # A negative return code is a signal (a crash); sanitizer reports also land on stderr.
    assert result.returncode > 0, f"expected a clean failure, got {result.returncode}: {result.stderr}"
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one error line, got: {result.stderr}"
    assert lines[0].startswith("kiln: error:"), lines[0]
    for text in mentions:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    return lines[0]


def save(model, path):
    onnx.save(model, str(path))
    return path


def relu_model(extra_nodes=(), initializers=(), op="Relu"):
    """y = op(x) on x: float[1, 4]."""
    nodes = [helper.make_node(op, ["x"], ["y"], name="the_node")] + list(extra_nodes)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_missing_model_file(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", tmp_path / "nope.onnx", mentions=["nope.onnx"])


def test_truncated_model(kiln_bin, demo_model, tmp_path):
    data = demo_model.read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    expect_error(kiln_bin, "run", path, mentions=["truncated.onnx"])


def test_random_bytes(kiln_bin, tmp_path):
    path = tmp_path / "random.onnx"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    expect_error(kiln_bin, "run", path, mentions=["random.onnx"])


def test_protobuf_that_is_not_a_model(kiln_bin, tmp_path):
    path = tmp_path / "tensor.onnx"
    path.write_bytes(numpy_helper.from_array(np.ones((3, 3), np.float32), "t").SerializeToString())
    expect_error(kiln_bin, "run", path, mentions=["not"])


def test_unknown_op_names_op_node_and_opset(kiln_bin, tmp_path):
    path = save(relu_model(op="FrobnicateX"), tmp_path / "unknown.onnx")
    expect_error(kiln_bin, "run", path, mentions=["FrobnicateX", "the_node", "opset 13"])


def test_initializer_shorter_than_its_shape(kiln_bin, tmp_path):
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], raw_data=np.ones(2, np.float32).tobytes())
    model = relu_model(initializers=[weight])
    model.graph.node[0].op_type = "Add"
    model.graph.node[0].input.append("w")
    expect_error(kiln_bin, "run", save(model, tmp_path / "short.onnx"), mentions=["'w'", "8 bytes", "expected 16"])


def test_external_data_escaping_the_model_folder(kiln_bin, tmp_path):
    (tmp_path / "outside.bin").write_bytes(np.ones(4, np.float32).tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    entry = weight.external_data.add()
    entry.key, entry.value = "location", "../outside.bin"
    model = relu_model(initializers=[weight])
    model.graph.node[0].op_type = "Add"
    model.graph.node[0].input.append("w")
    expect_error(kiln_bin, "run", save(model, folder / "escape.onnx"), mentions=["../outside.bin", "escapes"])


@pytest.mark.parametrize("shape,mentions", [((64, 64), ["'input'", "rank 4"]),
                                            ((1, 4, 64, 64), ["'input'", "[batch, 3, 64, 64]"])])
def test_input_with_wrong_rank_or_shape(kiln_bin, demo_model, tmp_path, shape, mentions):
    path = tmp_path / "x.npy"
    np.save(path, np.zeros(shape, np.float32))
    expect_error(kiln_bin, "run", demo_model, "--input", f"input={path}", mentions=mentions)


def test_input_with_wrong_dtype(kiln_bin, demo_model, tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.zeros((1, 3, 64, 64), np.float64))
    expect_error(kiln_bin, "run", demo_model, "--input", f"input={path}", mentions=["'input'", "float32", "float64"])


def test_unknown_input_name(kiln_bin, demo_model, tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.zeros((1, 3, 64, 64), np.float32))
    expect_error(kiln_bin, "run", demo_model, "--input", f"nosuch={path}", mentions=["'nosuch'", "'input'"])


def test_unknown_option(kiln_bin, demo_model):
    expect_error(kiln_bin, "run", demo_model, "--frobnicate", mentions=["--frobnicate"])


def test_bad_thread_count(kiln_bin, demo_model):
    expect_error(kiln_bin, "run", demo_model, "--threads", "0", mentions=["--threads"])


def test_malformed_npy(kiln_bin, demo_model, tmp_path):
    path = tmp_path / "x.npy"
    path.write_bytes(b"definitely not numpy")
    expect_error(kiln_bin, "run", demo_model, "--input", f"input={path}", mentions=["x.npy"])


def test_demo_model_runs(kiln_bin, demo_model, tmp_path):
    result = kiln_cli.run(kiln_bin, "run", demo_model, "--output-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    assert "logits: float32 [1, 10]" in result.stdout
    assert np.load(tmp_path / "logits.npy").shape == (1, 10)
