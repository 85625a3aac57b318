"""RoiAlign, MaxRoiPool and GridSample: one-node models built with onnx.helper, run by `kiln run`, against
ONNX's own test cases, numpy ports of ONNX Runtime's kernels, and torch/torchvision.

- RoiAlign (opsets 10 and 16): ONNX's two test cases (their outputs came from ONNX Runtime); a numpy port
  of ONNX Runtime's CPU kernel (roialign.cc: the per-roi bilinear pre-calculation, avg and its max mode)
  over both modes, both coordinate_transformation_modes, sampling_ratio 0 (adaptive) and 2, spatial_scale
  1 and 0.5 and outputs 3x4 and 1x1, with rois reaching past the map, one smaller than a pixel and one
  inverted; for avg also torchvision.ops.roi_align (aligned=True is half_pixel, aligned=False is
  output_half_pixel, which opset 10 always uses). Also float64 (exactly as ONNX Runtime), float16
  (computed in float32) and no rois at all.
- MaxRoiPool (opset 13): torchvision.ops.roi_pool (Caffe semantics, as ONNX Runtime's roi_pool.cc) and a
  numpy port, exactly, on mostly negative values (a bin's maximum is not clipped at 0) with a roi wholly
  outside the map (every bin empty: 0); float32 and float64.
- GridSample: torch.nn.functional.grid_sample for every mode, padding mode and align_corners at opset 16
  (bilinear/bicubic) and 20 (linear/cubic), with grid points well outside [-1, 1] (reflection more than
  once over); the defaults; float64; a one-pixel-high X under a grid larger than X; ONNX's own test cases.
- Refused models (bad attributes, inconsistent shapes, out-of-range batch indices, a NaN roi, opset 20's
  names at opset 16 and back, 5-D GridSample) fail cleanly, with a message naming what was wrong.

Outputs must have the reference's dtype and shape, and be within an absolute tolerance of the output's
scale, max(1, max |expected|): 1e-5 for float32, 1e-12 for float64, 2e-2 for float16, 1e-3 against ONNX's
test outputs (ONNX's rtol), and MaxRoiPool exactly. Every case runs with the default backends and with the
native reference alone. onnx 1.12 knows opsets up to 17, so the models are written without onnx.checker.
"""
import dataclasses
import functools
import math
import pathlib

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
import torchvision
from onnx import TensorProto, helper, numpy_helper

import kiln_cli

# The default backends (Winograd, oneDNN and BLAS first, as users run kiln) and the native reference alone.
BACKENDS = {"default": (), "native": ("--disable", "onednn", "--disable", "blas", "--disable", "winograd")}

# ONNX's node test cases: Debian's libonnx-testdata, else the onnx package's copy.
ONNX_TEST_DATA = [pathlib.Path("/usr/share/libonnx-testdata/data/node"),
                  pathlib.Path(onnx.__file__).parent / "backend/test/data/node"]

NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.int64): TensorProto.INT64}

# Absolute, of the output's scale max(1, max |expected|), by the output's dtype unless a case sets its own.
TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12, np.dtype(np.float16): 2e-2}
ONNX_TOLERANCE = 1e-3  # ONNX's own test tolerance: rtol 1e-3 (atol 1e-7)

# The IR version the ONNX release that introduced each opset writes.
IR_VERSIONS = {1: 7, 10: 7, 13: 7, 16: 8, 20: 9}


