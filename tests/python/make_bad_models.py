#!/usr/bin/python3
"""Malformed models and inputs for the bad-input tests (and as seeds for the model-loading fuzzer).

    /usr/bin/python3 tests/python/make_bad_models.py DIR [--demo models/demo.onnx]

writes every case below into DIR. Each builder takes a folder, writes its file(s) there and returns
the path to pass to `kiln run`. The small models are y = op(x) on x: float[1, 4], opset 13.
"""
import argparse
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
INPUT_CASES = [wrong_rank_input, wrong_shape_input, wrong_dtype_input, malformed_npy, good_input]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="folder to write the cases into")
    parser.add_argument("--demo", default=str(DEMO_MODEL), help="demo model to truncate")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(truncated_model(out, args.demo))
    for make in MODEL_CASES[1:] + INPUT_CASES:
        print(make(out))


if __name__ == "__main__":
    main(sys.argv[1:])
