"""Small ONNX models made to trigger each of kiln tidy's runtime patterns, and a clean one that
triggers none: shared by tests/python/test_tidy_kiln.py and bench/tidy_estimates.py."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


def _save(path, nodes, inputs, outputs, initializers):
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]), str(path))
    return path


def _conv(rng, name, source, target, channels_in, channels_out):
    """A 3x3 same-padding Conv with bias, He-initialised, and its initializers."""
    weight = (rng.standard_normal((channels_out, channels_in, 3, 3)) * np.sqrt(2 / (9 * channels_in)))
    bias = rng.standard_normal(channels_out) * 0.1
    initializers = [numpy_helper.from_array(weight.astype(np.float32), f"{name}.w"),
                    numpy_helper.from_array(bias.astype(np.float32), f"{name}.b")]
    node = helper.make_node("Conv", [source, f"{name}.w", f"{name}.b"], [target], name=name,
                            kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    return node, initializers


def conv_chain(path, *, channels=32, size=56, layers=4, activation="Relu", batch=1):
    """Conv + activation, `layers` times: every activation a post-op where it is Relu (clean).
    `activation` None leaves it out; batch None makes the batch dim symbolic."""
    rng = np.random.default_rng(0)
    nodes, initializers = [], []
    source = "input"
    for layer in range(layers):
        conv_out = f"conv{layer}" if activation else f"out{layer}"
        node, weights = _conv(rng, f"conv{layer}", source, conv_out, 3 if layer == 0 else channels, channels)
        nodes.append(node)
        initializers += weights
        source = conv_out
        if activation:
            nodes.append(helper.make_node(activation, [conv_out], [f"act{layer}"], name=f"act{layer}"))
            source = f"act{layer}"
    nodes.append(helper.make_node("Identity", [source], ["output"], name="output"))
    batch_dim = "batch" if batch is None else batch
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch_dim, 3, size, size])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch_dim, channels, size, size])]
    return _save(path, nodes, inputs, outputs, initializers)


def conv_transpose_conv(path, *, channels=32, size=56):
    """Conv, a Transpose of H and W (native, plain layout) and Conv: Reorders between the steps."""
    rng = np.random.default_rng(0)
    first, first_weights = _conv(rng, "conv0", "input", "conv0", 3, channels)
    second, second_weights = _conv(rng, "conv1", "swapped", "output", channels, channels)
    swap = helper.make_node("Transpose", ["conv0"], ["swapped"], name="swap_hw", perm=[0, 1, 3, 2])
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, channels, size, size])]
    return _save(path, [first, swap, second], inputs, outputs, first_weights + second_weights)


def elementwise_chain(path, *, ops=24, width=64):
    """`ops` tiny elementwise steps on a [1, width] tensor (Add and Mul by constants): a run made of
    steps of a few microseconds, each a pass over memory no kernel fuses."""
    rng = np.random.default_rng(0)
    nodes, initializers = [], []
    source = "input"
    for i in range(ops):
        op = "Add" if i % 2 == 0 else "Mul"
        constant = rng.uniform(0.9, 1.1, width).astype(np.float32)
        initializers.append(numpy_helper.from_array(constant, f"c{i}"))
        target = "output" if i == ops - 1 else f"v{i}"
        nodes.append(helper.make_node(op, [source, f"c{i}"], [target], name=f"{op.lower()}{i}"))
        source = target
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, width])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, width])]
    return _save(path, nodes, inputs, outputs, initializers)


def random_input(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