def save_model(path, node, opset, inputs, output_dtype, output_rank):
    """A model of the one `node` at `opset`, its graph inputs typed from `inputs` {name: array} and its output
    of `output_dtype` and rank with unknown dimensions."""
    graph_inputs = [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], a.shape) for n, a in inputs.items()]
    output = helper.make_tensor_value_info(node.output[0], NP_TO_ONNX[np.dtype(output_dtype)], [None] * output_rank)
    graph = helper.make_graph([node], path.stem, graph_inputs, [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSIONS[opset],
                              producer_name="kiln-tests")
    onnx.save(model, str(path))
    return path


@dataclasses.dataclass
class Case:
    """One node at `opset` on `inputs`; its output is compared with each of `references` {label: array}.
    `tolerance` None: TOLERANCE of the output's dtype."""
    opset: int
    node: onnx.NodeProto
    inputs: dict
    references: dict
    tolerance: float | None = None


@dataclasses.dataclass
class Refused:
    """One node at `opset` on `inputs` that kiln must refuse, with a message holding each of `mentions`."""
    opset: int
    node: onnx.NodeProto
    inputs: dict
    mentions: list
    output_rank: int = 4


CASES = {}
REFUSED = {}


def register(table, name, build, *args, **kwargs):
    """Registers `build(*args, **kwargs)` (a Case or a Refused) under `name`, the test id; built on first use,
    once for both backends."""
    assert name not in table, name
    table[name] = functools.cache(functools.partial(build, *args, **kwargs))


def refused(build):
    """Registers a function returning a Refused; its name is the test id."""
    register(REFUSED, build.__name__, build)
    return build


def rng(seed):
    return np.random.default_rng(seed)


# ---- references ----

def roi_align_reference(x, rois, batch_indices, output_height, output_width, sampling_ratio, spatial_scale,
                        mode, half_pixel):
    """ONNX Runtime's RoiAlignForward (roialign.cc), computed in x's dtype (float16 in float32)."""
    dtype = np.float32 if x.dtype == np.float16 else x.dtype.type
    T = dtype
    xs = x.astype(dtype)
    n_rois = rois.shape[0]
    _, channels, height, width = x.shape
    y = np.zeros((n_rois, channels, output_height, output_width), dtype=dtype)
    for n in range(n_rois):
        roi = rois[n].astype(dtype)
        offset = T(0.5) if half_pixel else T(0)
        scale = T(spatial_scale)
        start_w, start_h = roi[0] * scale - offset, roi[1] * scale - offset
        end_w, end_h = roi[2] * scale - offset, roi[3] * scale - offset
        roi_w, roi_h = T(end_w - start_w), T(end_h - start_h)
        if not half_pixel:
            roi_w, roi_h = max(roi_w, T(1)), max(roi_h, T(1))
        bin_h, bin_w = T(roi_h / T(output_height)), T(roi_w / T(output_width))
        grid_h = sampling_ratio if sampling_ratio > 0 else int(math.ceil(roi_h / T(output_height)))
        grid_w = sampling_ratio if sampling_ratio > 0 else int(math.ceil(roi_w / T(output_width)))
        count = max(grid_h * grid_w, 1)
        pre = []  # per (ph, pw, iy, ix): positions and weights
        for ph in range(output_height):
            for pw in range(output_width):
                for iy in range(max(grid_h, 0)):
                    yy = T(T(start_h + T(ph) * bin_h) + T(T(T(iy + 0.5) * bin_h) / T(grid_h)))
                    for ix in range(max(grid_w, 0)):
                        xx = T(T(start_w + T(pw) * bin_w) + T(T(T(ix + 0.5) * bin_w) / T(grid_w)))
                        yv, xv = yy, xx
                        if yv < -1.0 or yv > height or xv < -1.0 or xv > width:
                            pre.append((0, 0, 0, 0, T(0), T(0), T(0), T(0)))
                            continue
                        yv = T(0) if yv <= 0 else yv
                        xv = T(0) if xv <= 0 else xv
                        y_low, x_low = int(yv), int(xv)
                        if y_low >= height - 1:
                            y_low = y_high = height - 1
                            yv = T(y_low)
                        else:
                            y_high = y_low + 1
                        if x_low >= width - 1:
                            x_low = x_high = width - 1
                            xv = T(x_low)
                        else:
                            x_high = x_low + 1
                        ly, lx = T(yv - T(y_low)), T(xv - T(x_low))
                        hy, hx = T(T(1) - ly), T(T(1) - lx)
                        pre.append((y_low * width + x_low, y_low * width + x_high, y_high * width + x_low,
                                    y_high * width + x_high, T(hy * hx), T(hy * lx), T(ly * hx), T(ly * lx)))
        for c in range(channels):
            plane = xs[batch_indices[n], c].reshape(-1)
            index = 0
            for ph in range(output_height):
                for pw in range(output_width):
                    value = T(0)
                    first = True
                    for _ in range(max(grid_h, 0) * max(grid_w, 0)):
                        p1, p2, p3, p4, w1, w2, w3, w4 = pre[index]
                        index += 1
                        if mode == "avg":
                            value = T(value + T(T(T(w1 * plane[p1]) + T(w2 * plane[p2])) + T(w3 * plane[p3]))
                                      + T(w4 * plane[p4]))
                        else:
                            corner = max(max(max(T(w1 * plane[p1]), T(w2 * plane[p2])), T(w3 * plane[p3])),
                                         T(w4 * plane[p4]))
                            value = corner if first else max(value, corner)
                            first = False
                    if mode == "avg":
                        value = T(value / T(count))
                    y[n, c, ph, pw] = value
    return y.astype(x.dtype)


def torchvision_roi_align(x, rois, batch_indices, output_size, spatial_scale, sampling_ratio, half_pixel):
    """torchvision.ops.roi_align (avg only): aligned=True is half_pixel; its adaptive sampling_ratio is -1."""
    boxes = torch.from_numpy(np.concatenate([batch_indices[:, None].astype(np.float32), rois], 1))
    return torchvision.ops.roi_align(torch.from_numpy(x), boxes, output_size, spatial_scale=spatial_scale,
                                     sampling_ratio=sampling_ratio if sampling_ratio > 0 else -1,
                                     aligned=half_pixel).numpy()


def max_roi_pool_reference(x, rois, pooled_height, pooled_width, spatial_scale):
    """Caffe's RoiPool as in ONNX Runtime's roi_pool.cc, with the true maximum of each bin."""
    n_rois = rois.shape[0]
    _, channels, height, width = x.shape
    y = np.zeros((n_rois, channels, pooled_height, pooled_width), dtype=x.dtype)
    T = np.float32 if x.dtype == np.float16 else x.dtype.type
    for n in range(n_rois):
        batch = int(rois[n, 0])
        # C's round: half away from zero (numpy's round is half to even).
        start_w, start_h, end_w, end_h = (int(math.copysign(math.floor(abs(float(T(v) * T(spatial_scale))) + 0.5),
                                                             float(v)))
                                          for v in rois[n, 1:])
        roi_h = max(end_h - start_h + 1, 1)
        roi_w = max(end_w - start_w + 1, 1)
        bin_h = T(roi_h) / T(pooled_height)
        bin_w = T(roi_w) / T(pooled_width)
        for ph in range(pooled_height):
            h0 = min(max(int(math.floor(T(ph) * bin_h)) + start_h, 0), height)
            h1 = min(max(int(math.ceil(T(ph + 1) * bin_h)) + start_h, 0), height)
            for pw in range(pooled_width):
                w0 = min(max(int(math.floor(T(pw) * bin_w)) + start_w, 0), width)
                w1 = min(max(int(math.ceil(T(pw + 1) * bin_w)) + start_w, 0), width)
                if h1 <= h0 or w1 <= w0:
                    y[n, :, ph, pw] = 0
                else:
                    y[n, :, ph, pw] = x[batch, :, h0:h1, w0:w1].max(axis=(1, 2))
    return y


def grid_sample(x, grid, mode="bilinear", padding="zeros", align_corners=0):
    """torch.nn.functional.grid_sample; `mode` in torch's (opset 16's) names."""
    return F.grid_sample(torch.from_numpy(x), torch.from_numpy(grid), mode=mode, padding_mode=padding,
                         align_corners=bool(align_corners)).numpy()


# ---- ONNX's own test cases ----

def onnx_test_case(name):
    """ONNX's node test case `name` as a Case compared with its recorded output; skipped when not installed."""
    folder = next((root / name for root in ONNX_TEST_DATA if (root / name / "model.onnx").exists()), None)
    if folder is None:
        pytest.skip(f"ONNX's test data is not installed (looked for {name} in {', '.join(map(str, ONNX_TEST_DATA))})")

    def load(path):
        tensor = onnx.TensorProto()
        tensor.ParseFromString(path.read_bytes())
        return numpy_helper.to_array(tensor)

    model = onnx.load(str(folder / "model.onnx"))
    data = folder / "test_data_set_0"
    inputs = {graph_input.name: load(data / f"input_{i}.pb") for i, graph_input in enumerate(model.graph.input)}
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return Case(opset, model.graph.node[0], inputs, {"onnx": load(data / "output_0.pb")}, tolerance=ONNX_TOLERANCE)


for _name in ["test_roialign_aligned_false", "test_roialign_aligned_true", "test_gridsample",
              "test_gridsample_aligncorners_true", "test_gridsample_bicubic", "test_gridsample_bilinear",
              "test_gridsample_border_padding", "test_gridsample_nearest", "test_gridsample_reflection_padding",
              "test_gridsample_zeros_padding"]:
    register(CASES, "onnx_" + _name.removeprefix("test_"), onnx_test_case, _name)


# ---- RoiAlign ----

ROI_BATCH, ROI_CHANNELS, ROI_HEIGHT, ROI_WIDTH = 2, 3, 12, 15


def roi_align_node(**attributes):
    return helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], **attributes)


