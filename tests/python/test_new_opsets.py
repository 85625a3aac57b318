"""ONNX opsets 18 to 21: small models built with onnx.helper, run by `kiln run`, against numpy references.

Each case is one op (or a few) declared at one default-domain opset, with that opset's semantics:
- 18: Reduce* with `axes` as an input (and noop_with_empty_axes), Split's num_outputs (the last chunk
  smaller), Pad's `axes` input, ScatterElements' max/min reductions, the Bitwise ops, CenterCropPad,
  Col2Im, GroupNormalization-18 (scale and bias per group), Resize's antialias, axes and
  keep_aspect_ratio_policy.
- 19: Pad's "wrap" mode, AveragePool's dilations, Resize's "half_pixel_symmetric", Cast, Reshape,
  Shape and Identity.
- 20: Gelu (exact and tanh), ConstantOfShape, ReduceMax.
- 21: GroupNormalization-21 (scale and bias per channel), Transpose/Unsqueeze/Squeeze/Flatten, Cast.
- One small model per opset chaining Conv, GroupNormalization, an activation, Resize and a reduction.

The references are numpy in float64, following the ONNX operator specification and its reference
implementation (onnx/reference/ops): float outputs must be float32 within 1e-5 of the output's scale
(data movement and max/min exactly); integer outputs must match exactly. Every case runs with
the default backends and with the native reference alone. onnx 1.12 knows opsets up to 17, so the
models are written without onnx.checker.
"""
import dataclasses
import math

import numpy as np
import onnx
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper

import kiln_cli

# The default backends (Winograd, oneDNN and BLAS first, as users run kiln) and the native reference alone.
BACKENDS = {"default": (), "native": ("--disable", "onednn", "--disable", "blas", "--disable", "winograd")}

# The IR version the ONNX release that introduced each opset writes (1.13: 18, 1.14: 19, 1.15: 20, 1.16: 21).
IR_VERSIONS = {18: 8, 19: 9, 20: 9, 21: 10}

TOLERANCE = 1e-5  # of the output's scale, max(1, max |expected|)

ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.FLOAT,
              np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64}


