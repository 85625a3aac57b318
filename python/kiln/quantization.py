"""Post-training quantization: a float ONNX model in, a QDQ model out (`quantize_static`), or one
whose MatMuls quantize their activations per run (`quantize_dynamic`).

`quantize_static` takes ONNX Runtime's parameter names and defaults (QDQ, int8 activations and
weights, MinMax calibration, asymmetric activations, symmetric weights), so a script written for
`onnxruntime.quantization` runs unchanged where kiln does. Entropy (TensorRT's KL divergence) and
Percentile calibration take ONNX Runtime's extra_options names (CalibNumBins, CalibNumQuantizedBins,
CalibPercentile, CalibTensorRangeSymmetric) with defaults of 2048 bins, 128 quantized bins and
99.999%; two things differ on purpose: Entropy's default histogram has 2048 bins, not 128 (with 128
bins and 128 quantized bins ONNX Runtime's search has one candidate, the full range), and an
asymmetric Percentile cuts both tails of the signed values (ONNX Runtime histograms |x| there too). kiln runs the calibration itself (the
model with every tensor to quantize made an output), then writes standard QuantizeLinear /
DequantizeLinear pairs that any ONNX runtime reads; kiln plans the chains they form as integer steps.

What it quantizes: Conv, MatMul and Gemm (constant weights, an Identity of an initializer included;
a Gemm's alpha and beta 1) and the tensors they read and write. A Relu, or a Clip from 0 (ReLU6),
that is such a node's only reader is dropped when activations are asymmetric: the result is quantized over the Relu's or Clip's range
(which starts at 0), so saturation does what the Relu or Clip did. A BatchNormalization after a
Conv is folded into it first. Other ops stay float32 and read the dequantized tensors.
"""
import enum
import os
import pathlib
import tempfile

import numpy as np


class QuantFormat(enum.Enum):
    QOperator = 0
    QDQ = 1


class QuantType(enum.Enum):
    QInt8 = 0
    QUInt8 = 1


class CalibrationMethod(enum.Enum):
    MinMax = 0
    Entropy = 1
    Percentile = 2
    Distribution = 3


class CalibrationDataReader:
    """Calibration batches: get_next() returns {input name: numpy array}, then None when done."""

    def get_next(self):
        raise NotImplementedError


class NpyFolderReader(CalibrationDataReader):
    """Batches from a folder: for a model with one input, each `*.npy` file (in name order) is one
    batch of it; for several inputs, each subfolder is one batch holding `<input name>.npy`."""

    def __init__(self, folder, input_names):
        folder = pathlib.Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(f"calibration data folder {folder} does not exist")
        if len(input_names) == 1:
            self._batches = [{input_names[0]: path} for path in sorted(folder.glob("*.npy"))]
        else:
            self._batches = []
            for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
                missing = [n for n in input_names if not (sub / f"{n}.npy").exists()]
                if missing:
                    raise FileNotFoundError(f"calibration batch {sub} has no {', '.join(m + '.npy' for m in missing)}")
                self._batches.append({n: sub / f"{n}.npy" for n in input_names})
        if not self._batches:
            raise ValueError(f"calibration data folder {folder} holds no batches (expected "
                             + ("*.npy files" if len(input_names) == 1 else "one subfolder per batch") + ")")
        self._next = 0

    def get_next(self):
        if self._next >= len(self._batches):
            return None
        batch = self._batches[self._next]
        self._next += 1
        return {name: np.load(path) for name, path in batch.items()}


_EXTRA_OPTIONS = {"ActivationSymmetric", "WeightSymmetric", "CalibTensorRangeSymmetric", "CalibNumBins",
                  "CalibNumQuantizedBins", "CalibPercentile"}


def _histogram(values, low, high, bins):
    """Counts of `values` in `bins` equal bins over [low, high] (the last one closed), and the edges."""
    if high <= low:
        high = low + 1.0  # one value everywhere: any bins hold it
    return np.histogram(values, bins=bins, range=(low, high))