def roi_align_x():
    return rng(1).standard_normal((ROI_BATCH, ROI_CHANNELS, ROI_HEIGHT, ROI_WIDTH)).astype(np.float32)


def random_rois(seed, count, height, width, batch, scale=1.0, spill=2.0):
    """Rois in input pixels / scale, some reaching past the map, a few tiny or inverted; and batch indices."""
    g = rng(seed)
    x1 = g.uniform(-spill, width - 1, count)
    y1 = g.uniform(-spill, height - 1, count)
    x2 = x1 + g.uniform(0.2, width * 0.8, count)
    y2 = y1 + g.uniform(0.2, height * 0.8, count)
    rois = np.stack([x1, y1, x2, y2], axis=1) / scale
    rois[0] = [1.0, 2.0, 1.3, 2.1]  # smaller than a pixel
    rois[1] = [5.0, 4.0, 3.0, 2.0]  # inverted
    batch_indices = g.integers(0, batch, count).astype(np.int64)
    return rois, batch_indices


def roi_align_inputs(seed=3, count=6, spatial_scale=1.0):
    rois, batch_indices = random_rois(seed, count, ROI_HEIGHT, ROI_WIDTH, ROI_BATCH, spatial_scale)
    return {"X": roi_align_x(), "rois": rois.astype(np.float32), "batch_indices": batch_indices}


