// ShuffleNet's channel shuffle, Reshape [N, C, H, W] -> [N, g, C/g, H, W], Transpose (0, 2, 1, 3, 4),
// Reshape back to [N, C, H, W], planned as one ChannelShuffle step (ops/channel_shuffle.h). As
// exported, the Transpose runs in plain layout, so a channels-last value between convolutions is
// converted to plain and back around every shuffle (34 Reorders in shufflenet_v2_x1_0); the one step
// permutes the channels in whichever layout the value is stored.
#include "graph/passes/fusion_patterns.h"
#include "graph/passes/passes.h"
#include "ops/channel_shuffle.h"

namespace kiln {
namespace {

// The shape Reshape(input of `in`, `reshape`'s planned constant shape) produces (0 copies the input's
// dim, -1 takes what is left), or nothing when the shape is not a plan-time constant or not valid.
std::optional<Shape> reshaped(const PlanState& state, const Node& reshape, const Shape& in) {
  if (reshape.inputs.size() != 2 || reshape.outputs.size() != 1 ||
      reshape.attributes.get_int("allowzero", 0) != 0)
    return std::nullopt;
  const Slot* target = state.planned(reshape.inputs[1]);
  if (target == nullptr || !target->info.is_constant() || target->info.value.dtype() != DType::i64)
    return std::nullopt;
  Shape shape = target->info.value.to_int64_vector();
  int64_t known = 1, inferred = -1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) {
      if (d >= in.size()) return std::nullopt;
      shape[d] = in[d];
    }
    if (shape[d] == -1) {
      if (inferred >= 0) return std::nullopt;
      inferred = static_cast<int64_t>(d);
    } else if (shape[d] < 0) {
      return std::nullopt;
    } else if (__builtin_mul_overflow(known, shape[d], &known)) {
      return std::nullopt;  // a malformed target no input's element count can match
    }
  }
  const int64_t total = checked_numel(in);
  if (inferred >= 0) {
    if (known == 0 || total % known != 0) return std::nullopt;
    shape[static_cast<size_t>(inferred)] = total / known;
  } else if (known != total) {
    return std::nullopt;
  }
  return shape;
}

}  // namespace

bool plan_channel_shuffle(PlanState& state, const Node& node) {
  if (!is_onnx_op(&node, "Reshape") || node.inputs.size() != 2 || node.outputs.size() != 1) return false;
  const Slot* x = state.planned(node.inputs[0]);
  // A plan-time constant is left to constant folding.
  if (x == nullptr || x->info.dtype != DType::f32 || x->info.shape.size() != 4 || x->info.is_constant())
    return false;
  // Copies: plan_ahead below adds slots, which may move `x`.
  const int x_slot = state.slot_of(node.inputs[0]);
  const Shape in = x->info.shape;
  const std::optional<Shape> grouped = reshaped(state, node, in);
  if (!grouped || grouped->size() != 5 || (*grouped)[0] != in[0] || (*grouped)[1] * (*grouped)[2] != in[1] ||
      (*grouped)[3] != in[2] || (*grouped)[4] != in[3])
    return false;
  const Node* transpose = sole_reader(state, node.outputs[0]);
  if (!is_onnx_op(transpose, "Transpose") || transpose->outputs.size() != 1 ||
      transpose->attributes.get_ints("perm") != std::vector<int64_t>{0, 2, 1, 3, 4})
    return false;
  const Node* back = sole_reader(state, transpose->outputs[0]);
  // The shape Reshape restores may be computed after the Transpose in the file's order (from the
  // shuffled value's Shape): plan it ahead.
  if (!is_onnx_op(back, "Reshape") || back->inputs.size() != 2 || !plan_ahead(state, back->inputs[1]))
    return false;
  const Shape swapped{in[0], (*grouped)[2], (*grouped)[1], in[2], in[3]};
  const std::optional<Shape> restored = reshaped(state, *back, swapped);
  if (!restored || *restored != in) return false;

  NodeForm form;
  form.op_type = std::string(kChannelShuffleOp);
  form.attributes = std::make_unique<Attributes>();
  form.attributes->set_int("groups", (*grouped)[1]);
  form.request.op = state.op_spec_without_inputs(node);
  form.request.options = state.backend_options;
  form.request.op.op_type = form.op_type;
  form.request.op.opset = 1;
  form.request.op.attributes = form.attributes.get();
  const Slot& x_now = state.slots[static_cast<size_t>(x_slot)];
  form.input_slots = {x_slot};
  form.request.op.inputs = {x_now.info};
  form.request.input_layouts = {x_now.layout};
  form.outputs = {TensorInfo{DType::f32, in, {}}};
  form.output_names = {back->outputs[0]};
  form.fused = {transpose, back};

  // No backend for it (a preference that leaves native out): the nodes are planned as exported.
  return add_step_if_taken(state, std::move(form));
}

}  // namespace kiln
