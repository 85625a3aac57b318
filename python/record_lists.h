// A plan step's fused nodes and refusals as Python sees them, in explain and in trace events alike:
// lists of dicts with the keys of `kiln explain --json`.
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "backends/base/refusal.h"
#include "graph/fused_node.h"

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

}  // namespace kiln