def roi_align16(mode, transform, sampling_ratio, spatial_scale, output_height, output_width):
    inputs = roi_align_inputs(seed=2, count=9, spatial_scale=spatial_scale)
    half_pixel = transform == "half_pixel"
    node = roi_align_node(mode=mode, output_height=output_height, output_width=output_width,
                          sampling_ratio=sampling_ratio, spatial_scale=spatial_scale,
                          coordinate_transformation_mode=transform)
    references = {"ort-port": roi_align_reference(*inputs.values(), output_height, output_width, sampling_ratio,
                                                  spatial_scale, mode, half_pixel)}
    if mode == "avg":
        references["torchvision"] = torchvision_roi_align(*inputs.values(), (output_height, output_width),
                                                          spatial_scale, sampling_ratio, half_pixel)
    return Case(16, node, inputs, references)


def roi_align10(mode):
    """Opset 10 has no coordinate_transformation_mode: output_half_pixel."""
    inputs = roi_align_inputs()
    references = {"ort-port": roi_align_reference(*inputs.values(), 4, 3, 0, 1.0, mode, False)}
    if mode == "avg":
        references["torchvision"] = torchvision_roi_align(*inputs.values(), (4, 3), 1.0, 0, False)
    return Case(10, roi_align_node(mode=mode, output_height=4, output_width=3), inputs, references)


def roi_align16_dtype(dtype):
    """float64 exactly as ONNX Runtime computes it; float16 computed in float32."""
    inputs = roi_align_inputs()
    inputs["X"], inputs["rois"] = inputs["X"].astype(dtype), inputs["rois"].astype(dtype)
    reference = roi_align_reference(*inputs.values(), 3, 3, 2, 1.0, "avg", True)
    return Case(16, roi_align_node(output_height=3, output_width=3, sampling_ratio=2), inputs, {"ort-port": reference})


def roi_align16_no_rois():
    inputs = {"X": roi_align_x(), "rois": np.zeros((0, 4), np.float32), "batch_indices": np.zeros((0,), np.int64)}
    return Case(16, roi_align_node(output_height=2, output_width=2), inputs,
                {"shape": np.zeros((0, ROI_CHANNELS, 2, 2), np.float32)})


for _spatial_scale in (1.0, 0.5):
    for _transform in ("half_pixel", "output_half_pixel"):
        for _ratio in (0, 2):
            for _mode in ("avg", "max"):
                for _out in ((3, 4), (1, 1)):
                    register(CASES, f"roi_align16_{_mode}_{_transform}_ratio{_ratio}_scale{_spatial_scale}"
                             f"_out{_out[0]}x{_out[1]}", roi_align16, _mode, _transform, _ratio, _spatial_scale, *_out)
