#!/usr/bin/python3
"""Writes the model fuzzer's seeds for the ops with their own native kernels (Resize, ConvTranspose,
TopK, NonZero, Unique, NonMaxSuppression, ScatterND, GatherND, CumSum, Trilu, GroupNormalization-18,
Gelu-20, Pad-19's wrap, RoiAlign, GridSample) into fuzz/model_seeds, where scripts/fuzz.sh adds them to
the corpus.

    /usr/bin/python3 fuzz/make_op_seeds.py [DIR]

Each seed is one op (NonZero also read by a Transpose) of a few hundred bytes. Its inputs are
initializers, so planning folds the node and runs its native kernel on whatever the fuzzer makes of
the bytes; nonzero.onnx alone reads a graph input, leaving its data-dependent output to the plan. The
data come from a fixed generator: rerunning the script rewrites the same files. onnx 1.12 knows opsets
up to 17, so the models are written without onnx.checker.
"""
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEEDS = pathlib.Path(__file__).resolve().parent / "model_seeds"

# The IR version the ONNX release that introduced each opset writes (1.13: 18, 1.14: 19, 1.15: 20).
IR_VERSIONS = {18: 8, 19: 9, 20: 9}


def floats(shape, seed, low=-1.0, high=1.0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32).round(2)


def ints(*values):
    return np.array(values, np.int64)


def model(node, constants, outputs, opset, extra_nodes=(), inputs=()):
    """`node` (and `extra_nodes`) over initializers `constants` {name: array}; `outputs` and `inputs` are
    (name, TensorProto type, shape) triples, shapes left to kiln when None."""
    graph = helper.make_graph([node, *extra_nodes], "g", [helper.make_tensor_value_info(*value) for value in inputs],
                              [helper.make_tensor_value_info(*value) for value in outputs],
                              [numpy_helper.from_array(array, name) for name, array in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=IR_VERSIONS.get(opset, 8))


def float_out(name="y"):
    return (name, TensorProto.FLOAT, None)


def int_out(name):
    return (name, TensorProto.INT64, None)


def resize_linear():
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")
    return model(node, {"x": floats((1, 1, 3, 3), 1), "s": np.array([1, 1, 2, 1.5], np.float32)}, [float_out()], 13)


def resize_nearest():
    node = helper.make_node("Resize", ["x", "", "", "z"], ["y"], mode="nearest", nearest_mode="floor",
                            coordinate_transformation_mode="asymmetric")
    return model(node, {"x": floats((1, 2, 2, 3), 2), "z": ints(1, 2, 5, 4)}, [float_out()], 13)


def resize_cubic_18():
    """Opset 18: axes, antialias, and keep_aspect_ratio_policy."""
    node = helper.make_node("Resize", ["x", "", "", "z"], ["y"], mode="cubic", antialias=1, axes=[2, 3],
                            keep_aspect_ratio_policy="not_larger")
    return model(node, {"x": floats((1, 1, 5, 4), 3), "z": ints(3, 3)}, [float_out()], 18)


def conv_transpose():
    """Two groups, stride 2, asymmetric pads and output_padding, with a bias."""
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=2, strides=[2, 2], pads=[1, 0, 0, 1],
                            output_padding=[1, 1])
    return model(node, {"x": floats((1, 2, 2, 2), 4), "w": floats((2, 1, 3, 3), 5), "b": floats(2, 6)},
                 [float_out()], 13)


def conv_transpose_output_shape():
    """1-D, dilation 2, stride 3, and output_shape (kiln works out the pads)."""
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[3], dilations=[2], output_shape=[12])
    return model(node, {"x": floats((1, 1, 4), 7), "w": floats((1, 2, 3), 8)}, [float_out()], 13)


def topk():
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=0)
    return model(node, {"x": floats((2, 5), 9), "k": ints(3)}, [float_out("v"), int_out("i")], 11)


def nonzero():
    """NonZero of a graph input: its output's size is known only when it runs."""
    node = helper.make_node("NonZero", ["x"], ["y"])
    return model(node, {}, [int_out("y")], 13, inputs=[("x", TensorProto.FLOAT, [2, 3])])


def nonzero_folded():
    """NonZero of a constant, read by a Transpose: folding gives it a shape."""
    node = helper.make_node("NonZero", ["x"], ["n"])
    transpose = helper.make_node("Transpose", ["n"], ["y"])
    return model(node, {"x": np.array([[1, 0, 2], [0, 0, 3]], np.float32)}, [int_out("y")], 13,
                 extra_nodes=[transpose])