@dataclasses.dataclass
class Case:
    """A graph at `opset`: its nodes, graph inputs, initializers, and expected outputs by name. A float64
    expected output is the reference for a float32 output; `exact` requires float outputs to match exactly."""
    opset: int
    nodes: list
    inputs: dict
    expected: dict
    initializers: dict = dataclasses.field(default_factory=dict)
    exact: bool = False

    def save(self, path):
        def value_info(name, array):
            return helper.make_tensor_value_info(name, ONNX_TYPES[array.dtype], array.shape)

        graph = helper.make_graph(self.nodes, path.stem, [value_info(n, a) for n, a in self.inputs.items()],
                                  [value_info(n, a) for n, a in self.expected.items()],
                                  initializer=[numpy_helper.from_array(a, n) for n, a in self.initializers.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  ir_version=IR_VERSIONS[self.opset], producer_name="kiln-tests")
        onnx.save(model, str(path))
        return path


CASES = {}


def case(build):
    """Registers a function returning a Case; its name is the test id."""
    CASES[build.__name__] = build
    return build


def random(shape, seed, scale=1.0):
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def ints(values, dtype=np.int64):
    return np.array(values, dtype=dtype)


def floats(values):
    return np.array(values, dtype=np.float32)


# ---- numpy references (float64) ----

def conv2d(x, weight, bias, pad):
    """Conv with stride 1, dilation 1, one group and `pad` on every side."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = sliding_window_view(x, weight.shape[2:], axis=(2, 3))  # N, C, H, W, kh, kw
    return np.einsum("ncyxij,ocij->noyx", windows, weight.astype(np.float64)) + bias.reshape(1, -1, 1, 1)


def group_norm(x, num_groups, scale, bias, epsilon=1e-5):
    """GroupNormalization with `scale` and `bias` per channel ([C]); statistics per instance and group,
    with the biased variance."""
    groups = x.astype(np.float64).reshape(x.shape[0], num_groups, -1)
    mean = groups.mean(axis=-1, keepdims=True)
    variance = groups.var(axis=-1, keepdims=True)
    normalized = ((groups - mean) / np.sqrt(variance + np.float64(np.float32(epsilon)))).reshape(x.shape)
    channels = (1, -1) + (1,) * (x.ndim - 2)
    return normalized * scale.reshape(channels) + bias.reshape(channels)


def per_channel(group_values, channels):
    """GroupNormalization-18's scale or bias (one value per group) as the per-channel values it means."""
    return np.repeat(group_values, channels // len(group_values))


def gelu(x, approximate="none"):
    x = x.astype(np.float64)
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def linear_resize_weights(in_size, out_size, scale, mode="half_pixel", antialias=False, exclude_outside=False):
    """[out_size, in_size] weights of Resize mode "linear" along one axis at `scale` (the given scale, or
    the keep_aspect_ratio_policy's one; not out_size / in_size). With antialias and scale < 1 the triangle
    filter is stretched by 1 / scale. Taps outside the input take the edge value (exclude_outside 0) or
    are dropped (exclude_outside 1); the weights are then normalized to sum to 1."""
    positions = np.arange(out_size) + 0.5
    if mode == "half_pixel":
        sources = positions / scale - 0.5
    elif mode == "half_pixel_symmetric":
        adjustment = out_size / (scale * in_size)
        sources = in_size / 2 * (1 - adjustment) + positions / scale - 0.5
    else:
        raise ValueError(mode)
    support = min(scale, 1.0) if antialias else 1.0
    weights = np.zeros((out_size, in_size))
    for row, source in zip(weights, sources):
        taps = np.arange(math.floor(source - 1 / support), math.ceil(source + 1 / support) + 1)
        tap_weights = np.clip(1 - np.abs(taps - source) * support, 0, None)
        if exclude_outside:
            inside = (taps >= 0) & (taps < in_size)
            taps, tap_weights = taps[inside], tap_weights[inside]
        np.add.at(row, np.clip(taps, 0, in_size - 1), tap_weights / tap_weights.sum())
    return weights


def linear_resize(x, axes, scales, sizes, **options):
    """Resize mode "linear", separable along `axes`, to `sizes` at `scales`."""
    y = x.astype(np.float64)
    for axis, scale, size in zip(axes, scales, sizes):
        weights = linear_resize_weights(y.shape[axis], size, float(scale), **options)
        y = np.moveaxis(np.tensordot(weights, np.moveaxis(y, axis, 0), axes=1), 0, axis)
    return y


def aspect_ratio_sizes(in_sizes, sizes, policy):
    """keep_aspect_ratio_policy: one scale for every resized axis (the min or max of sizes / in_sizes),
    and output sizes round(scale * in_size), halves rounded up. Returns (scale, output sizes)."""
    ratios = [size / in_size for size, in_size in zip(sizes, in_sizes)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    return scale, [math.floor(scale * in_size + 0.5) for in_size in in_sizes]


def average_pool(x, kernel, strides, dilations, pads, count_include_pad):
    """2-D AveragePool; pads are [h_begin, w_begin, h_end, w_end]. Without count_include_pad a window is
    divided by the number of its taps inside the input."""
    pad_width = ((pads[0], pads[2]), (pads[1], pads[3]))
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0)) + pad_width)
    inside = np.pad(np.ones(x.shape[2:]), pad_width)
    out = [(padded.shape[2 + i] - dilations[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(2)]
    total, count = 0.0, 0.0
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            taps = (slice(i * dilations[0], i * dilations[0] + strides[0] * (out[0] - 1) + 1, strides[0]),
                    slice(j * dilations[1], j * dilations[1] + strides[1] * (out[1] - 1) + 1, strides[1]))
            total = total + padded[(...,) + taps]
            count = count + inside[taps]
    return total / (kernel[0] * kernel[1] if count_include_pad else count)


def col2im(columns, image_shape, block_shape, dilations=(1, 1), pads=(0, 0, 0, 0), strides=(1, 1)):
    """2-D Col2Im: columns [N, C * kh * kw, L] (channel-major, then the block's offsets row by row; the L
    blocks in row-major order) summed into an image padded by `pads` [h_begin, w_begin, h_end, w_end],
    then cropped to image_shape."""
    n = columns.shape[0]
    (height, width), (kh, kw) = image_shape, block_shape
    padded = (height + pads[0] + pads[2], width + pads[1] + pads[3])
    blocks = [(padded[i] - dilations[i] * (block_shape[i] - 1) - 1) // strides[i] + 1 for i in range(2)]
    assert blocks[0] * blocks[1] == columns.shape[2]
    columns = columns.astype(np.float64).reshape(n, -1, kh, kw, *blocks)
    image = np.zeros((n, columns.shape[1]) + padded)
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dilations[0], i * dilations[0] + strides[0] * (blocks[0] - 1) + 1, strides[0])
            cols = slice(j * dilations[1], j * dilations[1] + strides[1] * (blocks[1] - 1) + 1, strides[1])
            image[:, :, rows, cols] += columns[:, :, i, j]
    return image[:, :, pads[0]:pads[0] + height, pads[1]:pads[1] + width]


def center_crop_pad(x, shape, axes=None):
    """CenterCropPad: a crop starts at floor((in - out) / 2); a pad puts the extra zero on the right."""
    axes = range(x.ndim) if axes is None else [axis % x.ndim for axis in axes]
    for axis, size in zip(axes, shape):
        difference = x.shape[axis] - size
        if difference > 0:
            x = np.take(x, np.arange(difference // 2, difference // 2 + size), axis=axis)
        elif difference < 0:
            widths = [(0, 0)] * x.ndim
            widths[axis] = (-difference // 2, -difference - (-difference // 2))
            x = np.pad(x, widths)
    return x


def split_num_outputs(x, num_outputs, axis):
    """Split-18 with num_outputs: chunks of ceil(dim / num_outputs), the last one smaller."""
    chunk = -(-x.shape[axis] // num_outputs)
    return np.split(x, [chunk * i for i in range(1, num_outputs)], axis=axis)


def pad_axes(x, pads, axes, mode="constant", value=0.0):
    """Pad-18: pads [begin..., end...] for `axes` only."""
    widths = [(0, 0)] * x.ndim
    for i, axis in enumerate(axes):
        widths[axis % x.ndim] = (pads[i], pads[len(axes) + i])
    return np.pad(x, widths, mode=mode, **({"constant_values": value} if mode == "constant" else {}))


def scatter_elements(data, indices, updates, axis, reduction):
    """ScatterElements with a reduction: every update folds into the output, data's value included;
    negative indices count from the end."""
    combine = {"max": max, "min": min}[reduction]
    output = data.copy()
    for position in np.ndindex(indices.shape):
        target = list(position)
        target[axis] = indices[position] % data.shape[axis]
        output[tuple(target)] = combine(output[tuple(target)], updates[position])
    return output


# ---- opset 18 ----

@case
def opset18_reduce_axes_input():
    x = random((2, 3, 4, 5), seed=1)

    def reduce(op, output, axes, **attributes):
        return helper.make_node(op, ["x", axes] if axes else ["x"], [output], **attributes)

    nodes = [reduce("ReduceMean", "mean_hw", "axes_hw"),
             reduce("ReduceSum", "sum_last", "axes_last", keepdims=0),
             reduce("ReduceMax", "max_c", "axes_c"),
             reduce("ReduceL2", "l2", "axes_n_h", keepdims=0),
             reduce("ReduceMean", "mean_all", "no_axes"),  # empty axes: all of them
             reduce("ReduceL2", "l2_noop", "no_axes", noop_with_empty_axes=1),  # sqrt(x^2) = |x|
             reduce("ReduceSum", "sum_noop", None, noop_with_empty_axes=1)]
    x64 = x.astype(np.float64)
    expected = {"mean_hw": x64.mean(axis=(2, 3), keepdims=True), "sum_last": x64.sum(axis=-1),
                "max_c": x64.max(axis=1, keepdims=True), "l2": np.sqrt((x64 ** 2).sum(axis=(0, 2))),
                "mean_all": x64.mean(keepdims=True), "l2_noop": np.abs(x64), "sum_noop": x64}
    initializers = {"axes_hw": ints([2, 3]), "axes_last": ints([-1]), "axes_c": ints([1]),
                    "axes_n_h": ints([0, 2]), "no_axes": ints([])}
    return Case(18, nodes, {"x": x}, expected, initializers)


@case
def opset18_split_num_outputs():
    x = random((2, 7, 3), seed=2)
    nodes = [helper.make_node("Split", ["x"], ["a0", "a1", "a2"], axis=1, num_outputs=3),  # 3, 3, 1
             helper.make_node("Split", ["x"], ["b0", "b1", "b2"], axis=-1, num_outputs=3)]  # 1, 1, 1
    uneven, even = split_num_outputs(x, 3, axis=1), split_num_outputs(x, 3, axis=-1)
    assert [part.shape[1] for part in uneven] == [3, 3, 1]
    expected = {f"a{i}": part for i, part in enumerate(uneven)} | {f"b{i}": part for i, part in enumerate(even)}
    return Case(18, nodes, {"x": x}, expected, exact=True)


@case
def opset18_pad_axes_input():
    x = random((2, 3, 4), seed=3)
    nodes = [helper.make_node("Pad", ["x", "pads_constant", "value", "axes_constant"], ["constant"]),
             helper.make_node("Pad", ["x", "pads_reflect", "", "axes_reflect"], ["reflect"], mode="reflect"),
             helper.make_node("Pad", ["x", "pads_edge", "", "axes_edge"], ["edge"], mode="edge")]
    initializers = {"pads_constant": ints([2, 1, 0, 3]), "value": np.array(1.5, np.float32),
                    "axes_constant": ints([-1, 1]),
                    "pads_reflect": ints([1, 2]), "axes_reflect": ints([2]),
                    "pads_edge": ints([1, 0, 0, 2]), "axes_edge": ints([0, 2], np.int32)}  # axes may be int32
    expected = {"constant": pad_axes(x, [2, 1, 0, 3], [-1, 1], value=1.5),
                "reflect": pad_axes(x, [1, 2], [2], mode="reflect"),
                "edge": pad_axes(x, [1, 0, 0, 2], [0, 2], mode="edge")}
    return Case(18, nodes, {"x": x}, expected, initializers, exact=True)


@case
def opset18_scatter_elements_max_min():
    data = random((3, 5), seed=4)
    # Repeated targets in every row; -1 and 4 are the same column.
    indices = ints([[0, 0, 2, 4], [1, 1, 1, 3], [4, 0, -1, 0]])
    updates = random((3, 4), seed=5)
    nodes = [helper.make_node("ScatterElements", ["data", "indices", "updates"], [reduction], axis=1,
                              reduction=reduction) for reduction in ("max", "min")]
    expected = {reduction: scatter_elements(data, indices, updates, 1, reduction) for reduction in ("max", "min")}
    return Case(18, nodes, {"data": data, "updates": updates}, expected, {"indices": indices}, exact=True)


@case
def opset18_bitwise_int32():
    rng = np.random.default_rng(6)
    a = rng.integers(-2 ** 31, 2 ** 31, (3, 5), dtype=np.int64).astype(np.int32)
    b = rng.integers(-2 ** 31, 2 ** 31, (3, 5), dtype=np.int64).astype(np.int32)
    a[0, :2], b[0, :2] = np.iinfo(np.int32).min, -1
    nodes = [helper.make_node("BitwiseAnd", ["a", "b"], ["and"]), helper.make_node("BitwiseOr", ["a", "b"], ["or"]),
             helper.make_node("BitwiseXor", ["a", "b"], ["xor"]), helper.make_node("BitwiseNot", ["a"], ["not"])]
    expected = {"and": a & b, "or": a | b, "xor": a ^ b, "not": ~a}
    return Case(18, nodes, {"a": a, "b": b}, expected)


@case
def opset18_center_crop_pad():
    x = random((2, 7, 6), seed=7)
    nodes = [helper.make_node("CenterCropPad", ["x", "crop_and_pad"], ["mixed"], axes=[1, 2]),
             helper.make_node("CenterCropPad", ["x", "crop_all"], ["cropped"]),
             helper.make_node("CenterCropPad", ["x", "pad_one"], ["padded"], axes=[-2])]
    initializers = {"crop_and_pad": ints([4, 9]), "crop_all": ints([1, 5, 3]), "pad_one": ints([10], np.int32)}
    expected = {"mixed": center_crop_pad(x, [4, 9], [1, 2]),  # rows 1..4; columns 1 zero left, 2 right
                "cropped": center_crop_pad(x, [1, 5, 3]),
                "padded": center_crop_pad(x, [10], [-2])}
    return Case(18, nodes, {"x": x}, expected, initializers, exact=True)


@case
def opset18_col2im_spec_example():
    columns = floats([[[1, 6, 11, 16, 21], [2, 7, 12, 17, 22], [3, 8, 13, 18, 23], [4, 9, 14, 19, 24],
                       [5, 0, 15, 20, 25]]])
    node = helper.make_node("Col2Im", ["columns", "image_shape", "block_shape"], ["image"])
    expected = {"image": col2im(columns, (5, 5), (1, 5))}
    assert np.array_equal(expected["image"][0, 0, 1], [6, 7, 8, 9, 0])  # the specification's output
    return Case(18, [node], {"columns": columns}, expected,
                {"image_shape": ints([5, 5]), "block_shape": ints([1, 5])})


@case
def opset18_col2im_dilated_padded_strided():
    # Image 6x7, block 2x3 dilated by (2, 1), pads h 1/0 and w 0/2, strides 2: 3x4 blocks, 2 channels.
    columns = random((2, 2 * 2 * 3, 12), seed=8)
    node = helper.make_node("Col2Im", ["columns", "image_shape", "block_shape"], ["image"], dilations=[2, 1],
                            pads=[1, 0, 0, 2], strides=[2, 2])
    expected = {"image": col2im(columns, (6, 7), (2, 3), dilations=(2, 1), pads=(1, 0, 0, 2), strides=(2, 2))}
    return Case(18, [node], {"columns": columns}, expected,
                {"image_shape": ints([6, 7]), "block_shape": ints([2, 3])})


@case
def opset18_group_normalization():
    x = random((2, 6, 3, 4), seed=9, scale=2.0) + 0.5
    scale, bias = random((3,), seed=10), random((3,), seed=11)  # one per group at opset 18
    node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=3, epsilon=1e-3)
    expected = {"y": group_norm(x, 3, per_channel(scale, 6), per_channel(bias, 6), epsilon=1e-3)}
    return Case(18, [node], {"x": x}, expected, {"scale": scale, "bias": bias})


@case
def opset18_resize_antialias():
    x = random((1, 2, 9, 11), seed=12)
    scales = floats([0.6, 0.4])  # to 5x4; the coordinates use these scales, not 5/9 and 4/11
    nodes = [helper.make_node("Resize", ["x", "", "scales"], [name], mode="linear", antialias=1, axes=[2, 3],
                              exclude_outside=exclude) for name, exclude in (("edge", 0), ("inside", 1))]
    expected = {name: linear_resize(x, [2, 3], scales, [5, 4], antialias=True, exclude_outside=exclude)
                for name, exclude in (("edge", False), ("inside", True))}
    return Case(18, nodes, {"x": x}, expected, {"scales": scales})


@case
def opset18_resize_keep_aspect_ratio():
    x = random((1, 2, 5, 7), seed=13)
    nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], [policy], mode="linear", axes=[-2, -1],
                              keep_aspect_ratio_policy=policy) for policy in ("not_larger", "not_smaller")]
    expected = {}
    for policy in ("not_larger", "not_smaller"):  # sizes 4x4: 3x4 at 4/7, and 4x6 at 4/5
        scale, sizes = aspect_ratio_sizes([5, 7], [4, 4], policy)
        expected[policy] = linear_resize(x, [2, 3], [scale, scale], sizes)
    return Case(18, nodes, {"x": x}, expected, {"sizes": ints([4, 4])})


@case
def opset18_model():
    """Conv, GroupNormalization-18 (per-group scale), Relu, an antialiased Resize, ReduceMean over axes."""
    x = random((1, 3, 8, 8), seed=14)
    weight, bias = random((4, 3, 3, 3), seed=15, scale=0.3), random((4,), seed=16)
    scale, shift = random((2,), seed=17), random((2,), seed=18)
    nodes = [helper.make_node("Conv", ["x", "weight", "bias"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GroupNormalization", ["conv", "scale", "shift"], ["norm"], num_groups=2),
             helper.make_node("Relu", ["norm"], ["relu"]),
             helper.make_node("Resize", ["relu", "", "scales"], ["features"], mode="linear", antialias=1, axes=[2, 3]),
             helper.make_node("ReduceMean", ["features", "axes"], ["pooled"], keepdims=0)]
    relu = np.maximum(group_norm(conv2d(x, weight, bias, 1), 2, per_channel(scale, 4), per_channel(shift, 4)), 0)
    features = linear_resize(relu, [2, 3], [0.5, 0.5], [4, 4], antialias=True)
    expected = {"features": features, "pooled": features.mean(axis=(2, 3))}
    initializers = {"weight": weight, "bias": bias, "scale": scale, "shift": shift, "scales": floats([0.5, 0.5]),
                    "axes": ints([2, 3])}
    return Case(18, nodes, {"x": x}, expected, initializers)


# ---- opset 19 ----

@case
def opset19_pad_wrap():
    x = random((2, 3, 4), seed=19)
    nodes = [helper.make_node("Pad", ["x", "pads_all"], ["all_axes"], mode="wrap"),
             helper.make_node("Pad", ["x", "pads_last", "", "axes_last"], ["last_axis"], mode="wrap")]
    expected = {"all_axes": np.pad(x, ((0, 1), (2, 1), (3, 4)), mode="wrap"),
                "last_axis": pad_axes(x, [1, 2], [-1], mode="wrap")}
    initializers = {"pads_all": ints([0, 2, 3, 1, 1, 4]), "pads_last": ints([1, 2]), "axes_last": ints([-1])}
    return Case(19, nodes, {"x": x}, expected, initializers, exact=True)


@case
def opset19_average_pool_dilations():
    x = random((1, 2, 7, 8), seed=20)
    padded = dict(kernel_shape=[3, 2], dilations=[2, 3], pads=[2, 1, 1, 2], strides=[1, 2])
    nodes = [helper.make_node("AveragePool", ["x"], ["exclude_pad"], **padded),
             helper.make_node("AveragePool", ["x"], ["include_pad"], count_include_pad=1, **padded),
             helper.make_node("AveragePool", ["x"], ["unpadded"], kernel_shape=[2, 2], dilations=[3, 2])]
    expected = {"exclude_pad": average_pool(x, (3, 2), (1, 2), (2, 3), (2, 1, 1, 2), count_include_pad=False),
                "include_pad": average_pool(x, (3, 2), (1, 2), (2, 3), (2, 1, 1, 2), count_include_pad=True),
                "unpadded": average_pool(x, (2, 2), (1, 1), (3, 2), (0, 0, 0, 0), count_include_pad=False)}
    return Case(19, nodes, {"x": x}, expected)


@case
def opset19_resize_half_pixel_symmetric():
    x = random((1, 2, 4, 6), seed=21)
    scales = floats([1.7, 0.7])  # 6.8 and 4.2: to 6x4, so the sampling grid is recentred
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear", axes=[2, 3],
                            coordinate_transformation_mode="half_pixel_symmetric")
    expected = {"y": linear_resize(x, [2, 3], scales, [6, 4], mode="half_pixel_symmetric")}
    return Case(19, [node], {"x": x}, expected, {"scales": scales})


@case
def opset19_cast_float_to_int32():
    x = floats([[-2.7, -0.5, -0.0, 0.3], [1.9, 2.5, -123456.75, 65535.9]])
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32)  # saturate (default 1) is for float 8
    return Case(19, [node], {"x": x}, {"y": np.trunc(x).astype(np.int32)})


@case
def opset19_reshape_shape_identity():
    x = random((2, 3, 4), seed=22)
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Shape", ["x"], ["tail"], start=-2),
             helper.make_node("Reshape", ["x", "target"], ["reshaped"]),  # 0 copies the input's dimension
             helper.make_node("Identity", ["reshaped"], ["y"])]
    expected = {"shape": ints([2, 3, 4]), "tail": ints([3, 4]), "y": x.reshape(2, 12)}
    return Case(19, nodes, {"x": x}, expected, {"target": ints([0, -1])}, exact=True)


@case
def opset19_model():
    """Conv, AveragePool with dilations, Pad "wrap" on the spatial axes, Resize "half_pixel_symmetric"."""
    x = random((1, 3, 9, 9), seed=23)
    weight, bias = random((4, 3, 3, 3), seed=24, scale=0.3), random((4,), seed=25)
    scales = floats([1.5, 0.7])  # 7x7 to 10x4
    nodes = [helper.make_node("Conv", ["x", "weight", "bias"], ["conv"], kernel_shape=[3, 3]),
             helper.make_node("AveragePool", ["conv"], ["pool"], kernel_shape=[3, 3], dilations=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Pad", ["pool", "pads", "", "axes"], ["wrapped"], mode="wrap"),
             helper.make_node("Resize", ["wrapped", "", "scales"], ["y"], mode="linear", axes=[2, 3],
                              coordinate_transformation_mode="half_pixel_symmetric")]
    pool = average_pool(conv2d(x, weight, bias, 0), (3, 3), (1, 1), (2, 2), (1, 1, 1, 1), count_include_pad=False)
    wrapped = pad_axes(pool, [1, 2, 1, 0], [2, 3], mode="wrap")
    expected = {"y": linear_resize(wrapped, [2, 3], scales, [10, 4], mode="half_pixel_symmetric")}
    initializers = {"weight": weight, "bias": bias, "pads": ints([1, 2, 1, 0]), "axes": ints([2, 3]),
                    "scales": scales}
    return Case(19, nodes, {"x": x}, expected, initializers)


# ---- opset 20 ----

@case
def opset20_gelu():
    x = np.concatenate([np.linspace(-6, 6, 25, dtype=np.float32), random((15,), seed=26, scale=2.0)])
    nodes = [helper.make_node("Gelu", ["x"], ["exact"]),
             helper.make_node("Gelu", ["x"], ["tanh"], approximate="tanh")]
    return Case(20, nodes, {"x": x}, {"exact": gelu(x), "tanh": gelu(x, "tanh")})


@case
def opset20_constant_of_shape():
    x = random((2, 3, 5), seed=27)
    nodes = [helper.make_node("Shape", ["x"], ["tail"], start=1),
             helper.make_node("ConstantOfShape", ["tail"], ["filled"],
                              value=helper.make_tensor("value", TensorProto.INT32, [1], [-3])),
             helper.make_node("ConstantOfShape", ["tail"], ["zeros"])]  # no value: float32 zeros
    expected = {"filled": np.full((3, 5), -3, np.int32), "zeros": np.zeros((3, 5), np.float32)}
    return Case(20, nodes, {"x": x}, expected, exact=True)


@case
def opset20_reduce_max():
    x = random((2, 3, 4), seed=28)
    nodes = [helper.make_node("ReduceMax", ["x", "axes"], ["max"], keepdims=0),
             helper.make_node("ReduceMax", ["x", "no_axes"], ["noop"], noop_with_empty_axes=1)]
    expected = {"max": x.max(axis=(0, 2)), "noop": x}
    return Case(20, nodes, {"x": x}, expected, {"axes": ints([0, -1]), "no_axes": ints([])}, exact=True)


@case
def opset20_model():
    """Conv, GroupNormalization (still opset 18's: per-group scale), Gelu "tanh", Resize to sizes, ReduceMax."""
    x = random((1, 3, 6, 6), seed=29)
    weight, bias = random((8, 3, 3, 3), seed=30, scale=0.3), random((8,), seed=31)
    scale, shift = random((4,), seed=32), random((4,), seed=33)
    nodes = [helper.make_node("Conv", ["x", "weight", "bias"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GroupNormalization", ["conv", "scale", "shift"], ["norm"], num_groups=4),
             helper.make_node("Gelu", ["norm"], ["gelu"], approximate="tanh"),
             helper.make_node("Resize", ["gelu", "", "", "sizes"], ["features"], mode="linear", axes=[2, 3]),
             helper.make_node("ReduceMax", ["features", "axes"], ["y"])]
    norm = group_norm(conv2d(x, weight, bias, 1), 4, per_channel(scale, 8), per_channel(shift, 8))
    features = linear_resize(gelu(norm, "tanh"), [2, 3], [9 / 6, 8 / 6], [9, 8])
    expected = {"features": features, "y": features.max(axis=1, keepdims=True)}
    initializers = {"weight": weight, "bias": bias, "scale": scale, "shift": shift, "sizes": ints([9, 8]),
                    "axes": ints([1])}
    return Case(20, nodes, {"x": x}, expected, initializers)


# ---- opset 21 ----

@case
def opset21_group_normalization():
    x = random((2, 6, 5), seed=34, scale=3.0) - 1.0
    scale, bias = random((6,), seed=35), random((6,), seed=36)  # one per channel at opset 21
    node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=2)
    return Case(21, [node], {"x": x}, {"y": group_norm(x, 2, scale, bias)}, {"scale": scale, "bias": bias})


@case
def opset21_transpose_flatten_squeeze_unsqueeze():
    x = random((2, 3, 4), seed=37)
    nodes = [helper.make_node("Transpose", ["x"], ["transposed"], perm=[2, 0, 1]),  # 4, 2, 3
             helper.make_node("Unsqueeze", ["transposed", "outer"], ["unsqueezed"]),  # 1, 4, 2, 3, 1
             helper.make_node("Squeeze", ["unsqueezed", "first"], ["squeezed"]),  # 4, 2, 3, 1
             helper.make_node("Flatten", ["squeezed"], ["y"], axis=2)]  # 8, 3
    expected = {"y": x.transpose(2, 0, 1).reshape(8, 3)}
    return Case(21, nodes, {"x": x}, expected, {"outer": ints([0, -1]), "first": ints([0])}, exact=True)


@case
def opset21_cast():
    x = floats([[-3.99, -1.5, 0.49, 7.75], [1e6 + 0.5, -2.5e6 - 0.25, 42.0, -0.75]])
    n = np.array([[-16777216, -3, 0, 5], [16777216, 2 ** 31 - 128, -2 ** 31, 99]], np.int32)  # exact in float32
    nodes = [helper.make_node("Cast", ["x"], ["as_int64"], to=TensorProto.INT64),
             helper.make_node("Cast", ["n"], ["as_float"], to=TensorProto.FLOAT)]
    expected = {"as_int64": np.trunc(x).astype(np.int64), "as_float": n.astype(np.float32)}
    return Case(21, nodes, {"x": x, "n": n}, expected, exact=True)


@case
def opset21_model():
    """Conv, GroupNormalization-21 (per-channel scale), Gelu, antialiased Resize to sizes with
    keep_aspect_ratio_policy "not_larger", ReduceMean over an axes input, Flatten."""
    x = random((1, 3, 8, 10), seed=38)
    weight, bias = random((6, 3, 3, 3), seed=39, scale=0.3), random((6,), seed=40)
    scale, shift = random((6,), seed=41), random((6,), seed=42)
    nodes = [helper.make_node("Conv", ["x", "weight", "bias"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GroupNormalization", ["conv", "scale", "shift"], ["norm"], num_groups=3),
             helper.make_node("Gelu", ["norm"], ["gelu"]),
             helper.make_node("Resize", ["gelu", "", "", "sizes"], ["features"], mode="linear", antialias=1,
                              axes=[2, 3], keep_aspect_ratio_policy="not_larger"),
             helper.make_node("ReduceMean", ["features", "axes"], ["mean"]),
             helper.make_node("Flatten", ["mean"], ["y"])]
    resize_scale, sizes = aspect_ratio_sizes([8, 10], [4, 4], "not_larger")  # 0.4: to 3x4
    gelu_out = gelu(group_norm(conv2d(x, weight, bias, 1), 3, scale, shift))
    features = linear_resize(gelu_out, [2, 3], [resize_scale] * 2, sizes, antialias=True)
    expected = {"features": features, "y": features.mean(axis=-1).reshape(1, -1)}
    initializers = {"weight": weight, "bias": bias, "scale": scale, "shift": shift, "sizes": ints([4, 4]),
                    "axes": ints([-1])}
    return Case(21, nodes, {"x": x}, expected, initializers)


def assert_matches(name, actual, expected, exact):
    if expected.dtype == np.float64:
        assert actual.dtype == np.float32, f"{name}: dtype {actual.dtype}"
    else:
        assert actual.dtype == expected.dtype, f"{name}: dtype {actual.dtype}, expected {expected.dtype}"
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape}, expected {expected.shape}"
    if exact or expected.dtype != np.float64:
        assert np.array_equal(actual, expected.astype(actual.dtype)), f"{name}: {actual} != {expected}"
        return
    scale = max(1.0, float(np.abs(expected).max(initial=0)))
    difference = float(np.abs(actual - expected).max(initial=0))
    assert difference <= TOLERANCE * scale, f"{name}: max |kiln - reference| = {difference:.3g} (scale {scale:.3g})"


@pytest.mark.parametrize("backends", BACKENDS)
@pytest.mark.parametrize("name", CASES)
def test_matches_numpy_reference(name, backends, kiln_bin, tmp_path):
    case = CASES[name]()
    path = case.save(tmp_path / f"{name}.onnx")
    outputs = kiln_cli.run_model(kiln_bin, path, case.inputs, tmp_path, extra_args=BACKENDS[backends])
    assert sorted(outputs) == sorted(case.expected)
    for output, expected in case.expected.items():
        assert_matches(output, outputs[output], expected, case.exact)