for _mode in ("avg", "max"):
    register(CASES, f"roi_align10_{_mode}", roi_align10, _mode)
for _dtype in (np.float64, np.float16):
    register(CASES, f"roi_align16_avg_{np.dtype(_dtype).name}", roi_align16_dtype, _dtype)
register(CASES, "roi_align16_no_rois", roi_align16_no_rois)


@refused
def roi_align_batch_index_out_of_range():
    inputs = roi_align_inputs()
    inputs["batch_indices"][3] = ROI_BATCH
    return Refused(16, roi_align_node(), inputs, ["batch_indices[3]", f"outside [0, {ROI_BATCH})"])


@refused
def roi_align_bad_mode():
    return Refused(16, roi_align_node(mode="median"), roi_align_inputs(), ["mode 'median'"])


@refused
def roi_align_bad_coordinate_transformation_mode():
    return Refused(16, roi_align_node(coordinate_transformation_mode="align_corners"), roi_align_inputs(),
                   ["coordinate_transformation_mode 'align_corners'"])


@refused
def roi_align_rois_with_5_columns():
    inputs = roi_align_inputs() | {"rois": np.zeros((6, 5), np.float32)}
    return Refused(16, roi_align_node(), inputs, ["rois must have shape [num_rois, 4]", "[6, 5]"])


@refused
def roi_align_batch_indices_count():
    inputs = roi_align_inputs()
    inputs["batch_indices"] = inputs["batch_indices"][:4]
    return Refused(16, roi_align_node(), inputs, ["batch_indices must have shape [6]", "[4]"])


@refused
def roi_align_output_height_0():
    return Refused(16, roi_align_node(output_height=0), roi_align_inputs(), ["output_height 0"])


@refused
def roi_align_nan_roi():
    inputs = roi_align_inputs()
    inputs["rois"][2, 1] = np.nan
    return Refused(16, roi_align_node(), inputs, ["roi 2", "not finite"])


# ---- MaxRoiPool ----

POOL_BATCH, POOL_CHANNELS, POOL_HEIGHT, POOL_WIDTH = 2, 3, 11, 13


def max_roi_pool_x():
    # Mostly negative values: a bin's maximum must not be clipped at 0 (or at FLT_MIN).
    return (rng(4).standard_normal((POOL_BATCH, POOL_CHANNELS, POOL_HEIGHT, POOL_WIDTH)) - 2.0).astype(np.float32)


def max_roi_pool_rois(spatial_scale):
    """Rows (batch_index, x1, y1, x2, y2) at `spatial_scale`; roi 2 wholly outside: every bin empty, 0."""
    rois, batch_indices = random_rois(5, 8, POOL_HEIGHT, POOL_WIDTH, POOL_BATCH, spatial_scale, spill=4.0)
    rows = np.concatenate([batch_indices[:, None].astype(np.float64), rois], 1).astype(np.float32)
    rows[2, 1:] = np.array([-40, -40, -20, -20]) / spatial_scale
    return rows


def max_roi_pool_node(**attributes):
    return helper.make_node("MaxRoiPool", ["X", "rois"], ["Y"], **attributes)


def max_roi_pool13(spatial_scale, pooled):
    x, rows = max_roi_pool_x(), max_roi_pool_rois(spatial_scale)
    references = {"numpy": max_roi_pool_reference(x, rows, *pooled, spatial_scale),
                  "torchvision": torchvision.ops.roi_pool(torch.from_numpy(x), torch.from_numpy(rows), pooled,
                                                          spatial_scale).numpy()}
    return Case(13, max_roi_pool_node(pooled_shape=list(pooled), spatial_scale=spatial_scale), {"X": x, "rois": rows},
                references, tolerance=0.0)


def max_roi_pool13_float64():
    x, rows = max_roi_pool_x().astype(np.float64), max_roi_pool_rois(0.0625).astype(np.float64)
    return Case(13, max_roi_pool_node(pooled_shape=[3, 2], spatial_scale=0.0625), {"X": x, "rois": rows},
                {"numpy": max_roi_pool_reference(x, rows, 3, 2, 0.0625)}, tolerance=0.0)