def unique():
    node = helper.make_node("Unique", ["x"], ["y", "i", "r", "c"], axis=0, sorted=1)
    x = np.array([[1, 2], [0, 1], [1, 2], [0, 0]], np.float32)
    return model(node, {"x": x}, [float_out(), int_out("i"), int_out("r"), int_out("c")], 11)


def non_max_suppression():
    """Centre-and-size boxes, two classes, every optional input."""
    node = helper.make_node("NonMaxSuppression", ["b", "s", "m", "t", "st"], ["y"], center_point_box=1)
    boxes = np.array([[[0.5, 0.5, 1, 1], [0.6, 0.5, 1, 1], [2, 2, 1, 1], [0.5, 0.4, 1, 1.2]]], np.float32)
    return model(node, {"b": boxes, "s": floats((1, 2, 4), 10, 0, 1), "m": ints(2),
                        "t": np.array([0.5], np.float32), "st": np.array([0.1], np.float32)}, [int_out("y")], 11)


def scatter_nd():
    """Opset 18's max reduction, one index repeated."""
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="max")
    return model(node, {"x": floats((4, 3), 11), "i": ints([1], [3], [1]), "u": floats((3, 3), 12)},
                 [float_out()], 18)


def gather_nd():
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)
    return model(node, {"x": floats((2, 3, 2), 13), "i": ints([[2, 1]], [[0, -1]])}, [float_out()], 13)


def cumsum():
    node = helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=1, reverse=1)
    return model(node, {"x": floats((2, 3), 14), "a": np.array(1, np.int64)}, [float_out()], 14)


def trilu():
    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=0)
    return model(node, {"x": floats((3, 4), 15), "k": np.array(1, np.int64)}, [float_out()], 14)


def group_normalization_18():
    """Opset 18: scale and bias per group."""
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2, epsilon=1e-3)
    return model(node, {"x": floats((1, 4, 2, 2), 16), "s": floats(2, 17), "b": floats(2, 18)}, [float_out()], 18)


def gelu_20():
    node = helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")
    return model(node, {"x": floats((2, 3), 19, -3, 3)}, [float_out()], 20)


def pad_wrap_19():
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap")
    return model(node, {"x": floats((2, 3), 20), "p": ints(1, 2, 0, 1)}, [float_out()], 19)


def roi_align():
    """Opset 16's half_pixel, max mode, two boxes over two images."""
    node = helper.make_node("RoiAlign", ["x", "r", "i"], ["y"], mode="max", output_height=2, output_width=2,
                            sampling_ratio=2, spatial_scale=0.5, coordinate_transformation_mode="half_pixel")
    rois = np.array([[0, 0, 6, 6], [1, 2, 7, 5]], np.float32)
    return model(node, {"x": floats((2, 1, 4, 4), 21), "r": rois, "i": ints(1, 0)}, [float_out()], 16)


def grid_sample():
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="bilinear", padding_mode="reflection")
    return model(node, {"x": floats((1, 1, 3, 3), 22), "g": floats((1, 2, 2, 2), 23, -1.2, 1.2)}, [float_out()], 16)


def grid_sample_20():
    """Opset 20's names: cubic, with border padding and corners aligned."""
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="cubic", padding_mode="border", align_corners=1)
    return model(node, {"x": floats((1, 1, 3, 3), 24), "g": floats((1, 2, 2, 2), 25, -1.2, 1.2)}, [float_out()], 20)


SEED_MODELS = [resize_linear, resize_nearest, resize_cubic_18, conv_transpose, conv_transpose_output_shape, topk,
               nonzero, nonzero_folded, unique, non_max_suppression, scatter_nd, gather_nd, cumsum, trilu,
               group_normalization_18, gelu_20, pad_wrap_19, roi_align, grid_sample, grid_sample_20]


def main(argv):
    out = pathlib.Path(argv[0]) if argv else SEEDS
    out.mkdir(parents=True, exist_ok=True)
    for make in SEED_MODELS:
        path = out / f"{make.__name__}.onnx"
        onnx.save(make(), str(path))
        print(path, path.stat().st_size, "bytes")


if __name__ == "__main__":
    main(sys.argv[1:])
