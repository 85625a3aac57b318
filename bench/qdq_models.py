"""The int8 files the benchmarks share: each model of tests/python/export_models.py quantized by
kiln.quantization.quantize_static with ONNX Runtime's defaults (QDQ, int8 activations and weights,
MinMax) over seeded random-normal calibration inputs at batch 1, or by quantize_dynamic (its MatMuls'
activations quantized per run), cached beside the float export (the batch dimension stays symbolic,
so one file serves every batch size)."""
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(REPO / "build" / "python"))
import export_models  # noqa: E402


def calibration_inputs(name, count, seed=11):
    """`count` seeded random-normal inputs {"input": array} at batch 1."""
    rng = np.random.default_rng(seed)
    shape = export_models.input_shape(name)
    return [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


class ListReader:
    """A calibration data reader over a list of batches."""

    def __init__(self, batches):
        self._batches = list(batches)

    def get_next(self):
        return self._batches.pop(0) if self._batches else None


def quantized_model(name, float_path, per_channel=False, calibration=8):
    """Path of `float_path` quantized (cached as <float file>.qdq[_per_channel]_c<calibration>.onnx)."""
    import kiln.quantization

    float_path = pathlib.Path(float_path)
    suffix = f".qdq{'_per_channel' if per_channel else ''}_c{calibration}.onnx"
    path = float_path.with_name(float_path.stem + suffix)
    if not path.exists():
        partial = path.with_name(path.name + ".partial")
        kiln.quantization.quantize_static(float_path, partial, ListReader(calibration_inputs(name, calibration)),
                                          per_channel=per_channel)
        partial.rename(path)
    return path


def dynamic_model(float_path):
    """Path of `float_path` with its MatMuls dynamically quantized (cached as <float file>.dynamic.onnx)."""
    import kiln.quantization

    float_path = pathlib.Path(float_path)
    path = float_path.with_name(float_path.stem + ".dynamic.onnx")
    if not path.exists():
        partial = path.with_name(path.name + ".partial")
        kiln.quantization.quantize_dynamic(float_path, partial)
        partial.rename(path)
    return path