for _spatial_scale in (1.0, 0.5, 0.0625):
    for _pooled in ((2, 3), (1, 1), (4, 4)):
        register(CASES, f"max_roi_pool13_scale{_spatial_scale}_pooled{_pooled[0]}x{_pooled[1]}", max_roi_pool13,
                 _spatial_scale, _pooled)
register(CASES, "max_roi_pool13_float64", max_roi_pool13_float64)


@refused
def max_roi_pool_batch_index_out_of_range():
    rows = max_roi_pool_rois(0.0625)
    rows[5, 0] = POOL_BATCH
    return Refused(13, max_roi_pool_node(pooled_shape=[2, 2]), {"X": max_roi_pool_x(), "rois": rows},
                   ["roi 5", f"batch_index {POOL_BATCH}"])


@refused
def max_roi_pool_no_pooled_shape():
    return Refused(13, max_roi_pool_node(), {"X": max_roi_pool_x(), "rois": max_roi_pool_rois(0.0625)},
                   ["pooled_shape"])


@refused
def max_roi_pool_rois_with_4_columns():
    rows = max_roi_pool_rois(0.0625)[:, 1:].copy()
    return Refused(13, max_roi_pool_node(pooled_shape=[2, 2]), {"X": max_roi_pool_x(), "rois": rows},
                   ["rois must have shape [num_rois, 5]", "[8, 4]"])


# ---- GridSample ----

# Opset 16's mode names (torch's) and opset 20's.
GRID_MODES = {16: {"bilinear": "bilinear", "nearest": "nearest", "bicubic": "bicubic"},
              20: {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}}


def grid_sample_inputs():
    """X [2, 3, 7, 9], and a grid [2, 5, 6, 2] with points inside and well outside [-1, 1], so that every
    padding mode is exercised (reflection more than once over)."""
    return {"X": rng(6).standard_normal((2, 3, 7, 9)).astype(np.float32),
            "grid": rng(7).uniform(-2.6, 2.6, (2, 5, 6, 2)).astype(np.float32)}


def grid_sample_node(**attributes):
    return helper.make_node("GridSample", ["X", "grid"], ["Y"], **attributes)


def grid_sample_case(opset, torch_mode, padding, align_corners):
    inputs = grid_sample_inputs()
    node = grid_sample_node(mode=GRID_MODES[opset][torch_mode], padding_mode=padding, align_corners=align_corners)
    return Case(opset, node, inputs, {"torch": grid_sample(*inputs.values(), torch_mode, padding, align_corners)})


def grid_sample16_defaults():
    """bilinear, zeros, align_corners 0."""
    inputs = grid_sample_inputs()
    return Case(16, grid_sample_node(), inputs, {"torch": grid_sample(*inputs.values())})


def grid_sample16_float64(torch_mode):
    inputs = {name: array.astype(np.float64) for name, array in grid_sample_inputs().items()}
    return Case(16, grid_sample_node(mode=torch_mode, padding_mode="reflection"), inputs,
                {"torch": grid_sample(*inputs.values(), torch_mode, "reflection")})


def grid_sample16_one_pixel_high(torch_mode, padding, align_corners):
    """X one pixel high (reflection with align_corners mirrors at a single point) under a grid larger than X."""
    inputs = {"X": rng(8).standard_normal((1, 2, 1, 4)).astype(np.float32),
              "grid": rng(9).uniform(-1.5, 1.5, (1, 16, 17, 2)).astype(np.float32)}
    node = grid_sample_node(mode=torch_mode, padding_mode=padding, align_corners=align_corners)
    return Case(16, node, inputs, {"torch": grid_sample(*inputs.values(), torch_mode, padding, align_corners)})


for _opset in (16, 20):
    for _torch_mode, _onnx_mode in GRID_MODES[_opset].items():
        for _padding in ("zeros", "border", "reflection"):
            for _align in (0, 1):
                register(CASES, f"grid_sample{_opset}_{_onnx_mode}_{_padding}_align_corners{_align}", grid_sample_case,
                         _opset, _torch_mode, _padding, _align)
register(CASES, "grid_sample16_defaults", grid_sample16_defaults)
for _torch_mode in ("bilinear", "bicubic"):
    register(CASES, f"grid_sample16_{_torch_mode}_reflection_float64", grid_sample16_float64, _torch_mode)
