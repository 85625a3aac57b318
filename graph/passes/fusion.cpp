#include <cmath>

#include "graph/passes/fusion_patterns.h"
#include "graph/passes/passes.h"

namespace kiln {
namespace {

// The parts of a form that describe the node itself (the owned attributes of a synthesized node are
// not copied: such forms are proposed from the node alone).
NodeForm copy_of(const NodeForm& form) {
  NodeForm copy;
  copy.op_type = form.op_type;
  copy.request = form.request;
  copy.input_slots = form.input_slots;
  copy.output_names = form.output_names;
  copy.outputs = form.outputs;
  copy.fused = form.fused;
  copy.note = form.note;
  return copy;
}

// Adds a planned value as the next request input (a post-op operand); returns its index.
int append_input(const PlanState& state, NodeForm& form, const std::string& name) {
  const int slot = state.slot_of(name);
  const Slot& value = state.slots[static_cast<size_t>(slot)];
  form.request.op.inputs.push_back(value.info);
  form.request.input_layouts.resize(form.input_slots.size(), Layout::plain);
  form.request.input_layouts.push_back(value.layout);
  form.input_slots.push_back(slot);
  return static_cast<int>(form.request.op.inputs.size()) - 1;
}

// A decomposed LayerNorm starting at ReduceMean `node`, as one LayerNormalization over the last axis.
std::optional<NodeForm> layer_norm_form(const PlanState& state, const Node& node) {
  std::optional<LayerNormMatch> match = match_layer_norm(state, node);
  if (!match) return std::nullopt;
  NodeForm form;
  form.op_type = "LayerNormalization";
  form.attributes = std::make_unique<Attributes>();
  form.attributes->set_int("axis", -1);
  form.attributes->set_float("epsilon", match->epsilon);
  form.request.op = state.op_spec_without_inputs(node);
  form.request.options = state.backend_options;
  form.request.op.op_type = form.op_type;
  form.request.op.opset = 17;
  form.request.op.attributes = form.attributes.get();
  for (const std::string& name : {node.inputs[0], match->scale, match->bias}) {
    const int slot = state.slot_of(name);
    form.input_slots.push_back(slot);
    form.request.op.inputs.push_back(state.slots[static_cast<size_t>(slot)].info);
    form.request.input_layouts.push_back(state.slots[static_cast<size_t>(slot)].layout);
  }
  form.outputs = {TensorInfo{DType::f32, form.request.op.inputs[0].shape, {}}};
  form.fused = match->nodes;
  form.output_names = {form.fused.back()->outputs[0]};
  return form;
}

// Folds inference BatchNormalization `bn` (scale, B, mean, var: constants over the output channels)
// into the Conv of `form` (constant weights and bias): w' = w * s and b' = (b - mean) * s + B with
// s = scale / sqrt(var + eps). The folded weights and bias are constants of the form alone (no
// slot: add_step makes one if the kernel reads them at run time). False, leaving `form` unchanged,
// when `bn` is not such a node.
bool fold_batch_norm(const PlanState& state, const Node& bn, NodeForm& form) {
  OpSpec& conv = form.request.op;
  if (bn.op_type != "BatchNormalization" || !is_default_domain(bn.domain) || bn.inputs.size() != 5)
    return false;
  if (bn.outputs.size() != 1 || bn.attributes.get_int("training_mode", 0) != 0) return false;
  if (!conv.has_input(1) || !conv.inputs[1].is_constant() || conv.inputs[1].dtype != DType::f32) return false;
  const Tensor& weights = conv.inputs[1].value;
  const int64_t channels = weights.dim(0);
  const bool has_bias = conv.has_input(2);
  if (has_bias && (!conv.inputs[2].is_constant() || conv.inputs[2].dtype != DType::f32)) return false;
  std::vector<const float*> parameters;  // scale, B, mean, var
  for (size_t i = 1; i < 5; ++i) {
    const Slot* slot = state.planned(bn.inputs[i]);
    if (slot == nullptr || !slot->info.is_constant() || slot->info.dtype != DType::f32 ||
        slot->info.shape != Shape{channels}) {
      return false;
    }
    parameters.push_back(slot->info.value.data<float>());
  }
  const double epsilon = bn.attributes.get_float("epsilon", 1e-5f);
  Tensor folded_weights = weights.clone();
  Tensor folded_bias = Tensor::empty(DType::f32, {channels});
  const int64_t per_channel = weights.numel() / channels;
  for (int64_t c = 0; c < channels; ++c) {
    const double factor = parameters[0][c] / std::sqrt(static_cast<double>(parameters[3][c]) + epsilon);
    float* w = folded_weights.data<float>() + c * per_channel;
    for (int64_t i = 0; i < per_channel; ++i) w[i] = static_cast<float>(w[i] * factor);
    const double bias = has_bias ? conv.inputs[2].value.data<float>()[c] : 0.0;
    folded_bias.data<float>()[c] = static_cast<float>((bias - parameters[2][c]) * factor + parameters[1][c]);
  }
  conv.inputs[1].value = folded_weights;
  conv.inputs.resize(std::max<size_t>(conv.inputs.size(), 3));
  conv.inputs[2] = TensorInfo{DType::f32, {channels}, folded_bias};
  form.input_slots.resize(conv.inputs.size(), -1);
  form.input_slots[1] = -1;
  form.input_slots[2] = -1;
  return true;
}

// `node`'s spec with `first` as its first input (a value fused away, so it has no slot); nothing
// when another input is not planned yet.
std::optional<OpSpec> spec_with_first_input(const PlanState& state, const Node& node,
                                            const TensorInfo& first) {
  OpSpec spec = state.op_spec_without_inputs(node);
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (i == 0 || node.inputs[i].empty()) {
      spec.inputs.push_back(i == 0 ? TensorInfo{first.dtype, first.shape, {}} : TensorInfo{});
      continue;
    }
    const Slot* slot = state.planned(node.inputs[i]);
    if (slot == nullptr) return std::nullopt;  // computed later: cannot fuse
    spec.inputs.push_back(slot->info);
  }
  return spec;
}

// A product (`alone`) with the nodes after it that enabled backends apply as post-ops: activations
// (GELU matched from its five nodes), a MatMul's constant per-column bias, one residual Add whose
// other operand is already computed; a Conv first folds a following BatchNormalization. Each
// intermediate value must have no other reader and not be a graph output.
std::optional<NodeForm> product_with_followers(const PlanState& state, const Node& node,
                                               const NodeForm& alone) {
  if (!is_default_domain(node.domain)) return std::nullopt;
  const FusionRule offered = fusion_offered(node.op_type, state.settings);
  const TensorInfo& result = alone.outputs.at(0);
  if ((offered.post_ops == 0 && !offered.folds_batch_norm) || result.dtype != DType::f32) return std::nullopt;
  const auto fuses = [&](PostOp::Kind kind) { return has_post_op_kind(offered.post_ops, kind); };

  NodeForm form = copy_of(alone);
  std::vector<PostOp>& post_ops = form.request.post_ops;
  std::string value = node.outputs.at(0);
  if (offered.folds_batch_norm) {
    const Node* next = sole_reader(state, value);
    if (next != nullptr && fold_batch_norm(state, *next, form)) {
      form.fused.push_back(next);
      value = next->outputs[0];
    }
  }
  bool has_sum = false;
  for (;;) {
    // GELU reads its input twice, so it is matched before looking for a sole reader.
    if (std::vector<const Node*> gelu =
            fuses(PostOp::Kind::gelu_erf) ? match_gelu(state, value) : std::vector<const Node*>{};
        !gelu.empty()) {
      PostOp op;
      op.kind = PostOp::Kind::gelu_erf;
      op.node_name = gelu.back()->name;
      op.op_type = gelu.back()->op_type;
      post_ops.push_back(op);
      form.fused.insert(form.fused.end(), gelu.begin(), gelu.end());
      value = gelu.back()->outputs[0];
      continue;
    }
    const Node* next = sole_reader(state, value);
    if (next == nullptr || next->outputs.size() != 1 || next->outputs[0].empty()) break;
    const bool is_add = next->op_type == "Add" && is_default_domain(next->domain) &&
                        next->inputs.size() == 2 && next->inputs[0] != next->inputs[1];
    const std::string other = !is_add                    ? std::string()
                              : next->inputs[0] == value ? next->inputs[1]
                                                         : next->inputs[0];
    const Slot* addend = nullptr;
    if (is_add) {
      addend = state.planned(other);
      if (addend == nullptr) break;  // the other branch is planned later
    }
    PostOp op;
    op.node_name = next->name;
    op.op_type = next->op_type;
    if (is_add && fuses(PostOp::Kind::sum) && !has_sum && addend->info.dtype == DType::f32 &&
        addend->info.shape == result.shape) {
      // Conv's own inputs are X, W, B: the addend follows them even when B is absent.
      if (node.op_type == "Conv") {
        while (form.request.op.inputs.size() < 3) {
          form.request.op.inputs.emplace_back();
          form.input_slots.push_back(-1);
        }
      }
      op.kind = PostOp::Kind::sum;
      op.input = append_input(state, form, other);
      has_sum = true;
    } else if (is_add && fuses(PostOp::Kind::bias) && post_ops.empty()) {
      // A constant per-column bias becomes the product's own bias.
      const int64_t n = result.shape.empty() ? 0 : result.shape.back();
      const TensorInfo& bias = addend->info;
      if (!bias.is_constant() || bias.dtype != DType::f32 || checked_numel(bias.shape) != n ||
          (!bias.shape.empty() && bias.shape.back() != n)) {
        break;
      }
      op.kind = PostOp::Kind::bias;
      op.input = append_input(state, form, other);
    } else {
      const std::optional<OpSpec> follower = spec_with_first_input(state, *next, result);
      if (!follower) break;
      const std::optional<PostOp> activation = activation_post_op(*follower);
      if (!activation || !fuses(activation->kind)) break;
      op = *activation;
    }
    post_ops.push_back(op);
    form.fused.push_back(next);
    value = next->outputs[0];
  }
  if (form.fused.empty()) return std::nullopt;
  // The chain's last value is what the fused kernel writes; the intermediate values vanish.
  form.output_names[0] = value;
  return form;
}

}  // namespace

std::optional<NodeForm> propose_fusion(PlanState& state, const Node& node, const NodeForm& alone) {
  if (std::optional<NodeForm> layer_norm = layer_norm_form(state, node)) return layer_norm;
  return product_with_followers(state, node, alone);
}

}  // namespace kiln
