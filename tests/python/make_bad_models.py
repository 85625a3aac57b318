#!/usr/bin/python3
"""Malformed models and inputs for the bad-input tests (and as seeds for the model-loading fuzzer).

    /usr/bin/python3 tests/python/make_bad_models.py DIR [--demo models/demo.onnx]

writes every case below into DIR. Each builder takes a folder, writes its file(s) there and returns
the path to pass to `kiln run`. The small models are y = op(x) on x: float[1, 4], opset 13; the op cases
are one node (or two) named NODE_NAME with a wrong attribute or constant input, at the opset they name.
"""
import argparse
import os
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
NODE_NAME = "the_node"
UNKNOWN_OP = "FrobnicateX"
SHORT_INITIALIZER = "w"
DEMO_MODEL = pathlib.Path(__file__).resolve().parents[2] / "models" / "demo.onnx"


def small_model(op="Relu", initializers=()):
    """y = op(x, *initializers) on x: float[1, 4]."""
    inputs = ["x"] + [init.name for init in initializers]
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], name=NODE_NAME)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def save(model, path):
    path = pathlib.Path(path)
    onnx.save(model, str(path))
    return path


# --- files that are not models ---------------------------------------------------------------------

def truncated_model(folder, demo=DEMO_MODEL):
    """demo.onnx cut in half."""
    data = pathlib.Path(demo).read_bytes()
    path = pathlib.Path(folder) / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    return path


def random_bytes(folder):
    path = pathlib.Path(folder) / "random.onnx"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    return path


def tensor_proto(folder):
    """A valid protobuf message that is not a ModelProto: a serialized onnx.TensorProto."""
    path = pathlib.Path(folder) / "tensor.onnx"
    path.write_bytes(numpy_helper.from_array(np.ones((3, 3), np.float32), "t").SerializeToString())
    return path


# --- models that parse but must be rejected ---------------------------------------------------------

def unknown_op(folder):
    """Node NODE_NAME runs UNKNOWN_OP in the default domain at opset OPSET."""
    return save(small_model(op=UNKNOWN_OP), pathlib.Path(folder) / "unknown_op.onnx")


def short_initializer(folder):
    """Initializer SHORT_INITIALIZER: float[4] with 8 bytes of raw data (16 expected)."""
    weight = TensorProto(name=SHORT_INITIALIZER, data_type=TensorProto.FLOAT, dims=[4],
                         raw_data=np.ones(2, np.float32).tobytes())
    return save(small_model(op="Add", initializers=[weight]), pathlib.Path(folder) / "short_initializer.onnx")


def external_data_model(folder, location, file_name):
    """Initializer SHORT_INITIALIZER stored externally at `location` (relative to the model's folder)."""
    weight = TensorProto(name=SHORT_INITIALIZER, data_type=TensorProto.FLOAT, dims=[4],
                         data_location=TensorProto.EXTERNAL)
    entry = weight.external_data.add()
    entry.key, entry.value = "location", location
    return save(small_model(op="Add", initializers=[weight]), pathlib.Path(folder) / file_name)


def external_data_escaping(folder):
    """External data at "../outside.bin": a real file, but outside the model's folder."""
    folder = pathlib.Path(folder)
    (folder / "outside.bin").write_bytes(np.ones(4, np.float32).tobytes())
    (folder / "model").mkdir(exist_ok=True)
    return external_data_model(folder / "model", "../outside.bin", "escape.onnx")


def external_data_absolute(folder):
    """External data at an absolute path (also outside the model's folder)."""
    folder = pathlib.Path(folder)
    outside = folder / "absolute.bin"
    outside.write_bytes(np.ones(4, np.float32).tobytes())
    (folder / "model_abs").mkdir(exist_ok=True)
    return external_data_model(folder / "model_abs", str(outside.resolve()), "absolute.onnx")


def external_data_missing(folder):
    """External data naming a file that does not exist."""
    return external_data_model(folder, "missing.bin", "missing_external.onnx")


