// Multi-node patterns the fusion pass turns into one step (GELU as a post-op, a decomposed LayerNorm
// as LayerNormalization), matched on the graph as planning sees it: which nodes read each value and
// what is known so far about planned values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/passes/plan_state.h"

namespace kiln {

// True when `node` is an ONNX-domain node of `op_type` (false for null).
bool is_onnx_op(const Node* node, std::string_view op_type);

// The one live node reading `value`, or null when it has several readers, reads it twice, or the
// value is a graph output.
const Node* sole_reader(const PlanState& state, const std::string& value);

// A plan-time scalar constant's value, if `name` is one.
std::optional<double> scalar_constant(const PlanState& state, const std::string& name);

// The five nodes PyTorch exports for GELU(x) = x * 0.5 * (1 + erf(x / sqrt 2)):
// Div(x, 1.414..) -> Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5), in that order; empty if `x`
// is not read exactly by that pattern.
std::vector<const Node*> match_gelu(const PlanState& state, const std::string& x);

struct LayerNormMatch {
  std::vector<const Node*> nodes;  // the eight after the first ReduceMean, in order
  std::string scale;
  std::string bias;
  float epsilon = 0;
};

// LayerNorm over the last axis as exporters decompose it (x is ReduceMean's input):
//   d = x - ReduceMean(x); y = d / Sqrt(ReduceMean(Pow(d, 2)) + eps) * scale + bias
// with scale, bias and eps plan-time constants. Nothing when the nodes differ in any way.
std::optional<LayerNormMatch> match_layer_norm(const PlanState& state, const Node& mean);
// The same where x is not planned yet (a fusion that computes it): `x` is what it will be.
std::optional<LayerNormMatch> match_layer_norm(const PlanState& state, const Node& mean, const TensorInfo& x);

}  // namespace kiln
