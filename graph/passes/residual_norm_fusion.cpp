// The MHA fast path (the mha_fastpath setting): a transformer block's residual Add and the
// LayerNorm after it as one ResidualLayerNorm step (ops/residual_layer_norm.h), which writes the
// sum once and normalizes each row while it is in cache instead of storing the sum and reading it
// back. nn.MultiheadAttention's sequence-first output is transposed [L, B, E] -> [B, L, E] before
// that Add; the step reads the transposition's input in swapped row order, so the Transpose (a
// full copy at batch > 1) disappears too. The LayerNorm may be ONNX's LayerNormalization (opset
// 17) or its decomposition (opset 13 exports).
#include "graph/passes/fusion_patterns.h"
#include "graph/passes/passes.h"
#include "ops/residual_layer_norm.h"

namespace kiln {
namespace {

// A planned float32 value in plain layout, or null.
const Slot* plain_float(const PlanState& state, const std::string& name) {
  const Slot* slot = state.planned(name);
  return slot != nullptr && slot->layout == Layout::plain && slot->info.dtype == DType::f32 ? slot : nullptr;
}

struct NormMatch {
  std::vector<const Node*> nodes;  // every node of the LayerNorm
  std::string scale;
  std::string bias;
  float epsilon = 1e-5f;
  std::string output;
};

// The LayerNorm over the last axis that alone reads `sum` (of `info`), in either form.
std::optional<NormMatch> layer_norm_of(const PlanState& state, const std::string& sum,
                                       const TensorInfo& info) {
  for (const ValueInfo& output : state.graph.outputs) {
    if (output.name == sum) return std::nullopt;
  }
  const auto readers = state.readers.find(sum);
  if (readers == state.readers.end()) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(info.shape.size());
  NormMatch match;
  if (readers->second.size() == 1) {
    const Node& norm = state.graph.nodes[readers->second[0]];
    if (!is_onnx_op(&norm, "LayerNormalization") || norm.inputs.size() != 3 || norm.inputs[0] != sum)
      return std::nullopt;
    const int64_t axis = norm.attributes.get_int("axis", -1);
    if (axis != -1 && axis != rank - 1) return std::nullopt;
    // The statistics outputs (training) must be absent.
    for (size_t i = 1; i < norm.outputs.size(); ++i) {
      if (!norm.outputs[i].empty()) return std::nullopt;
    }
    match.nodes = {&norm};
    match.scale = norm.inputs[1];
    match.bias = norm.inputs[2];
    match.epsilon = norm.attributes.get_float("epsilon", 1e-5f);
    match.output = norm.outputs[0];
  } else if (readers->second.size() == 2) {
    // Decomposed: ReduceMean(sum) and Sub(sum, mean) are its two readers.
    for (size_t index : readers->second) {
      const Node& mean = state.graph.nodes[index];
      if (!is_onnx_op(&mean, "ReduceMean")) continue;
      std::optional<LayerNormMatch> decomposed = match_layer_norm(state, mean, info);
      if (!decomposed) return std::nullopt;
      match.nodes = {&mean};
      match.nodes.insert(match.nodes.end(), decomposed->nodes.begin(), decomposed->nodes.end());
      match.scale = decomposed->scale;
      match.bias = decomposed->bias;
      match.epsilon = decomposed->epsilon;
      match.output = decomposed->nodes.back()->outputs[0];
    }
    if (match.nodes.empty()) return std::nullopt;
  } else {
    return std::nullopt;
  }
  for (const std::string& name : {match.scale, match.bias}) {
    const Slot* slot = plain_float(state, name);
    if (slot == nullptr || !slot->info.is_constant() || slot->info.shape != Shape{info.shape.back()})
      return std::nullopt;
  }
  return match;
}

}  // namespace

bool plan_residual_layer_norm(PlanState& state, const Node& node) {
  if (!state.settings.on("mha_fastpath") || !is_default_domain(node.domain)) return false;
  const Node* transpose = nullptr;
  const Node* add = &node;
  if (node.op_type == "Transpose") {
    if (node.inputs.size() != 1 || node.outputs.size() != 1 ||
        node.attributes.get_ints("perm") != std::vector<int64_t>{1, 0, 2})
      return false;
    transpose = &node;
    add = sole_reader(state, node.outputs[0]);
  }
  if (!is_onnx_op(add, "Add") || add->inputs.size() != 2 || add->outputs.size() != 1 ||
      add->inputs[0] == add->inputs[1])
    return false;
  // x: what the transposition reads, or the Add's first operand; the residual: the other operand.
  const std::string x = transpose != nullptr ? transpose->inputs[0] : add->inputs[0];
  const std::string residual =
      transpose == nullptr ? add->inputs[1]
                           : (add->inputs[0] == transpose->outputs[0] ? add->inputs[1] : add->inputs[0]);
  const Slot* x_slot = plain_float(state, x);
  const Slot* residual_slot = plain_float(state, residual);
  if (x_slot == nullptr || residual_slot == nullptr) return false;
  const Shape& shape = residual_slot->info.shape;
  if (shape.empty() || (transpose != nullptr && shape.size() != 3)) return false;
  const Shape x_shape = transpose != nullptr ? Shape{shape[1], shape[0], shape[2]} : shape;
  if (x_slot->info.shape != x_shape) return false;  // a broadcast Add stays as it is
  const TensorInfo sum_info{DType::f32, shape, {}};
  const std::optional<NormMatch> norm = layer_norm_of(state, add->outputs[0], sum_info);
  if (!norm) return false;

  NodeForm form;
  form.op_type = std::string(kResidualLayerNormOp);
  form.attributes = std::make_unique<Attributes>();
  form.attributes->set_float("epsilon", norm->epsilon);
  form.attributes->set_int("swap_leading", transpose != nullptr ? 1 : 0);
  form.request.op = state.op_spec_without_inputs(node);
  form.request.options = state.backend_options;
  form.request.op.op_type = form.op_type;
  form.request.op.opset = 1;
  form.request.op.attributes = form.attributes.get();
  for (const std::string& name : {x, residual, norm->scale, norm->bias}) {
    const int slot = state.slot_of(name);
    form.input_slots.push_back(slot);
    form.request.op.inputs.push_back(state.slots[static_cast<size_t>(slot)].info);
    form.request.input_layouts.push_back(Layout::plain);
  }
  form.outputs = {sum_info};
  form.output_names = {norm->output};
  if (transpose != nullptr) form.fused.push_back(add);
  form.fused.insert(form.fused.end(), norm->nodes.begin(), norm->nodes.end());

  // No backend for it (a preference that leaves native out): the nodes are planned as exported.
  return add_step_if_taken(state, std::move(form));
}

}  // namespace kiln