# --- ops whose attributes or constant inputs are wrong (each names node NODE_NAME) -------------------

def op_model(nodes, inputs, outputs, initializers=(), opset=OPSET):
    """A graph of `nodes`; `inputs` and `outputs` are (name, TensorProto type, shape) triples and
    `initializers` numpy arrays by name. Written without onnx.checker: onnx 1.12 knows opsets up to 17."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*value) for value in inputs],
                              [helper.make_tensor_value_info(*value) for value in outputs],
                              [numpy_helper.from_array(array, name) for name, array in dict(initializers).items()])
    # The IR version the ONNX release that introduced the opset writes (1.13: 18, 1.14: 19, 1.15: 20, 1.16: 21).
    ir_version = {18: 8, 19: 9, 20: 9, 21: 10, 22: 10}.get(opset, 8)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


IMAGE = ("x", TensorProto.FLOAT, [1, 1, 4, 4])


def resize_model(folder, file_name, scales=None, sizes=None, mode="nearest"):
    """y = Resize(x: float[1, 1, 4, 4], roi "", scales, sizes), scales and sizes constants."""
    initializers = {}
    if scales is not None:
        initializers["scales"] = np.array(scales, np.float32)
    if sizes is not None:
        initializers["sizes"] = np.array(sizes, np.int64)
    node = helper.make_node("Resize", ["x", "", "scales" if scales is not None else "", "sizes" if sizes is not None else ""],
                            ["y"], name=NODE_NAME, mode=mode)
    model = op_model([node], [IMAGE], [("y", TensorProto.FLOAT, None)], initializers)
    return save(model, pathlib.Path(folder) / file_name)


def resize_zero_scale(folder):
    return resize_model(folder, "resize_zero_scale.onnx", scales=[1, 1, 0, 2])


def resize_negative_scale(folder):
    return resize_model(folder, "resize_negative_scale.onnx", scales=[1, 1, -2, 2])


def resize_sizes_beyond_memory(folder):
    """sizes whose product still fits in int64 but whose output no machine holds (the fuzzer's find)."""
    return resize_model(folder, "resize_sizes_beyond_memory.onnx", sizes=[1, 1, 2 ** 40, 4])


def resize_tables_beyond_memory(folder):
    """A cubic Resize to one row of memory / 8 columns: its output (half the machine's memory) could be
    allocated, but its column taps (4 per column) could not (the fuzzer's second find)."""
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return resize_model(folder, "resize_tables_beyond_memory.onnx", sizes=[1, 1, 1, memory // 8], mode="cubic")


def resize_scales_and_sizes(folder):
    return resize_model(folder, "resize_scales_and_sizes.onnx", scales=[1, 1, 2, 2], sizes=[1, 1, 8, 8])


def resize_sizes_wrong_length(folder):
    """sizes [8, 8] for a rank-4 input."""
    return resize_model(folder, "resize_sizes_wrong_length.onnx", sizes=[8, 8])


def nms_center_point_box_2(folder):
    """NonMaxSuppression with center_point_box = 2 (only 0, corners, and 1, centre and size, exist)."""
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["selected"], name=NODE_NAME,
                            center_point_box=2)
    model = op_model([node], [("boxes", TensorProto.FLOAT, [1, 3, 4]), ("scores", TensorProto.FLOAT, [1, 1, 3])],
                     [("selected", TensorProto.INT64, None)])
    return save(model, pathlib.Path(folder) / "nms_center_point_box.onnx")


TOPK_K = 5


def topk_k_too_large(folder):
    """TopK with the constant k = TOPK_K along x's last axis, of size 4."""
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], name=NODE_NAME, axis=-1)
    model = op_model([node], [("x", TensorProto.FLOAT, [1, 4])],
                     [("values", TensorProto.FLOAT, None), ("indices", TensorProto.INT64, None)],
                     {"k": np.array([TOPK_K], np.int64)})
    return save(model, pathlib.Path(folder) / "topk_k_too_large.onnx")


