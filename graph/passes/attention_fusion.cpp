// Attention as one step: the nodes exporters write for softmax(scale * Q K^T + mask) V become one
// ScaledDotProductAttention step (ops/attention.h), run by the first kernel of the sdpa_kernels
// setting that takes it. PyTorch 1.13 exports nn.MultiheadAttention (opsets 13 and 17) as
//   Div(Q, sqrt(E)) -> MatMul(., K^T) [-> Add(., mask)] -> Softmax(axis -1) -> MatMul(., V)
// (baddbmm with a mask adds Mul(., 1) on both operands of the Add). Accepted around the scores:
// any number of Mul/Div by plan-time scalars (the scale before or after the product), one additive
// mask (Add), or one boolean mask as Where(mask, scores, -inf) or Where(mask, -inf, scores).
//
// Planning walks nodes in file order, and exporters compute K^T (and baddbmm's Mul of the mask)
// after the scaling of Q, so the step pulls those values ahead (plan_ahead) when it starts at the
// Div of Q.
#include <chrono>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "graph/passes/fusion_patterns.h"
#include "graph/passes/passes.h"
#include "ops/attention.h"

namespace kiln {
namespace {

bool is_op(const Node* node, std::string_view op_type) {
  return node != nullptr && node->op_type == op_type && is_default_domain(node->domain) &&
         node->outputs.size() == 1;
}

// A plan-time scalar (one element, rank at most the scores' `rank`, so that broadcasting it changes
// no shape), if `name` is one.
std::optional<double> scalar_of_rank(const PlanState& state, const std::string& name, int64_t rank) {
  const Slot* slot = state.planned(name);
  if (slot == nullptr || static_cast<int64_t>(slot->info.shape.size()) > rank) return std::nullopt;
  return scalar_constant(state, name);
}

// A scalar that removes a key when selected: -inf. (masked_fill with a finite lowest value keeps a
// row whose keys are all masked uniform, where the kernels give NaN: not matched.)
bool removes_key(std::optional<double> value) {
  return value && std::isinf(*value) && *value < 0;
}

// The factor a Mul or Div by a plan-time scalar applies to `value` (of `rank` dims), or nothing.
std::optional<double> scalar_factor(const PlanState& state, const Node& node, const std::string& value,
                                    int64_t rank) {
  if (node.inputs.size() != 2) return std::nullopt;
  if (node.op_type == "Mul") {
    const std::string& other = node.inputs[0] == value ? node.inputs[1] : node.inputs[0];
    if (other == value) return std::nullopt;
    return scalar_of_rank(state, other, rank);
  }
  if (node.op_type == "Div" && node.inputs[0] == value) {
    const std::optional<double> divisor = scalar_of_rank(state, node.inputs[1], rank);
    if (divisor && *divisor != 0) return 1.0 / *divisor;
  }
  return std::nullopt;
}

struct AttentionMatch {
  std::vector<const Node*> nodes;  // planned inside the step, in order, the scores MatMul excluded
  std::string q, k_transposed, v, mask;
  double scale = 1;
  AttentionMask mask_kind = AttentionMask::none;
};

// The chain after the scores MatMul `scores`, up to the MatMul with V. With `need_planned`, the
// mask, the Where's condition and V must be planned values already; without it only the nodes' form
// is checked (before the values are planned ahead). `rank` is Q's, which the scores share.
std::optional<AttentionMatch> match_chain(const PlanState& state, const Node& scores, bool need_planned,
                                          int64_t rank) {
  AttentionMatch match;
  std::string value = scores.outputs[0];
  for (;;) {
    const Node* next = sole_reader(state, value);
    if (next == nullptr || !is_default_domain(next->domain) || next->outputs.size() != 1) return std::nullopt;
    if (const std::optional<double> factor = scalar_factor(state, *next, value, rank)) {
      // After the mask a factor would scale the mask too, which the step's scale does not: only
      // baddbmm's factor 1 may follow it.
      if (match.mask_kind != AttentionMask::none && *factor != 1.0) return std::nullopt;
      match.scale *= *factor;
    } else if (is_op(next, "Add") && next->inputs.size() == 2 && match.mask_kind == AttentionMask::none) {
      const std::string& other = next->inputs[0] == value ? next->inputs[1] : next->inputs[0];
      if (other == value || (need_planned && state.planned(other) == nullptr)) return std::nullopt;
      match.mask = other;
      match.mask_kind = AttentionMask::additive;
    } else if (is_op(next, "Where") && next->inputs.size() == 3 && match.mask_kind == AttentionMask::none) {
      const bool keeps =
          next->inputs[1] == value && removes_key(scalar_of_rank(state, next->inputs[2], rank));
      const bool drops =
          next->inputs[2] == value && removes_key(scalar_of_rank(state, next->inputs[1], rank));
      if ((!keeps && !drops) || next->inputs[0] == value) return std::nullopt;
      if (need_planned && state.planned(next->inputs[0]) == nullptr) return std::nullopt;
      match.mask = next->inputs[0];
      match.mask_kind = keeps ? AttentionMask::keep : AttentionMask::drop;
    } else if (is_op(next, "Softmax")) {
      // Over the last axis; before opset 13 Softmax normalizes the input flattened from `axis` on.
      const int64_t axis = next->attributes.get_int("axis", -1);
      if (state.op_spec_without_inputs(*next).opset < 13 || (axis != -1 && axis != rank - 1))
        return std::nullopt;
      match.nodes.push_back(next);
      const Node* product = sole_reader(state, next->outputs[0]);
      if (!is_op(product, "MatMul") || product->inputs.size() != 2 ||
          product->inputs[0] != next->outputs[0] || product->inputs[1] == next->outputs[0]) {
        return std::nullopt;
      }
      if (need_planned && state.planned(product->inputs[1]) == nullptr) return std::nullopt;
      match.v = product->inputs[1];
      match.nodes.push_back(product);
      return match;
    } else {
      return std::nullopt;
    }
    match.nodes.push_back(next);
    value = next->outputs[0];
  }
}

// A plan-time mask that is exactly causality over scores of L queries and L keys (key j removed
// where j > i, kept elsewhere), [..., L, L] with all leading dims 1, so the kernels can skip the
// masked keys instead of reading them.
bool is_causal_mask(const TensorInfo& mask, AttentionMask kind, int64_t l) {
  if (!mask.is_constant() || mask.shape.size() < 2) return false;
  if (mask.shape.back() != l || mask.shape[mask.shape.size() - 2] != l || checked_numel(mask.shape) != l * l)
    return false;
  for (int64_t i = 0; i < l; ++i) {
    for (int64_t j = 0; j < l; ++j) {
      const int64_t at = i * l + j;
      bool removed = false;
      if (kind == AttentionMask::additive) {
        const float value = mask.value.data<float>()[at];
        if (value != 0.0f && value != -std::numeric_limits<float>::infinity()) return false;
        removed = value != 0.0f;
      } else {
        const bool is_true = static_cast<const uint8_t*>(mask.value.raw_data())[at] != 0;
        removed = is_true == (kind == AttentionMask::drop);
      }
      if (removed != (j > i)) return false;
    }
  }
  return true;
}

// The step, named after the node it starts at.
NodeForm attention_form(const PlanState& state, const Node& start, const AttentionMatch& match) {
  NodeForm form;
  form.op_type = std::string(kAttentionOp);
  form.request.op = state.op_spec_without_inputs(start);
  form.request.options = state.backend_options;
  form.request.op.op_type = form.op_type;
  form.request.op.opset = 1;
  form.request.precision = planned_precision(state.settings, "MatMul", form.note);
  std::vector<std::string> inputs = {match.q, match.k_transposed, match.v};
  AttentionMask mask_kind = match.mask_kind;
  bool causal = false;
  if (mask_kind != AttentionMask::none) {
    const Slot* mask = state.planned(match.mask);
    const TensorInfo& q = state.planned(match.q)->info;
    const TensorInfo& k = state.planned(match.k_transposed)->info;
    const int64_t queries = q.shape.size() >= 2 ? q.shape[q.shape.size() - 2] : -1;
    causal = k.shape.size() >= 2 && queries == k.shape.back() &&
             mask->info.dtype == (mask_kind == AttentionMask::additive ? DType::f32 : DType::boolean) &&
             is_causal_mask(mask->info, mask_kind, queries);
    if (causal) {
      mask_kind = AttentionMask::none;
    } else {
      inputs.push_back(match.mask);
    }
  }
  form.attributes = std::make_unique<Attributes>(
      attention_attributes(static_cast<float>(match.scale), true, causal, mask_kind));
  form.request.op.attributes = form.attributes.get();
  for (const std::string& name : inputs) {
    const int slot = state.slot_of(name);
    const Slot& value = state.slots[static_cast<size_t>(slot)];
    form.input_slots.push_back(slot);
    form.request.op.inputs.push_back(value.info);
    form.request.input_layouts.push_back(value.layout);
  }
  form.fused = match.nodes;
  form.output_names = {match.nodes.back()->outputs[0]};
  return form;
}

// The setting's list as text ("flash,onednn,math"), for the error when none of them takes a step.
std::string sdpa_kernel_list(const Settings& settings) {
  return setting_value_text(find_setting("sdpa_kernels"), settings.get("sdpa_kernels"));
}

}  // namespace

bool plan_attention(PlanState& state, const Node& node) {
  if (priority_list(state.settings.get("sdpa_kernels")).empty() || !is_default_domain(node.domain) ||
      node.inputs.size() != 2 || node.outputs.size() != 1) {
    return false;
  }
  // The step starts at the scaling of Q before the scores MatMul, or at that MatMul.
  const Node* scaling = nullptr;
  const Node* scores = &node;
  std::string q = node.inputs[0];
  if (node.op_type == "Div" || node.op_type == "Mul") {
    scaling = &node;
    scores = sole_reader(state, node.outputs[0]);
    // Mul(c, Q) as well as Mul(Q, c): Q is the operand that is not the constant.
    if (node.op_type == "Mul" && scalar_constant(state, node.inputs[0]) &&
        !scalar_constant(state, node.inputs[1]))
      q = node.inputs[1];
  }
  if (!is_op(scores, "MatMul") || scores->inputs.size() != 2 || scores->inputs[1] == scores->inputs[0])
    return false;
  if (scaling != nullptr && scores->inputs[0] != node.outputs[0]) return false;
  const Slot* planned_q = state.planned(q);
  if (planned_q == nullptr || planned_q->info.dtype != DType::f32) return false;
  const int64_t rank = static_cast<int64_t>(planned_q->info.shape.size());
  if (scaling != nullptr && !scalar_factor(state, *scaling, q, rank)) return false;
  std::optional<AttentionMatch> match = match_chain(state, *scores, false, rank);
  if (!match) return false;
  // What the step reads that the file order computes later.
  for (const std::string& value : {scores->inputs[1], match->v, match->mask}) {
    if (!value.empty() && !plan_ahead(state, value)) return false;
  }
  match = match_chain(state, *scores, true, rank);
  if (!match) return false;
  match->q = q;
  match->k_transposed = scores->inputs[1];
  if (scaling != nullptr) {
    match->scale *= *scalar_factor(state, *scaling, q, rank);
    match->nodes.insert(match->nodes.begin(), scores);
  }
  for (const std::string& name : {match->q, match->k_transposed, match->v}) {
    if (state.planned(name)->info.dtype != DType::f32) return false;
  }
  NodeForm form = attention_form(state, node, *match);
  // Shapes kiln's attention does not take (broadcast batch dims, a mask that does not broadcast to
  // the scores) stay the exported nodes.
  AttentionParams params;
  try {
    params = attention_params(form.request.op);
  } catch (const Error& error) {
    // No kernel was asked: the fused op itself does not take these shapes.
    refuse_form(state, node.name, form.fused,
                {Refusal{"planner", "", RefusalKind::unsupported_shape, error.what()}});
    return false;
  }
  form.outputs = {TensorInfo{DType::f32, params.output, {}}};
  const auto start = std::chrono::steady_clock::now();
  KernelSelection selection = find_kernel(form.request, form.outputs, state.settings);
  // The error's context names the node (plan.cpp).
  KILN_CHECK(selection.kernel != nullptr, not_implemented, "no attention kernel of sdpa_kernels (",
             sdpa_kernel_list(state.settings),
             ") can run this attention: ", selection.decision.refusals_text());
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  add_step(state, std::move(form), std::move(selection), elapsed_ms);
  return true;
}

}  // namespace kiln