def _percentile_range(histogram, edges, percentile, symmetric):
    """The range holding `percentile` percent of the counted values. Symmetric (`histogram` counts
    |x| over [0, max |x|]): [-t, t] with t the upper edge of the first bin where the cumulative share
    reaches percentile / 100. Otherwise (`histogram` counts x over [min, max]): from the lower edge of
    the bin where the share passes (100 - percentile) / 200 to the upper edge of the bin where it
    reaches 1 - that, so each tail loses half of the rest."""
    # Compared in whole counts (cumulative * 200 against percent * total) so that a share landing
    # exactly on the percentile is not lost to rounding.
    cumulative = np.cumsum(histogram).astype(np.float64)
    total = float(cumulative[-1])
    if symmetric:
        top = float(edges[np.searchsorted(cumulative * 100.0, percentile * total) + 1])
        return -top, top
    first = int(np.searchsorted(cumulative * 200.0, (100.0 - percentile) * total, side="right"))
    last = int(np.searchsorted(cumulative * 200.0, (100.0 + percentile) * total))
    return float(edges[min(first, len(histogram) - 1)]), float(edges[min(last, len(histogram) - 1) + 1])


def _smoothed(distribution, epsilon=1e-4):
    """`distribution` normalized with every empty bin given `epsilon` first, so that the KL divergence
    stays finite; None when it is all empty."""
    if distribution.sum() == 0:
        return None
    distribution = np.where(distribution == 0, epsilon * distribution.sum(), distribution)
    return distribution / distribution.sum()