def conv_transpose_model(folder, file_name, **attributes):
    """y = ConvTranspose(x: float[1, 1, 4, 4], w: float[1, 1, 3, 3]) with `attributes`."""
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name=NODE_NAME, kernel_shape=[3, 3], **attributes)
    model = op_model([node], [IMAGE], [("y", TensorProto.FLOAT, None)], {"w": np.ones((1, 1, 3, 3), np.float32)})
    return save(model, pathlib.Path(folder) / file_name)


def conv_transpose_output_shape_vs_pads(folder):
    """Stride 2, pads 1: the output is 7 x 7 (3 * 2 + 3 - 2), but output_shape asks for 10 x 10."""
    return conv_transpose_model(folder, "conv_transpose_output_shape.onnx", strides=[2, 2], pads=[1, 1, 1, 1],
                                output_shape=[10, 10])


def conv_transpose_output_padding(folder):
    """output_padding 2 with stride 2 (it must be smaller than the stride)."""
    return conv_transpose_model(folder, "conv_transpose_output_padding.onnx", strides=[2, 2],
                                output_padding=[2, 2])


GATHER_ND_INDEX = 5


def gather_nd_index_out_of_range(folder):
    """GatherND(x: float[2, 3], indices [[0, GATHER_ND_INDEX]]): 5 is past x's last axis (3)."""
    node = helper.make_node("GatherND", ["x", "indices"], ["y"], name=NODE_NAME)
    model = op_model([node], [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [1])],
                     {"indices": np.array([[0, GATHER_ND_INDEX]], np.int64)})
    return save(model, pathlib.Path(folder) / "gather_nd_out_of_range.onnx")


def scatter_elements_max_at_opset_16(folder):
    """ScatterElements' reduction "max" arrived at opset 18; opset 16 knows none, add and mul."""
    node = helper.make_node("ScatterElements", ["x", "indices", "updates"], ["y"], name=NODE_NAME, axis=1,
                            reduction="max")
    model = op_model([node], [("x", TensorProto.FLOAT, [1, 4])], [("y", TensorProto.FLOAT, [1, 4])],
                     {"indices": np.array([[1, 3]], np.int64), "updates": np.ones((1, 2), np.float32)}, opset=16)
    return save(model, pathlib.Path(folder) / "scatter_elements_max.onnx")


NONZERO_NODE = "the_nonzero"


def nonzero_feeds_a_node(folder):
    """y = NODE_NAME: Transpose(NONZERO_NODE: NonZero(x)); y's shape depends on x's values."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name=NONZERO_NODE),
             helper.make_node("Transpose", ["nz"], ["y"], name=NODE_NAME)]
    model = op_model(nodes, [("x", TensorProto.FLOAT, [1, 4])], [("y", TensorProto.INT64, None)])
    return save(model, pathlib.Path(folder) / "nonzero_feeds_a_node.onnx")


def loop_body_missing_outputs(folder):
    """y = Loop(M=2, carried x) whose body returns its condition only, not the carried value."""
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 4])],
                             [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, [])])
    nodes = [helper.make_node("Constant", [], ["M"], value=helper.make_tensor("M", TensorProto.INT64, [], [2])),
             helper.make_node("Loop", ["M", "", "x"], ["y"], name=NODE_NAME, body=body)]
    model = op_model(nodes, [("x", TensorProto.FLOAT, [1, 4])], [("y", TensorProto.FLOAT, [1, 4])])
    return save(model, pathlib.Path(folder) / "loop_body_missing_outputs.onnx")


def if_branch_reads_undefined(folder):
    """y = If(cond) whose branches read 'nowhere', which no graph defines."""
    branch = helper.make_graph([helper.make_node("Neg", ["nowhere"], ["t"])], "branch", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4])])
    nodes = [helper.make_node("If", ["cond"], ["y"], name=NODE_NAME, then_branch=branch, else_branch=branch)]
    model = op_model(nodes, [("cond", TensorProto.BOOL, [])], [("y", TensorProto.FLOAT, [1, 4])])
    return save(model, pathlib.Path(folder) / "if_branch_reads_undefined.onnx")


def loop_trip_count_absurd(folder):
    """y = Loop(M=2^40, carried x): a trip count past kiln's limit of 2^24 iterations."""
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                              helper.make_node("Identity", ["v"], ["v_out"])], "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 4])],
                             [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1, 4])])
    nodes = [helper.make_node("Loop", ["M", "", "x"], ["y"], name=NODE_NAME, body=body)]
    model = op_model(nodes, [("M", TensorProto.INT64, []), ("x", TensorProto.FLOAT, [1, 4])],
                     [("y", TensorProto.FLOAT, [1, 4])])
    return save(model, pathlib.Path(folder) / "loop_trip_count_absurd.onnx")


