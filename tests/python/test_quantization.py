"""kiln.quantization.quantize_static: a float model in, a QDQ model out that kiln plans as integer
steps (QLinearConv, QLinearMatMul, QGemm), close to the float model, with ONNX Runtime's API and
refusals."""
import pathlib

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")


class SmallNet(torch.nn.Module):
    """Conv+BN+Relu, a grouped strided Conv+Relu, a pointwise Conv without Relu, a MatMul (Linear
    over a 3-D tensor), then a Gemm (Linear over the positions' mean)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2)
        self.conv3 = torch.nn.Conv2d(8, 16, 1)
        self.fc = torch.nn.Linear(16, 5)
        self.head = torch.nn.Linear(5, 3)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        x = self.conv3(x)
        return self.head(self.fc(x.flatten(2).transpose(1, 2)).mean(1))


@pytest.fixture(scope="module")
def float_model(tmp_path_factory):
    torch.manual_seed(0)
    net = SmallNet()
    with torch.no_grad():
        net.bn1.running_mean.uniform_(-0.2, 0.2)
        net.bn1.running_var.uniform_(0.5, 2.0)
    net.eval()
    path = tmp_path_factory.mktemp("quantization") / "small.onnx"
    torch.onnx.export(net, torch.randn(1, 3, 16, 16), str(path), opset_version=13, input_names=["x"],
                      output_names=["y"])
    return path


class Reader:
    def __init__(self, count, seed):
        rng = np.random.default_rng(seed)
        self.batches = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(count)]

    def get_next(self):
        return self.batches.pop(0) if self.batches else None


def sqnr_db(reference, value):
    noise = np.sum((reference.astype(np.float64) - value) ** 2)
    return 10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / max(noise, 1e-30))


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("activation_type", ["QInt8", "QUInt8"])
def test_quantized_model_runs_integer_steps_close_to_float(kiln_module, float_model, tmp_path, per_channel,
                                                           activation_type):
    q = kiln_module.quantization
    out = tmp_path / "small.qdq.onnx"
    report = q.quantize_static(float_model, out, Reader(8, 1), per_channel=per_channel,
                               activation_type=q.QuantType[activation_type])
    assert len(report["nodes"]) == 5  # three Conv, the MatMul and the Gemm

    model = onnx.load(str(out))
    ops = [node.op_type for node in model.graph.node]
    assert "Relu" not in ops and "BatchNormalization" not in ops  # absorbed and folded
    # x, the three Conv results, the MatMul's input (conv3's result reshaped) and result, the Gemm's
    # input (their mean) and result
    assert ops.count("QuantizeLinear") == 8
    assert [o.name for o in model.graph.output] == ["y"]
    zero_points = [t for t in model.graph.initializer if t.name.endswith("_zero_point")]
    want = onnx.TensorProto.UINT8 if activation_type == "QUInt8" else onnx.TensorProto.INT8
    assert any(t.data_type == want for t in zero_points)

    x = Reader(1, 99).get_next()  # held out
    session = kiln_module.Session(out)
    steps = session.explain(x)
    integer = [s for s in steps if s["op"] in ("QLinearConv", "QLinearMatMul", "QGemm")]
    assert sorted(s["op"] for s in integer) == ["QGemm"] + ["QLinearConv"] * 3 + ["QLinearMatMul"]
    for step in integer:
        assert any(note.startswith("quantized: ") for note in step["notes"]), step["notes"]
    assert not any(s["op"] in ("Conv", "MatMul", "Gemm") for s in steps)

    quantized = session.run(x)["y"]
    reference = kiln_module.Session(float_model).run(x)["y"]
    assert quantized.shape == reference.shape
    assert sqnr_db(reference, quantized) > 25


def test_bad_options_are_named(kiln_module, float_model, tmp_path):
    q = kiln_module.quantization
    out = tmp_path / "never.onnx"
    with pytest.raises(NotImplementedError, match="writes QDQ models only"):
        q.quantize_static(float_model, out, Reader(1, 1), quant_format=q.QuantFormat.QOperator)
    with pytest.raises(NotImplementedError, match="calibrate_method Distribution"):
        q.quantize_static(float_model, out, Reader(1, 1), calibrate_method=q.CalibrationMethod.Distribution)
    with pytest.raises(ValueError, match="unknown extra_options \\['Bogus'\\]"):
        q.quantize_static(float_model, out, Reader(1, 1), extra_options={"Bogus": 1})
    with pytest.raises(ValueError, match="int8 activations with uint8 weights"):
        q.quantize_static(float_model, out, Reader(1, 1), weight_type=q.QuantType.QUInt8)
    with pytest.raises(ValueError, match="gave no batches"):
        q.quantize_static(float_model, out, Reader(0, 1))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        q.NpyFolderReader(tmp_path / "missing", ["x"])
    assert not out.exists()


def test_npy_folder_reader(kiln_module, float_model, tmp_path):
    q = kiln_module.quantization
    folder = tmp_path / "calibration"
    folder.mkdir()
    for i, batch in enumerate(Reader(3, 5).batches):
        np.save(folder / f"{i}.npy", batch["x"])
    out = tmp_path / "folder.qdq.onnx"
    q.quantize_static(float_model, out, q.NpyFolderReader(folder, ["x"]))
    assert out.exists()


# ---- Exactness on quantized CNNs: every QLinearConv and QGemm step against a numpy integer reference ----

def _capture_quantized(model_path, out_path):
    """The QDQ model with every QuantizeLinear output also a graph output, "q<i>" (Identity copies:
    file-safe names); returns {q name: QuantizeLinear output name}."""
    model = onnx.load(str(model_path))
    types = {t.name: t.data_type for t in model.graph.initializer}
    captured = {}
    for node in list(model.graph.node):
        if node.op_type == "QuantizeLinear":
            name = f"q{len(captured)}"
            dtype = types.get(node.input[2], onnx.TensorProto.UINT8) if len(node.input) > 2 else onnx.TensorProto.UINT8
            model.graph.node.append(onnx.helper.make_node("Identity", [node.output[0]], [name]))
            model.graph.output.append(onnx.helper.make_tensor_value_info(name, dtype, None))
            captured[name] = node.output[0]
    onnx.save(model, str(out_path))
    return captured


def _reference_qlinear_conv(xq, x, w, y, bias, conv):
    """QLinearConv by plain numpy: int64 sums of (x - x_zp)(w - w_zp) over each window, wrapped to
    int32, then in float32 (as kiln, ONNX Runtime and oneDNN requantize) plus the bias, times
    x_scale * w_scale / y_scale, plus y's zero point, rounded half to even and saturated."""
    (x_scale, x_zp), (wq, w_scale, w_zp), (y_scale, y_zp, y_dtype) = x, w, y
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in conv.attribute}
    strides, dilations = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pads, group = attrs.get("pads", [0, 0, 0, 0]), attrs.get("group", 1)
    values = np.pad(xq.astype(np.int64) - int(x_zp), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    m, cg, kh, kw = wq.shape
    weights = wq.astype(np.int64) - np.asarray(w_zp, np.int64).reshape(-1, 1, 1, 1)
    oh = (values.shape[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (values.shape[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    acc = np.zeros((xq.shape[0], m, oh, ow), np.int64)
    mg = m // group
    for g in range(group):
        part = values[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dilations[0], i * dilations[0] + strides[0] * (oh - 1) + 1, strides[0])
                cols = slice(j * dilations[1], j * dilations[1] + strides[1] * (ow - 1) + 1, strides[1])
                acc[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", part[:, :, rows, cols],
                                                         weights[g * mg:(g + 1) * mg, :, i, j])
    acc = acc.astype(np.int32).astype(np.float32)
    if bias is not None:
        acc = acc + bias.astype(np.float32).reshape(1, -1, 1, 1)
    multiplier = (np.float32(x_scale) * np.asarray(w_scale, np.float32)) / np.float32(y_scale)
    y = np.rint(acc * multiplier.reshape(1, -1, 1, 1) + np.float32(y_zp))
    info = np.iinfo(y_dtype)
    return np.clip(y, info.min, info.max).astype(y_dtype)


def _reference_qgemm(xq, x, w, y, bias, gemm):
    """QGemm (alpha 1) by plain numpy: int64 sums of (x - x_zp)(B' - b_zp), wrapped to int32, then
    requantized as _reference_qlinear_conv does."""
    (x_scale, x_zp), (wq, w_scale, w_zp), (y_scale, y_zp, y_dtype) = x, w, y
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in gemm.attribute}
    a = xq.astype(np.int64) - int(x_zp)
    a = a.T if attrs.get("transA", 0) else a
    b = wq.astype(np.int64)
    b = b.T if attrs.get("transB", 0) else b
    acc = (a @ (b - np.asarray(w_zp, np.int64).reshape(1, -1))).astype(np.int32).astype(np.float32)
    if bias is not None:
        acc = acc + bias.astype(np.float32).reshape(1, -1)
    multiplier = (np.float32(x_scale) * np.asarray(w_scale, np.float32)) / np.float32(y_scale)
    result = np.rint(acc * multiplier.reshape(1, -1) + np.float32(y_zp))
    info = np.iinfo(y_dtype)
    return np.clip(result, info.min, info.max).astype(y_dtype)


def _check_exact(kiln_bin, model_name, model_cache, tmp_path, isa_tiers, per_channel):
    """Every QLinearConv and QGemm step's output, given its own input as kiln computed it, equals the
    numpy reference's, whichever kernel (native's int16 dot products, oneDNN's VNNI) runs it."""
    import json
    import os
    import subprocess
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    import export_models
    from onnx import numpy_helper

    import kiln
    path = export_models.cached_export(model_name, model_cache)
    shape = export_models.input_shape(model_name)
    rng = np.random.default_rng(7)
    reader = [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]
    qdq = tmp_path / f"{model_name}.qdq.onnx"
    kiln.quantization.quantize_static(path, qdq, type("R", (), {"get_next": lambda self: reader.pop(0) if reader else None})(),
                                      per_channel=per_channel)
    captured = _capture_quantized(qdq, tmp_path / "captured.onnx")
    by_output = {v: k for k, v in captured.items()}
    model = onnx.load(str(qdq))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    readers = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    x_file = tmp_path / "x.npy"
    np.save(x_file, rng.standard_normal(shape).astype(np.float32))  # held out
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    gemms = [n for n in model.graph.node if n.op_type == "Gemm"]
    assert convs
    for tier in isa_tiers:
        out = tmp_path / f"out_{tier or 'best'}"
        env = dict(os.environ, **({"KILN_ISA": tier} if tier else {}))
        subprocess.run([str(kiln_bin), "run", str(tmp_path / "captured.onnx"), "--input", f"input={x_file}",
                        "--output-dir", str(out)], check=True, env=env, capture_output=True)
        plan = json.loads(subprocess.run([str(kiln_bin), "explain", str(tmp_path / "captured.onnx"), "--json"],
                                         check=True, env=env, capture_output=True, text=True).stdout)
        kernels = {step["node"]: step["kernel"] for step in plan["steps"] if step["op"] in ("QLinearConv", "QGemm")}
        assert len(kernels) == len(convs) + len(gemms), f"{model_name}: not every Conv and Gemm is an integer step"

        def q_value(name):
            return np.load(out / f"{by_output[name]}.npy")

        for node in convs + gemms:
            dq_x, dq_w = producer[node.input[0]], producer[node.input[1]]
            q_y = readers[node.output[0]][0]
            assert q_y.op_type == "QuantizeLinear"
            bias = inits[producer[node.input[2]].input[0]] if len(node.input) > 2 and node.input[2] else None
            y_zp = inits[q_y.input[2]]
            reference = _reference_qlinear_conv if node.op_type == "Conv" else _reference_qgemm
            want = reference(
                q_value(dq_x.input[0]), (inits[dq_x.input[1]], inits[dq_x.input[2]]),
                (inits[dq_w.input[0]], inits[dq_w.input[1]], inits[dq_w.input[2]]),
                (inits[q_y.input[1]], y_zp, y_zp.dtype.type), bias, node)
            got = q_value(q_y.output[0])
            where = f"{model_name} {node.name} ({kernels[node.name]}, KILN_ISA={tier})"
            np.testing.assert_array_equal(got, want, err_msg=where)


def test_resnet18_integer_steps_equal_the_reference_on_every_isa_tier(kiln_bin, kiln_module, model_cache, tmp_path):
    # The CPU's best tier (oneDNN's VNNI kernels where it has them), then native's int16 kernels at each
    # tier below (a tier above the CPU's runs as its best).
    _check_exact(kiln_bin, "resnet18", model_cache, tmp_path, ["", "avx512", "avx2", "baseline"], per_channel=True)


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["resnet50", "mobilenet_v2"])
def test_cnn_integer_steps_equal_the_reference(kiln_bin, kiln_module, model_cache, tmp_path, model_name):
    _check_exact(kiln_bin, model_name, model_cache, tmp_path, ["", "avx512", "avx2"], per_channel=True)


# ---- Where the error comes from: kiln compare, kiln run --dump-intermediates ----------------------------

def test_compare_names_the_values_that_lose_most(kiln_bin, kiln_module, float_model, tmp_path):
    import json
    import subprocess
    qdq = tmp_path / "small.qdq.onnx"
    kiln_module.quantization.quantize_static(float_model, qdq, Reader(4, 1))
    x = Reader(1, 2).get_next()
    rows = kiln_module.compare(float_model, qdq, x)
    assert rows and all(a["sqnr_db"] <= b["sqnr_db"] for a, b in zip(rows, rows[1:]))  # worst first
    quantized = [r for r in rows if r["b_name"].endswith("_DequantizeLinear_Output")]
    assert quantized, "the QDQ model's dequantized values match the float model's"
    assert any(r["output"] and r["name"] == "y" for r in rows)
    assert all(r["sqnr_db"] < 80 for r in quantized)  # quantization changes them
    # The CLI prints the same comparisons.
    np.save(tmp_path / "x.npy", x["x"])
    printed = json.loads(subprocess.run([str(kiln_bin), "compare", str(float_model), str(qdq), "--input",
                                         f"x={tmp_path / 'x.npy'}", "--json"], check=True, capture_output=True,
                                        text=True).stdout)
    assert [v["name"] for v in printed["values"]] == [r["name"] for r in rows]
    # One model under the same settings twice: every value equal.
    same = kiln_module.compare(float_model, None, x, {"threads": 1}, {"threads": 1})
    assert same and all(r["sqnr_db"] == float("inf") and r["max_abs_error"] == 0 for r in same)


def test_dump_intermediates_writes_every_computed_tensor(kiln_bin, float_model, tmp_path):
    import subprocess
    dump, outputs = tmp_path / "dump", tmp_path / "outputs"
    subprocess.run([str(kiln_bin), "run", str(float_model), "--dump-intermediates", str(dump), "--output-dir",
                    str(outputs)], check=True, capture_output=True)
    model = onnx.load(str(float_model))
    computed = [o for node in model.graph.node for o in node.output if o]
    written = {p.name for p in dump.glob("*.npy")}
    safe = {name.replace("/", "_") + ".npy" for name in computed}
    assert written and written <= safe and len(written) >= len(safe) - 2  # all but non-tensor values
    np.testing.assert_array_equal(np.load(dump / "y.npy"), np.load(outputs / "y.npy"))


def test_contrib_quantized_ops_run_or_are_refused_naming_the_domain(kiln_module, tmp_path):
    from onnx import TensorProto, helper

    def contrib_model(op_type, inputs):
        node = helper.make_node(op_type, inputs, ["y"], domain="com.microsoft")
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [2])],
                                  [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                                  [helper.make_tensor("s", TensorProto.FLOAT, [], [0.1]),
                                   helper.make_tensor("z", TensorProto.UINT8, [], [0])])
        path = tmp_path / f"{op_type}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                          helper.make_opsetid("com.microsoft", 1)]), str(path))
        return path

    # QLinearAdd runs: a + a at scale 0.1, saturating at 255.
    added = kiln_module.Session(contrib_model("QLinearAdd", ["a", "s", "z", "a", "s", "z", "s", "z"]))
    np.testing.assert_array_equal(added.run({"a": np.array([10, 200], np.uint8)})["y"], [20, 255])
    refused = contrib_model("QLinearConcat", ["s", "z", "a", "s", "z", "a", "s", "z"])
    with pytest.raises(NotImplementedError, match="QLinearConcat' in domain 'com.microsoft'.*QDQ format"):
        kiln_module.Session(refused).run({"a": np.zeros(2, np.uint8)})


def test_kiln_quantize_command(kiln_bin, float_model, tmp_path):
    import subprocess
    folder = tmp_path / "calibration"
    folder.mkdir()
    for i, batch in enumerate(Reader(2, 3).batches):
        np.save(folder / f"{i}.npy", batch["x"])
    out = tmp_path / "cli.qdq.onnx"
    done = subprocess.run([str(kiln_bin), "quantize", str(float_model), str(out), "--calibration-data", str(folder),
                           "--per-channel"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "5 nodes quantized" in done.stdout and out.exists()
    missing = subprocess.run([str(kiln_bin), "quantize", str(float_model), str(out), "--calibration-data",
                              str(tmp_path / "none")], capture_output=True, text=True)
    assert missing.returncode == 1 and "calibration data folder" in missing.stderr
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    bad = subprocess.run([str(kiln_bin), "quantize", str(garbage), str(out), "--calibration-data", str(folder)],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "cannot read" in bad.stderr


def test_percentile_range_computed_by_hand(kiln_module):
    q = kiln_module.quantization
    # 0.5, 1.5, ..., 999.5 in 1000 bins of width 1 over [0, 1000]: bin k holds k + 0.5, so the
    # cumulative share first reaches 0.99 in bin 989, whose upper edge is 990.
    values = np.arange(1000, dtype=np.float32) + np.float32(0.5)
    histogram, edges = q._histogram(values, 0.0, 1000.0, 1000)
    assert q._percentile_range(histogram, edges, 99.0, symmetric=True) == (-990.0, 990.0)
    # Signed, -500..499 over [-500, 500] (bin k holds k - 500): each tail loses 0.5%, 5 of the 1000
    # values: the low end is the lower edge of the bin holding the 6th value (-495), the high end the
    # upper edge of the bin holding the 995th (495).
    signed = np.arange(-500, 500, dtype=np.float32)
    histogram, edges = q._histogram(signed, -500.0, 500.0, 1000)
    assert q._percentile_range(histogram, edges, 99.0, symmetric=False) == (-495.0, 495.0)


def test_entropy_range_computed_by_hand(kiln_module):
    q = kiln_module.quantization
    # Uniform over [-1, 1] in 256 bins: any narrower window folds its outside into its end bins, which
    # its 16 merged groups smear out; the full window equals its candidate: the range is [-1, 1].
    uniform = np.linspace(-1, 1, 256 * 40, dtype=np.float32)
    histogram, edges = q._histogram(uniform, -1.0, 1.0, 256)
    assert q._entropy_range(histogram, edges, 16) == (-1.0, 1.0)
    # Four bins over [-2, 2] (edges -2, -1, 0, 1, 2) holding 2, 4, 2, 0 values, two quantized bins:
    # - window of bins 1..3: reference [4 + 2, 2, 0], candidate [4 | 2, 0] = [4, 2, 0], so
    #   p = [3/4, 1/4, 0], q = [2/3, 1/3, 0]: KL = 3/4 ln(9/8) + 1/4 ln(3/4) = 0.0164;
    # - all four bins: reference [2, 4, 2, 0], candidate [3, 3 | 2, 0]: p = [1/4, 1/2, 1/4, 0],
    #   q = [3/8, 3/8, 1/4, 0]: KL = 1/4 ln(2/3) + 1/2 ln(4/3) = 0.0425.
    # The first wins (the empty bins add the same epsilon to p and q): the range is [-1, 2].
    small = np.array([-1.5, -1.5, -0.5, -0.5, -0.5, -0.5, 0.5, 0.5], dtype=np.float32)
    histogram, edges = q._histogram(small, -2.0, 2.0, 4)
    assert list(histogram) == [2, 4, 2, 0]
    assert q._entropy_range(histogram, edges, 2) == (-1.0, 2.0)


def test_entropy_and_percentile_calibration_quantize_the_model(kiln_module, float_model, tmp_path):
    q = kiln_module.quantization
    minmax = q.quantize_static(float_model, tmp_path / "minmax.onnx", Reader(4, 3))
    for method, options in ((q.CalibrationMethod.Entropy, {}), (q.CalibrationMethod.Percentile,
                                                                {"CalibPercentile": 99.0})):
        report = q.quantize_static(float_model, tmp_path / f"{method.name}.onnx", Reader(4, 3),
                                   calibrate_method=method, extra_options=options)
        assert report["nodes"] == minmax["nodes"]
        for name, (low, high, _, _) in report["tensors"].items():
            full_low, full_high = minmax["tensors"][name][:2]
            # Within the observed range, never wider.
            assert full_low <= low <= high <= full_high, (method, name)
        narrowed = [name for name, t in report["tensors"].items() if t[1] < minmax["tensors"][name][1]]
        assert narrowed, f"{method.name} clipped no tensor's range"
        session = kiln_module.Session(str(tmp_path / f"{method.name}.onnx"))
        x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)
        assert np.isfinite(session.run({"x": x})["y"]).all()
    with pytest.raises(ValueError, match="CalibPercentile must be in"):
        q.quantize_static(float_model, tmp_path / "never.onnx", Reader(1, 1),
                          calibrate_method=q.CalibrationMethod.Percentile, extra_options={"CalibPercentile": 0})


def test_quantized_engine_chooses_who_runs_int8_and_gives_the_same_bits(kiln_module, float_model, tmp_path):
    backends = kiln_module.backends
    out = tmp_path / "engine.qdq.onnx"
    kiln_module.quantization.quantize_static(float_model, out, Reader(4, 1))
    x = Reader(1, 7).get_next()
    supported = backends.quantized.supported_engines
    assert supported[-1] == "native"
    # oneDNN's int8 kernels only where they are exact (VNNI: the avx512_bf16 tier and above).
    vnni = backends.cpu.isa() in ("avx512_bf16", "amx") and backends.onednn.is_built()
    assert ("onednn" in supported) == vnni
    assert backends.quantized.engine == supported[0]
    outputs = {}
    try:
        for engine in supported:
            backends.quantized.engine = engine
            assert backends.quantized.engine == engine
            session = kiln_module.Session(out)
            convs = [s for s in session.explain(x) if s["op"] == "QLinearConv"]
            assert convs and all(s["backend"] == engine for s in convs), [s["backend"] for s in convs]
            outputs[engine] = session.run(x)["y"]
        with pytest.raises(RuntimeError, match="not supported here"):
            backends.quantized.engine = "fbgemm"
    finally:
        backends.quantized.engine = "default"
    assert backends.preferred("quantized") == []
    for engine, y in outputs.items():
        np.testing.assert_array_equal(y, outputs["native"], err_msg=engine)


def test_quantize_dynamic_writes_onnx_runtimes_form_close_to_float(kiln_module, float_model, tmp_path):
    q = kiln_module.quantization
    out = tmp_path / "dynamic.onnx"
    report = q.quantize_dynamic(float_model, out)
    assert len(report["nodes"]) == 1  # the MatMul; Gemm and Conv stay float32
    ops = [node.op_type for node in onnx.load(str(out)).graph.node]
    assert ops.count("DynamicQuantizeLinear") == 1 and ops.count("MatMulInteger") == 1 and "MatMul" not in ops
    x = Reader(1, 99).get_next()
    session = kiln_module.Session(out)
    steps = session.explain(x)
    product = [s for s in steps if s["op"] == "MatMulInteger"]
    assert len(product) == 1
    vnni = kiln_module.backends.cpu.isa() in ("avx512_bf16", "amx") and kiln_module.backends.onednn.is_built()
    assert product[0]["backend"] == ("onednn" if vnni else "native")
    reference = kiln_module.Session(float_model).run(x)["y"]
    assert sqnr_db(reference, session.run(x)["y"]) > 30
    with pytest.raises(NotImplementedError, match="quantizes MatMul"):
        q.quantize_dynamic(float_model, tmp_path / "never.onnx", op_types_to_quantize=["Conv"])
    with pytest.raises(ValueError, match="unknown extra_options"):
        q.quantize_dynamic(float_model, tmp_path / "never.onnx", extra_options={"Bogus": 1})