def _entropy_range(histogram, edges, quantized_bins):
    """TensorRT's KL calibration over a histogram of x on [-t, t] with an odd or even bin count: for
    each window of bins centred on the zero bin, from `quantized_bins` wide to all of them, the
    reference is the window with the counts outside it added to its end bins, the candidate is the
    window merged into `quantized_bins` groups (the last takes the remainder), each group's count
    spread over its non-empty bins. The window whose candidate is closest to its reference (KL
    divergence) gives the range (its outer edges); ties keep the narrower window."""
    bins = len(histogram)
    zero = bins // 2
    best, best_range = np.inf, (float(edges[0]), float(edges[-1]))
    for half in range(quantized_bins // 2, zero + 1):
        start, end = zero - half, min(zero + half + 1, bins)
        window = histogram[start:end].astype(np.float64)
        reference = window.copy()
        reference[0] += histogram[:start].sum()
        reference[-1] += histogram[end:].sum()
        group = len(window) // quantized_bins
        candidate = np.zeros(len(window))
        for g in range(quantized_bins):
            first = g * group
            last = len(window) if g == quantized_bins - 1 else first + group
            filled = window[first:last] != 0
            if filled.any():
                candidate[first:last][filled] = window[first:last].sum() / filled.sum()
        p, q = _smoothed(reference), _smoothed(candidate)
        divergence = np.inf if p is None or q is None else float(np.sum(p * np.log(p / q)))
        if divergence < best:
            best, best_range = divergence, (float(edges[start]), float(edges[end]))
    return best_range


def _range(qtype, symmetric, reduce_range):
    if qtype == QuantType.QUInt8:
        return (0, 127) if reduce_range else (0, 255)
    if reduce_range:
        return (-64, 64)
    return (-127, 127) if symmetric else (-128, 127)


def _scale_zero_point(rmin, rmax, qmin, qmax, symmetric):
    """ONNX Runtime's rule: the range always holds 0 (so zero padding is exact), scale in float32."""
    rmin = np.minimum(rmin, 0).astype(np.float32)
    rmax = np.maximum(rmax, 0).astype(np.float32)
    if symmetric:
        absmax = np.maximum(np.abs(rmin), np.abs(rmax))
        rmin, rmax = -absmax, absmax
    scale = ((rmax - rmin) / np.float32(qmax - qmin)).astype(np.float32)
    degenerate = scale < np.finfo(np.float32).tiny
    scale = np.where(degenerate, np.float32(1), scale).astype(np.float32)
    zero_point = np.where(degenerate, 0, np.rint(qmin - rmin / scale))
    return scale, np.clip(zero_point, qmin, qmax)


def _quantize(values, scale, zero_point, qmin, qmax, dtype):
    return np.clip(np.rint(values / scale) + zero_point, qmin, qmax).astype(dtype)


def _np_type(qtype):
    return np.uint8 if qtype == QuantType.QUInt8 else np.int8


def _attribute(node, name, default):
    """A node's int or float attribute `name`, or `default`."""
    for attribute in node.attribute:
        if attribute.name == name:
            return attribute.f if attribute.type == attribute.FLOAT else attribute.i
    return default


def _clamps_at_zero(node, constant):
    """A Relu, or a Clip whose minimum is the constant 0 (ReLU6): quantized asymmetrically over its
    output's range, whose zero point is then the type's minimum, the result saturates where it clamps,
    so the node can be dropped. `constant(name)`: an initializer's or Constant node's value, or None."""
    if node.op_type == "Relu":
        return True
    if node.op_type != "Clip":
        return False
    if len(node.input) > 1:  # opset 11: min and max are inputs
        low = constant(node.input[1]) if node.input[1] else None
        if low is None or low.size != 1:
            return False
        if len(node.input) > 2 and node.input[2] and constant(node.input[2]) is None:
            return False
        return float(low.reshape(())) == 0
    return _attribute(node, "min", None) == 0


def _readers(graph):
    """Per value name, the nodes reading it."""
    readers = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers


def _read_initializers_directly(graph):
    """Readers of Identity(initializer) read the initializer itself, and the Identity goes: PyTorch's
    exporter writes a weight shared by identical layers once and gives every other layer an Identity
    of it, which would otherwise leave those layers' weights not constant and their products float."""
    inits = {t.name for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    source = {node.output[0]: node.input[0] for node in graph.node
              if node.op_type == "Identity" and node.input and node.input[0] in inits and node.output[0] not in outputs}
    if not source:
        return
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in source:
                node.input[i] = source[name]
    kept = [node for node in graph.node if not (node.op_type == "Identity" and node.output and node.output[0] in source)]
    del graph.node[:]
    graph.node.extend(kept)


def _fold_batch_norms(model, numpy_helper):
    """Conv -> BatchNormalization (inference, constant parameters) becomes one Conv."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    readers = _readers(graph)
    outputs = {o.name for o in graph.output}
    removed = []
    for node in graph.node:
        if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in inits:
            continue
        followers = readers.get(node.output[0], [])
        if len(followers) != 1 or followers[0].op_type != "BatchNormalization" or node.output[0] in outputs:
            continue
        bn = followers[0]
        if len(bn.output) != 1 or not all(name in inits for name in bn.input[1:5]):
            continue
        epsilon = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        gamma, beta, mean, var = (numpy_helper.to_array(inits[n]).astype(np.float64) for n in bn.input[1:5])
        factor = gamma / np.sqrt(var + epsilon)
        weights = numpy_helper.to_array(inits[node.input[1]]).astype(np.float64)
        bias = (numpy_helper.to_array(inits[node.input[2]]).astype(np.float64)
                if len(node.input) > 2 and node.input[2] else np.zeros(weights.shape[0]))
        folded_w = (weights * factor.reshape((-1,) + (1,) * (weights.ndim - 1))).astype(np.float32)
        folded_b = ((bias - mean) * factor + beta).astype(np.float32)
        w_name, b_name = node.input[1] + "_bn_folded", node.output[0] + "_bn_folded_bias"
        graph.initializer.extend([numpy_helper.from_array(folded_w, w_name), numpy_helper.from_array(folded_b, b_name)])
        del node.input[1:]
        node.input.extend([w_name, b_name])
        node.output[0] = bn.output[0]
        removed.append(bn)
    for bn in removed:
        graph.node.remove(bn)


def _histogram_ranges(session, batches, tensors, ranges, method, symmetric, num_bins, quantized_bins, percentile):
    """A second pass over the calibration batches, histograms over the first pass's ranges (|x| on
    [0, max |x|] for a symmetric Percentile, x on [min, max] for the other, x on [-max |x|, max |x|]
    for Entropy), and each tensor's range from them."""
    bounds = {}
    for name, (low, high) in ranges.items():
        magnitude = max(abs(low), abs(high))
        if method == CalibrationMethod.Entropy:
            bounds[name] = (-magnitude, magnitude)
        else:
            bounds[name] = (0.0, magnitude) if symmetric else (low, high)
    counts = {name: None for name in tensors}
    edges = {}
    for batch in batches:
        outputs = session.run(batch)
        for name in tensors:
            values = outputs[name].ravel()
            if method == CalibrationMethod.Percentile and symmetric:
                values = np.abs(values)
            histogram, edges[name] = _histogram(values, *bounds[name], num_bins)
            counts[name] = histogram if counts[name] is None else counts[name] + histogram
    chosen = {}
    for name in tensors:
        if method == CalibrationMethod.Percentile:
            low, high = _percentile_range(counts[name], edges[name], percentile, symmetric)
        else:
            low, high = _entropy_range(counts[name], edges[name], quantized_bins)
        chosen[name] = (max(low, ranges[name][0]), min(high, ranges[name][1]))
    return chosen


def quantize_static(model_input, model_output, calibration_data_reader, quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=None, per_channel=False, reduce_range=False,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, nodes_to_quantize=None,
                    nodes_to_exclude=None, use_external_data_format=False,
                    calibrate_method=CalibrationMethod.MinMax, extra_options=None):
    """Quantizes `model_input` (a path or ModelProto) and writes the QDQ model to `model_output`.
    Calibration runs kiln over every batch `calibration_data_reader.get_next()` returns until None.
    Output names are unchanged. Returns {"tensors": {name: (min, max, scale, zero point)}, "nodes":
    [the names of the nodes quantized]}."""
    import onnx
    from onnx import helper, numpy_helper

    from kiln import Session

    if quant_format != QuantFormat.QDQ:
        raise NotImplementedError(f"quant_format {quant_format}: kiln.quantization writes QDQ models only "
                                  "(kiln plans their chains as QLinearConv / QLinearMatMul / QGemm steps)")
    if calibrate_method == CalibrationMethod.Distribution:
        raise NotImplementedError("calibrate_method Distribution: kiln.quantization calibrates with MinMax, Entropy "
                                  "and Percentile")
    if use_external_data_format:
        raise NotImplementedError("use_external_data_format: kiln.quantization writes one .onnx file")
    if activation_type == QuantType.QInt8 and weight_type == QuantType.QUInt8:
        raise ValueError("int8 activations with uint8 weights are not supported (as in ONNX Runtime)")
    extra_options = dict(extra_options or {})
    unknown = sorted(set(extra_options) - _EXTRA_OPTIONS)
    if unknown:
        raise ValueError(f"unknown extra_options {unknown}; kiln.quantization takes {sorted(_EXTRA_OPTIONS)}")
    activation_symmetric = bool(extra_options.get("ActivationSymmetric", False))
    range_symmetric = bool(extra_options.get("CalibTensorRangeSymmetric", False))
    num_bins = int(extra_options.get("CalibNumBins", 2048))
    quantized_bins = int(extra_options.get("CalibNumQuantizedBins", 128))
    percentile = float(extra_options.get("CalibPercentile", 99.999))
    if not 0 < percentile <= 100:
        raise ValueError(f"CalibPercentile must be in (0, 100], got {percentile}")
    if calibrate_method == CalibrationMethod.Entropy and not 1 <= quantized_bins <= num_bins:
        raise ValueError(f"CalibNumQuantizedBins ({quantized_bins}) must be between 1 and CalibNumBins ({num_bins})")
    weight_symmetric = bool(extra_options.get("WeightSymmetric", weight_type == QuantType.QInt8))
    op_types = set(op_types_to_quantize or ["Conv", "MatMul", "Gemm"])
    unsupported = sorted(op_types - {"Conv", "MatMul", "Gemm"})
    if unsupported:
        raise NotImplementedError(f"op_types_to_quantize {unsupported}: kiln.quantization quantizes Conv, MatMul "
                                  "and Gemm")

    model = model_input if isinstance(model_input, onnx.ModelProto) else onnx.load(os.fspath(model_input))
    model = onnx.ModelProto.FromString(model.SerializeToString())  # never edits the caller's model
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 10:
        raise ValueError(f"the model's opset is {opset}; QuantizeLinear needs 10 or later")
    if per_channel and opset < 13:
        raise ValueError(f"per_channel needs opset 13 or later (DequantizeLinear's axis); the model has {opset}")
    _read_initializers_directly(model.graph)
    _fold_batch_norms(model, numpy_helper)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    readers = _readers(graph)
    graph_outputs = {o.name for o in graph.output}
    constant_nodes = {node.output[0]: node.attribute[0].t for node in graph.node
                      if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value"}

    def constant(name):
        """The value of an initializer or Constant node, or None."""
        proto = inits.get(name, constant_nodes.get(name))
        return None if proto is None else numpy_helper.to_array(proto)

    # The nodes to quantize, and the Relu each absorbs.
    chosen = []
    for node in graph.node:
        if node.op_type not in op_types or len(node.input) < 2 or node.input[1] not in inits:
            continue
        if nodes_to_quantize and node.name not in nodes_to_quantize:
            continue
        if nodes_to_exclude and node.name in nodes_to_exclude:
            continue
        weight = numpy_helper.to_array(inits[node.input[1]])
        if weight.dtype != np.float32 or (node.op_type in ("MatMul", "Gemm") and weight.ndim != 2):
            continue
        if node.op_type == "Gemm" and (_attribute(node, "alpha", 1.0) != 1 or _attribute(node, "beta", 1.0) != 1):
            continue  # its integer form adds the bias to the accumulators unscaled
        followers = readers.get(node.output[0], [])
        relu = None
        if (len(followers) == 1 and node.output[0] not in graph_outputs and not activation_symmetric
                and _clamps_at_zero(followers[0], constant)):
            relu = followers[0]
        chosen.append((node, relu))
    if not chosen:
        raise ValueError("the model has no Conv, MatMul or Gemm with constant float32 weights to quantize")

    # Calibration: the tensors to quantize made graph outputs, their min and max over every batch.
    tensors = []
    for node, relu in chosen:
        for name in (node.input[0], (relu or node).output[0]):
            if name not in tensors:
                tensors.append(name)
    augmented = onnx.ModelProto.FromString(model.SerializeToString())
    for name in tensors:
        if name not in graph_outputs:
            augmented.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    ranges = {}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "augmented.onnx")
        onnx.save(augmented, path)
        session = Session(path)
        batches = []
        while True:
            batch = calibration_data_reader.get_next()
            if batch is None:
                break
            batches.append(batch)
            outputs = session.run(batch)
            for name in tensors:
                low, high = float(np.min(outputs[name])), float(np.max(outputs[name]))
                old = ranges.get(name, (low, high))
                ranges[name] = (min(old[0], low), max(old[1], high))
        if not batches:
            raise ValueError("the calibration data reader gave no batches")
        if calibrate_method != CalibrationMethod.MinMax:
            ranges = _histogram_ranges(session, batches, tensors, ranges, calibrate_method, range_symmetric, num_bins,
                                       quantized_bins, percentile)

    a_qmin, a_qmax = _range(activation_type, activation_symmetric, False)
    w_qmin, w_qmax = _range(weight_type, weight_symmetric, reduce_range)
    a_np, w_np = _np_type(activation_type), _np_type(weight_type)
    report = {"tensors": {}, "nodes": [node.name for node, _ in chosen]}
    activation = {}
    for name in tensors:
        low, high = ranges[name]
        scale, zero_point = _scale_zero_point(np.float32(low), np.float32(high), a_qmin, a_qmax, activation_symmetric)
        activation[name] = (np.float32(scale), a_np(zero_point))
        report["tensors"][name] = (low, high, float(scale), int(zero_point))

    new_initializers, constant_nodes = [], []
    used = set()
    for node, _ in chosen:
        # Weights as int8 constants through DequantizeLinear, per tensor or per output channel (Conv:
        # axis 0) / column (MatMul: axis 1; Gemm: axis 1, or 0 when B is stored transposed).
        weight = numpy_helper.to_array(inits[node.input[1]])
        transposed = node.op_type == "Gemm" and _attribute(node, "transB", 0) != 0
        axis = 0 if node.op_type == "Conv" or transposed else 1
        if per_channel:
            other = tuple(d for d in range(weight.ndim) if d != axis)
            scale, zero_point = _scale_zero_point(weight.min(axis=other), weight.max(axis=other), w_qmin, w_qmax,
                                                  weight_symmetric)
            shape = [1] * weight.ndim
            shape[axis] = -1
            q = _quantize(weight, scale.reshape(shape), zero_point.reshape(shape), w_qmin, w_qmax, w_np)
        else:
            scale, zero_point = _scale_zero_point(np.float32(weight.min()), np.float32(weight.max()), w_qmin, w_qmax,
                                                  weight_symmetric)
            q = _quantize(weight, scale, zero_point, w_qmin, w_qmax, w_np)
        scale = np.asarray(scale, np.float32)
        base = f"{node.name}_weights" if node.name else f"{node.input[1]}_{len(constant_nodes)}"
        new_initializers += [numpy_helper.from_array(q, f"{base}_quantized"),
                             numpy_helper.from_array(scale, f"{base}_scale"),
                             numpy_helper.from_array(np.asarray(zero_point).astype(w_np), f"{base}_zero_point")]
        constant_nodes.append(helper.make_node(
            "DequantizeLinear", [f"{base}_quantized", f"{base}_scale", f"{base}_zero_point"], [f"{base}_dequantized"],
            name=f"{base}_DequantizeLinear", **({"axis": axis} if per_channel else {})))
        used.add(node.input[1])
        node.input[1] = f"{base}_dequantized"
        # A Conv's or Gemm's bias (one value per output channel) as int32 at scale x_scale * w_scale, what
        # QLinearConv and QGemm add to their accumulators.
        bias = None
        if node.op_type in ("Conv", "Gemm") and len(node.input) > 2 and node.input[2] in inits:
            bias = numpy_helper.to_array(inits[node.input[2]]).astype(np.float32)
            if bias.shape != (weight.shape[axis],):
                bias = None  # a Gemm's C of another shape stays float32
        if bias is not None:
            bias_scale = (activation[node.input[0]][0] * scale).astype(np.float32)  # per channel when w is
            q_bias = np.clip(np.rint(bias / bias_scale), -2**31, 2**31 - 1).astype(np.int32)
            bias_base = f"{node.name}_bias" if node.name else f"{node.input[2]}_{len(constant_nodes)}"
            new_initializers += [numpy_helper.from_array(q_bias, f"{bias_base}_quantized"),
                                 numpy_helper.from_array(bias_scale, f"{bias_base}_scale")]
            constant_nodes.append(helper.make_node(
                "DequantizeLinear", [f"{bias_base}_quantized", f"{bias_base}_scale"], [f"{bias_base}_dequantized"],
                name=f"{bias_base}_DequantizeLinear", **({"axis": 0} if per_channel else {})))
            used.add(node.input[2])
            node.input[2] = f"{bias_base}_dequantized"

    # Drop the absorbed Relus: the node writes the Relu's output, quantized over the Relu's range.
    for node, relu in chosen:
        if relu is not None:
            node.output[0] = relu.output[0]
            graph.node.remove(relu)

    # A QuantizeLinear -> DequantizeLinear pair on each tensor, right after the node computing it
    # (graph inputs: first); every reader reads the dequantized value. A graph output keeps its name
    # and is the dequantized value (as ONNX Runtime writes it): its producer's result is renamed, so
    # the model's last Conv, MatMul or Gemm is quantized on both sides too.
    pairs = {}  # by the name the producer writes
    produced = {name for node in graph.node for name in node.output}
    for name in tensors:
        scale, zero_point = activation[name]
        new_initializers += [numpy_helper.from_array(np.array(scale, np.float32), f"{name}_scale"),
                             numpy_helper.from_array(np.array(zero_point, a_np), f"{name}_zero_point")]
        quantized, dequantized = f"{name}_QuantizeLinear_Output", f"{name}_DequantizeLinear_Output"
        source = name
        if name in graph_outputs and name in produced:
            source, dequantized = f"{name}_QuantizeLinear_Input", name
            for node in graph.node:
                for i, value in enumerate(node.output):
                    if value == name:
                        node.output[i] = source
        for node in graph.node:
            for i, value in enumerate(node.input):
                if value == name:
                    node.input[i] = dequantized
        pairs[source] = [
            helper.make_node("QuantizeLinear", [source, f"{name}_scale", f"{name}_zero_point"], [quantized],
                             name=f"{name}_QuantizeLinear"),
            helper.make_node("DequantizeLinear", [quantized, f"{name}_scale", f"{name}_zero_point"], [dequantized],
                             name=f"{name}_DequantizeLinear")]
    ordered = list(constant_nodes)
    for name in tensors:
        if name not in produced:  # a graph input: its pair comes first
            ordered += pairs[name]
    for node in graph.node:
        ordered.append(node)
        for name in node.output:
            ordered += pairs.get(name, [])
    del graph.node[:]
    graph.node.extend(ordered)
    still_read = {name for node in graph.node for name in node.input}
    kept = [t for t in graph.initializer if t.name not in used or t.name in still_read]
    del graph.initializer[:]
    graph.initializer.extend(kept + new_initializers)
    onnx.checker.check_model(model)
    onnx.save(model, os.fspath(model_output))
    return report


def quantize_dynamic(model_input, model_output, op_types_to_quantize=None, per_channel=False, reduce_range=False,
                     weight_type=QuantType.QInt8, nodes_to_quantize=None, nodes_to_exclude=None,
                     use_external_data_format=False, extra_options=None):
    """Quantizes the weights of `model_input`'s MatMuls (a constant 2-D B) ahead of time and their
    activations per run, in the form ONNX Runtime's `quantize_dynamic` writes: DynamicQuantizeLinear
    on A (uint8, over each run's own range), MatMulInteger on the int8 B, Cast to float32 and a Mul
    by A's scale times B's. No calibration. Writes the model to `model_output`; returns {"nodes": [the
    names of the MatMuls quantized]}."""
    import onnx
    from onnx import helper, numpy_helper

    extra_options = dict(extra_options or {})
    unknown = sorted(set(extra_options) - {"WeightSymmetric"})
    if unknown:
        raise ValueError(f"unknown extra_options {unknown}; kiln.quantization.quantize_dynamic takes "
                         "['WeightSymmetric']")
    if use_external_data_format:
        raise NotImplementedError("use_external_data_format: kiln.quantization writes one .onnx file")
    op_types = set(op_types_to_quantize or ["MatMul"])
    if op_types - {"MatMul"}:
        raise NotImplementedError(f"op_types_to_quantize {sorted(op_types - {'MatMul'})}: "
                                  "kiln.quantization.quantize_dynamic quantizes MatMul")
    weight_symmetric = bool(extra_options.get("WeightSymmetric", weight_type == QuantType.QInt8))
    model = model_input if isinstance(model_input, onnx.ModelProto) else onnx.load(os.fspath(model_input))
    model = onnx.ModelProto.FromString(model.SerializeToString())  # never edits the caller's model
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 11:
        raise ValueError(f"the model's opset is {opset}; DynamicQuantizeLinear needs 11 or later")
    _read_initializers_directly(model.graph)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    w_qmin, w_qmax = _range(weight_type, weight_symmetric, reduce_range)
    w_np = _np_type(weight_type)
    quantized_inputs = {}  # A -> (A_q, A_scale, A_zero_point): one DynamicQuantizeLinear per value
    nodes, new_initializers, names = [], [], []
    for node in graph.node:
        weight = numpy_helper.to_array(inits[node.input[1]]) if (
            node.op_type == "MatMul" and len(node.input) == 2 and node.input[1] in inits) else None
        skip = (weight is None or weight.dtype != np.float32 or weight.ndim != 2
                or (nodes_to_quantize and node.name not in nodes_to_quantize)
                or (nodes_to_exclude and node.name in nodes_to_exclude))
        if skip:
            nodes.append(node)
            continue
        a = node.input[0]
        if a not in quantized_inputs:
            quantized_inputs[a] = (f"{a}_quantized", f"{a}_scale", f"{a}_zero_point")
            nodes.append(helper.make_node("DynamicQuantizeLinear", [a], list(quantized_inputs[a]),
                                          name=f"{a}_DynamicQuantizeLinear"))
        a_q, a_scale, a_zero_point = quantized_inputs[a]
        if per_channel:
            scale, zero_point = _scale_zero_point(weight.min(axis=0), weight.max(axis=0), w_qmin, w_qmax,
                                                  weight_symmetric)
        else:
            scale, zero_point = _scale_zero_point(np.float32(weight.min()), np.float32(weight.max()), w_qmin,
                                                  w_qmax, weight_symmetric)
        base = node.name or node.output[0]
        new_initializers += [
            numpy_helper.from_array(_quantize(weight, scale, zero_point, w_qmin, w_qmax, w_np), f"{base}_B_quantized"),
            numpy_helper.from_array(np.asarray(scale, np.float32), f"{base}_B_scale"),
            numpy_helper.from_array(np.asarray(zero_point).astype(w_np), f"{base}_B_zero_point")]
        nodes += [
            helper.make_node("MatMulInteger", [a_q, f"{base}_B_quantized", a_zero_point, f"{base}_B_zero_point"],
                             [f"{base}_int32"], name=f"{base}_MatMulInteger"),
            helper.make_node("Cast", [f"{base}_int32"], [f"{base}_float"], to=onnx.TensorProto.FLOAT,
                             name=f"{base}_Cast"),
            helper.make_node("Mul", [a_scale, f"{base}_B_scale"], [f"{base}_scale"], name=f"{base}_scale_Mul"),
            helper.make_node("Mul", [f"{base}_float", f"{base}_scale"], [node.output[0]], name=f"{base}_Mul")]
        names.append(node.name)
    if not names:
        raise ValueError("the model has no MatMul with a constant float32 2-D B to quantize")
    del graph.node[:]
    graph.node.extend(nodes)
    still_read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    kept = [t for t in graph.initializer if t.name in still_read]
    del graph.initializer[:]
    graph.initializer.extend(kept + new_initializers)
    onnx.checker.check_model(model)
    onnx.save(model, os.fspath(model_output))
    return {"nodes": names}


def _parse_extra_options(entries):
    """["CalibPercentile=99.9", ...] -> {"CalibPercentile": 99.9}: numbers as numbers."""
    options = {}
    for entry in entries:
        key, equals, value = entry.partition("=")
        if not equals or not key:
            raise ValueError(f"--extra-option {entry!r}: expected KEY=VALUE")
        try:
            options[key] = int(value)
        except ValueError:
            try:
                options[key] = float(value)
            except ValueError:
                raise ValueError(f"--extra-option {entry!r}: the value must be a number") from None
    return options


def main(argv=None):
    """`kiln quantize MODEL OUTPUT --calibration-data DIR [options]`: quantize_static from the command
    line, calibration batches from a folder of .npy files (NpyFolderReader). Returns the exit code."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="kiln quantize",
        description="Writes a QDQ int8 model of MODEL to OUTPUT (ONNX Runtime's quantize_static defaults: "
                    "int8 activations and weights, MinMax calibration), calibrated on the batches in a folder "
                    "of .npy files (one file per batch for a one-input model, else one subfolder per batch "
                    "holding <input name>.npy).")
    parser.add_argument("model")
    parser.add_argument("output")
    parser.add_argument("--calibration-data", required=True, metavar="DIR")
    parser.add_argument("--per-channel", action="store_true", help="one scale per output channel / column")
    parser.add_argument("--reduce-range", action="store_true", help="7-bit weights")
    parser.add_argument("--activation-type", choices=[t.name for t in QuantType], default="QInt8")
    parser.add_argument("--weight-type", choices=[t.name for t in QuantType], default="QInt8")
    parser.add_argument("--calibrate-method", choices=["MinMax", "Entropy", "Percentile"], default="MinMax",
                        help="how each activation's range is chosen (Entropy and Percentile: --extra-option "
                             "CalibNumBins=N, CalibNumQuantizedBins=N, CalibPercentile=P, "
                             "CalibTensorRangeSymmetric=1)")
    parser.add_argument("--extra-option", action="append", default=[], metavar="KEY=VALUE",
                        help="one of quantize_static's extra_options (repeatable)")
    args = parser.parse_args(argv)
    import onnx
    try:
        model = onnx.load(args.model)
    except Exception as error:  # the onnx package raises protobuf's DecodeError for malformed files
        print(f"kiln quantize: error: cannot read {args.model} as an ONNX model: {error}", file=sys.stderr)
        return 1
    try:
        inputs = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
        report = quantize_static(model, args.output, NpyFolderReader(args.calibration_data, inputs),
                                 per_channel=args.per_channel, reduce_range=args.reduce_range,
                                 activation_type=QuantType[args.activation_type],
                                 weight_type=QuantType[args.weight_type],
                                 calibrate_method=CalibrationMethod[args.calibrate_method],
                                 extra_options=_parse_extra_options(args.extra_option))
    except (OSError, ValueError, NotImplementedError) as error:
        print(f"kiln quantize: error: {error}", file=sys.stderr)
        return 1
    print(f"{args.output}: {len(report['nodes'])} nodes quantized, {len(report['tensors'])} activations "
          "calibrated")
    return 0