for _torch_mode in ("bilinear", "nearest", "bicubic"):
    for _padding in ("zeros", "border", "reflection"):
        for _align in (0, 1):
            register(CASES, f"grid_sample16_{_torch_mode}_{_padding}_align_corners{_align}_h1",
                     grid_sample16_one_pixel_high, _torch_mode, _padding, _align)


# Each opset accepts only its own mode names; 5-D input is refused as not implemented.
@refused
def grid_sample20_refuses_bilinear():
    return Refused(20, grid_sample_node(mode="bilinear"), grid_sample_inputs(), ["mode 'bilinear'"])


@refused
def grid_sample16_refuses_cubic():
    return Refused(16, grid_sample_node(mode="cubic"), grid_sample_inputs(), ["mode 'cubic'"])


@refused
def grid_sample_bad_padding_mode():
    return Refused(16, grid_sample_node(padding_mode="wrap"), grid_sample_inputs(), ["padding_mode 'wrap'"])


@refused
def grid_sample20_5d_input():
    inputs = {"X": np.zeros((1, 1, 2, 3, 4), np.float32), "grid": np.zeros((1, 2, 2, 2, 3), np.float32)}
    return Refused(20, grid_sample_node(), inputs, ["4-D", "[1, 1, 2, 3, 4]"], output_rank=5)


@refused
def grid_sample_grid_batch_mismatch():
    inputs = grid_sample_inputs()
    inputs["grid"] = inputs["grid"][:1]
    return Refused(16, grid_sample_node(), inputs, ["grid must have shape [2, H_out, W_out, 2]", "[1, 5, 6, 2]"])


# ---- tests ----

def assert_matches(actual, references, tolerance):
    """`actual` has each reference's dtype and shape and is within `tolerance` of the output's scale of it.
    A failure reports every reference."""
    reports, failed = [], False
    for label, expected in references.items():
        if actual.dtype != expected.dtype or actual.shape != expected.shape:
            reports.append(f"vs {label}: got {actual.dtype}{list(actual.shape)}, expected "
                           f"{expected.dtype}{list(expected.shape)}")
            failed = True
            continue
        bound = TOLERANCE[actual.dtype] if tolerance is None else tolerance
        difference = float(np.abs(actual.astype(np.float64) - expected.astype(np.float64)).max(initial=0))
        scale = max(1.0, float(np.abs(expected.astype(np.float64)).max(initial=0)))
        reports.append(f"max |kiln - {label}| = {difference:.3g} (scale {scale:.3g}, tolerance {bound:g})")
        failed = failed or not difference <= bound * scale
    assert not failed, "; ".join(reports)


@pytest.mark.parametrize("backends", BACKENDS)
@pytest.mark.parametrize("name", CASES)
def test_matches_reference(name, backends, kiln_bin, tmp_path):
    case = CASES[name]()
    output_name = case.node.output[0]
    first = next(iter(case.references.values()))
    path = save_model(tmp_path / "model.onnx", case.node, case.opset, case.inputs, first.dtype, first.ndim)
    outputs = kiln_cli.run_model(kiln_bin, path, case.inputs, tmp_path, extra_args=BACKENDS[backends])
    assert sorted(outputs) == [output_name], f"outputs {sorted(outputs)}, expected [{output_name!r}]"
    assert_matches(outputs[output_name], case.references, case.tolerance)


@pytest.mark.parametrize("backends", BACKENDS)
@pytest.mark.parametrize("name", REFUSED)
def test_refused_with_message(name, backends, kiln_bin, tmp_path):
    case = REFUSED[name]()
    path = save_model(tmp_path / "model.onnx", case.node, case.opset, case.inputs, np.float32, case.output_rank)
    args = ["run", path, "--output-dir", tmp_path / "outputs"]
    for input_name, array in case.inputs.items():
        np.save(tmp_path / f"input_{input_name}.npy", np.ascontiguousarray(array))
        args += ["--input", f"{input_name}={tmp_path / f'input_{input_name}.npy'}"]
    result = kiln_cli.run(kiln_bin, *args, *BACKENDS[backends])
    # A negative return code is a signal (a crash), not a refusal.
    assert result.returncode > 0, f"expected a clean failure, got {result.returncode}: {result.stderr.strip()}"
    for text in case.mentions:
        assert text in result.stderr, f"{text!r} not in the error: {result.stderr.strip()}"
