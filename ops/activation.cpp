#include "ops/activation.h"

#include <limits>

namespace kiln {
namespace {

// Clip's bounds are attributes before opset 11 and optional scalar inputs from 11 on.
std::optional<PostOp> clip_post_op(const OpSpec& spec) {
  PostOp op{PostOp::Kind::clip};
  op.alpha = -std::numeric_limits<float>::infinity();
  op.beta = std::numeric_limits<float>::infinity();
  if (spec.opset < 11) {
    op.alpha = spec.attrs().get_float("min", op.alpha);
    op.beta = spec.attrs().get_float("max", op.beta);
    return op;
  }
  for (int index : {1, 2}) {
    if (!spec.has_input(index)) continue;
    const TensorInfo& bound = spec.inputs[static_cast<size_t>(index)];
    if (!bound.is_constant() || bound.value.numel() != 1) return std::nullopt;
    (index == 1 ? op.alpha : op.beta) = static_cast<float>(bound.value.double_at(0));
  }
  return op;
}

}  // namespace

std::optional<PostOp> activation_post_op(const OpSpec& spec) {
  if (!spec.domain.empty() && spec.domain != "ai.onnx") return std::nullopt;
  if (spec.inputs.empty() || spec.inputs[0].dtype != DType::f32) return std::nullopt;
  const std::string& op = spec.op_type;
  std::optional<PostOp> result;
  if (op == "Relu") {
    result = PostOp{PostOp::Kind::relu};
  } else if (op == "LeakyRelu") {
    result = PostOp{PostOp::Kind::leaky_relu};
    result->alpha = spec.attrs().get_float("alpha", 0.01f);
  } else if (op == "Clip") {
    result = clip_post_op(spec);
  } else if (op == "Sigmoid") {
    result = PostOp{PostOp::Kind::sigmoid};
  } else if (op == "Tanh") {
    result = PostOp{PostOp::Kind::tanh};
  }
  if (result) {
    result->node_name = spec.node_name;
    result->op_type = spec.op_type;
  }
  return result;
}

}  // namespace kiln
