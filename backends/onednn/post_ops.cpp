#include "backends/onednn/post_ops.h"

#include "backends/onednn/onednn_common.h"
#include "core/error.h"

namespace kiln::onednn {

Eltwise eltwise_for(const PostOp& op) {
  switch (op.kind) {
    case PostOp::Kind::relu:
      return {dnnl::algorithm::eltwise_relu, 0.0f, 0.0f};
    case PostOp::Kind::leaky_relu:
      return {dnnl::algorithm::eltwise_relu, op.alpha, 0.0f};
    case PostOp::Kind::clip:
      return {dnnl::algorithm::eltwise_clip_v2, op.alpha, op.beta};
    case PostOp::Kind::sigmoid:
      return {dnnl::algorithm::eltwise_logistic, 0.0f, 0.0f};
    case PostOp::Kind::tanh:
      return {dnnl::algorithm::eltwise_tanh, 0.0f, 0.0f};
    case PostOp::Kind::gelu_erf:
      return {dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f};
    case PostOp::Kind::bias:
    case PostOp::Kind::sum:
      break;
  }
  KILN_ASSERT(false);  // sums and biases are not eltwise ops
  return {};
}

dnnl::primitive_attr make_attr(const std::vector<PostOp>& post_ops) {
  dnnl::post_ops chain;
  for (const PostOp& op : post_ops) {
    if (op.kind == PostOp::Kind::sum) {
      chain.append_sum(1.0f);
    } else if (op.kind == PostOp::Kind::bias) {
      continue;  // kernels take a fused bias as the primitive's own bias argument
    } else {
      const Eltwise eltwise = eltwise_for(op);
      chain.append_eltwise(1.0f, eltwise.algorithm, eltwise.alpha, eltwise.beta);
    }
  }
  dnnl::primitive_attr attr = primitive_attributes();
  attr.set_post_ops(chain);
  return attr;
}

std::string post_ops_suffix(const std::vector<PostOp>& post_ops) {
  std::string suffix;
  for (const PostOp& op : post_ops) suffix += std::string("+") + post_op_name(op.kind);
  return suffix;
}

int sum_input(const std::vector<PostOp>& post_ops) {
  for (const PostOp& op : post_ops) {
    if (op.kind == PostOp::Kind::sum) return op.input;
  }
  return -1;
}

}  // namespace kiln::onednn
