// A plan step's fused nodes, refusals and quantization as Python sees them, in explain and in trace
// events alike: lists and dicts with the keys of `kiln explain --json`.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <vector>

#include "backends/base/refusal.h"
#include "graph/fused_node.h"
#include "ops/quantize.h"

namespace kiln {

// [{"op": "Relu", "node": "/relu"}, ...]
inline pybind11::list fused_list(const std::vector<FusedNode>& fused) {
  pybind11::list list;
  for (const FusedNode& node : fused) {
    pybind11::dict entry;
    entry["op"] = node.op_type;
    entry["node"] = node.node;
    list.append(entry);
  }
  return list;
}

// [{"backend": "onednn", "kernel": "", "kind": "unsupported_dtype", "detail": "..."}, ...]
inline pybind11::list refusal_list(const std::vector<Refusal>& refusals) {
  pybind11::list list;
  for (const Refusal& refusal : refusals) {
    pybind11::dict entry;
    entry["backend"] = refusal.backend;
    entry["kernel"] = refusal.variant;
    entry["kind"] = std::string(refusal_kind_name(refusal.kind));
    entry["detail"] = refusal.detail;
    list.append(entry);
  }
  return list;
}

// {"operands": [{"name": "x", "dtype": "uint8", "scales": [...], "zero_points": [...], "per": "tensor"},
// ...], "accumulation": ..., "bias": ..., "output": ...}, or None for a step that is not quantized.
inline pybind11::object quantization_dict(const std::optional<QuantizationSummary>& quantization) {
  if (!quantization) return pybind11::none();
  pybind11::list operands;
  for (const QuantizedOperand& operand : quantization->operands) {
    pybind11::dict entry;
    entry["name"] = operand.name;
    entry["dtype"] = std::string(dtype_name(operand.dtype));
    entry["scales"] = operand.scales;
    pybind11::list zero_points;
    for (double zero_point : operand.zero_points) zero_points.append(static_cast<int64_t>(zero_point));
    entry["zero_points"] = zero_points;
    entry["per"] = operand.per;
    operands.append(entry);
  }
  pybind11::dict dict;
  dict["operands"] = operands;
  dict["accumulation"] = quantization->accumulation;
  dict["bias"] = quantization->bias;
  dict["output"] = quantization->output;
  return dict;
}

}  // namespace kiln
