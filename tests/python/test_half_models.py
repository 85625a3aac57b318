"""Models stored in half precision: float16 and bfloat16 weights (and float16 inputs and outputs)
load and run, computed in float32.

Each model of the parity set is exported in float32 and rewritten the way half-precision
converters store it: every float32 initializer and Constant as float16 (inputs and outputs too) or
as bfloat16 (inputs and outputs stay float32, as numpy has no bfloat16). kiln must give what it
gives for the float32 model whose weights were rounded the same way (so the check isolates the
storage, not the rounding: 1e-4 of the output's scale, plus float16's own rounding of the output),
and stay near PyTorch's float32 output (the rounded weights' error, measured per model below).
"""
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, numpy_helper

import export_models
import kiln_cli

TOLERANCE = 1e-4
# float16 keeps 11 significant bits: an output rounded to it moves by up to 2^-11 of its magnitude.
FLOAT16_OUTPUT_ROUNDING = 2.0 ** -11
# How far rounding the weights to each type moves these models' outputs from PyTorch's float32 ones,
# relative to the output's scale: measured at most 1.5e-3 for float16 (unet) and 1.4e-2 for
# bfloat16's 8 significant bits (unet), so about 3x that.
WEIGHT_ROUNDING_BOUND = {"float16": 5e-3, "bfloat16": 4e-2}
CASES = [("resnet18", 13), ("unet", 13), (export_models.TRANSFORMER, 17)]


def round_to(values, kind):
    """float32 values rounded to float16 or bfloat16 (round to nearest even), as stored bits and as float32."""
    if kind == "float16":
        half = values.astype(np.float16)
        return half.tobytes(), half.astype(np.float32)
    bits = np.ascontiguousarray(values, dtype=np.float32).reshape(-1).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return rounded.tobytes(), (rounded.astype(np.uint32) << 16).view(np.float32).reshape(values.shape)


def rewrite(model, kind, store):
    """A copy of `model` with every float32 constant rounded to `kind`: stored in it when `store`,
    else rounded but kept float32 (the reference). float16 models take float16 inputs and outputs."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    code = TensorProto.FLOAT16 if kind == "float16" else TensorProto.BFLOAT16

    def convert(tensor):
        values = numpy_helper.to_array(tensor)
        if values.dtype != np.float32:
            return tensor
        raw, rounded = round_to(values, kind)
        if not store:
            return numpy_helper.from_array(rounded, tensor.name)
        return TensorProto(name=tensor.name, data_type=code, dims=values.shape, raw_data=raw)

    initializers = [convert(tensor) for tensor in model.graph.initializer]
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)
    for node in model.graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type == TensorProto.FLOAT:
                attribute.t.CopyFrom(convert(attribute.t))
    if store and kind == "float16":
        for value in list(model.graph.input) + list(model.graph.output):
            if value.type.tensor_type.elem_type == TensorProto.FLOAT:
                value.type.tensor_type.elem_type = code
    return model


@pytest.mark.parametrize("kind", ["float16", "bfloat16"])
@pytest.mark.parametrize("name,opset", CASES, ids=[name for name, _ in CASES])
def test_half_stored_model_matches_its_float32_form(name, opset, kind, kiln_bin, model_cache, tmp_path):
    source = onnx.load(str(export_models.cached_export(name, model_cache, opset)))
    stored = tmp_path / f"{name}_{kind}.onnx"
    reference = tmp_path / f"{name}_{kind}_as_float32.onnx"
    onnx.save(rewrite(source, kind, store=True), str(stored))
    onnx.save(rewrite(source, kind, store=False), str(reference))
    x = export_models.random_input(name, 1, torch.Generator().manual_seed(7)).numpy()
    if kind == "float16":
        x = x.astype(np.float16)  # the model's input is float16; the reference reads the same values
    actual = kiln_cli.run_model(kiln_bin, stored, {"input": x}, tmp_path / "stored")["output"]
    expected = kiln_cli.run_model(kiln_bin, reference, {"input": x.astype(np.float32)}, tmp_path / "ref")["output"]
    assert actual.dtype == (np.float16 if kind == "float16" else np.float32)
    assert actual.shape == expected.shape
    scale = max(1.0, float(np.abs(expected).max()))
    rounding = FLOAT16_OUTPUT_ROUNDING if kind == "float16" else 0.0
    difference = float(np.abs(actual.astype(np.float32) - expected).max())
    assert difference <= (TOLERANCE + rounding) * scale, f"max |half - float32 form| = {difference:.3g} (scale {scale:.3g})"

    # And near PyTorch's float32 model, within what rounding the weights costs.
    model, _ = export_models.build(name)
    with torch.no_grad():
        torch_output = model(torch.from_numpy(x.astype(np.float32))).numpy()
    torch_scale = max(1.0, float(np.abs(torch_output).max()))
    drift = float(np.abs(actual.astype(np.float32) - torch_output).max()) / torch_scale
    assert drift <= WEIGHT_ROUNDING_BOUND[kind], f"{kind} weights move the output {drift:.3g} of its scale from PyTorch's"
