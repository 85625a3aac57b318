#include "backends/base/post_op.h"

#include <limits>

namespace kiln {
namespace {

PostOp post_op_of(PostOp::Kind kind) {
  PostOp op;
  op.kind = kind;
  return op;
}

// Clip's bounds are attributes before opset 11 and optional scalar inputs from 11 on.
std::optional<PostOp> clip_post_op(const OpSpec& spec) {
  PostOp op = post_op_of(PostOp::Kind::clip);
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

const char* post_op_name(PostOp::Kind kind) {
  switch (kind) {
    case PostOp::Kind::relu:
      return "relu";
    case PostOp::Kind::leaky_relu:
      return "leaky_relu";
    case PostOp::Kind::clip:
      return "clip";
    case PostOp::Kind::sigmoid:
      return "sigmoid";
    case PostOp::Kind::tanh:
      return "tanh";
    case PostOp::Kind::gelu_erf:
      return "gelu_erf";
    case PostOp::Kind::bias:
      return "bias";
    case PostOp::Kind::sum:
      return "sum";
  }
  return "?";
}

std::optional<PostOp> activation_post_op(const OpSpec& spec) {
  if (!is_default_domain(spec.domain)) return std::nullopt;
  if (spec.inputs.empty() || spec.inputs[0].dtype != DType::f32) return std::nullopt;
  const std::string& op = spec.op_type;
  std::optional<PostOp> result;
  if (op == "Relu") {
    result = post_op_of(PostOp::Kind::relu);
  } else if (op == "LeakyRelu") {
    result = post_op_of(PostOp::Kind::leaky_relu);
    result->alpha = spec.attrs().get_float("alpha", 0.01f);
  } else if (op == "Clip") {
    result = clip_post_op(spec);
  } else if (op == "Sigmoid") {
    result = post_op_of(PostOp::Kind::sigmoid);
  } else if (op == "Tanh") {
    result = post_op_of(PostOp::Kind::tanh);
  } else if (op == "Gelu" && spec.attrs().get_string("approximate", "none") == "none") {
    result = post_op_of(PostOp::Kind::gelu_erf);  // opset 20's op, the 5-node pattern's result
  }
  if (result) {
    result->node_name = spec.node_name;
    result->op_type = spec.op_type;
  }
  return result;
}

}  // namespace kiln