UNSUPPORTED_OPSET = 22


def opset_22(folder):
    """y = Relu(x) declared at opset UNSUPPORTED_OPSET (kiln supports 7 to 21)."""
    model = small_model()
    model.opset_import[0].version = UNSUPPORTED_OPSET
    model.ir_version = 10
    return save(model, pathlib.Path(folder) / "opset_22.onnx")


def grid_sample_5d(folder):
    """GridSample-20 on a 5-D input (volumetric sampling, new in opset 20)."""
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name=NODE_NAME)
    model = op_model([node], [("x", TensorProto.FLOAT, [1, 1, 2, 2, 2]), ("grid", TensorProto.FLOAT, [1, 2, 2, 2, 3])],
                     [("y", TensorProto.FLOAT, None)], opset=20)
    return save(model, pathlib.Path(folder) / "grid_sample_5d.onnx")


# --- inputs that do not fit demo.onnx (input "input": float32 [batch, 3, 64, 64]) ---------------------

def npy(folder, file_name, array):
    path = pathlib.Path(folder) / file_name
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)
    return path


def wrong_rank_input(folder):
    return npy(folder, "wrong_rank.npy", np.zeros((64, 64), np.float32))


def wrong_shape_input(folder):
    """[1, 4, 64, 64]: 4 channels where the model declares 3."""
    return npy(folder, "wrong_shape.npy", np.zeros((1, 4, 64, 64), np.float32))


def wrong_dtype_input(folder):
    return npy(folder, "wrong_dtype.npy", np.zeros((1, 3, 64, 64), np.float64))


def good_input(folder):
    return npy(folder, "good.npy", np.zeros((1, 3, 64, 64), np.float32))


def malformed_npy(folder):
    path = pathlib.Path(folder) / "malformed.npy"
    path.write_bytes(b"definitely not numpy")
    return path


MODEL_CASES = [truncated_model, random_bytes, tensor_proto, unknown_op, short_initializer, external_data_escaping,
               external_data_absolute, external_data_missing]
OP_CASES = [resize_zero_scale, resize_negative_scale, resize_scales_and_sizes, resize_sizes_wrong_length,
            resize_sizes_beyond_memory,
            nms_center_point_box_2, topk_k_too_large, conv_transpose_output_shape_vs_pads,
            conv_transpose_output_padding, gather_nd_index_out_of_range, scatter_elements_max_at_opset_16,
            nonzero_feeds_a_node, opset_22, grid_sample_5d]
INPUT_CASES = [wrong_rank_input, wrong_shape_input, wrong_dtype_input, malformed_npy, good_input]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="folder to write the cases into")
    parser.add_argument("--demo", default=str(DEMO_MODEL), help="demo model to truncate")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(truncated_model(out, args.demo))
    for make in MODEL_CASES[1:] + OP_CASES + INPUT_CASES:
        print(make(out))


if __name__ == "__main__":
    main(sys.argv[1:])
