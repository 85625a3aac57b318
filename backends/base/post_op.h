// A node fused into the convolution or matrix product before it: applied to the product's result in
// order, inside the kernel, before the result is stored. The planner's fusion pass proposes them;
// a backend takes them or says why not (backends/registry.h says which backend fuses what).
#pragma once

#include <optional>
#include <string>

#include "ops/op_spec.h"

namespace kiln {

struct PostOp {
  // bias: a constant added per output column (MatMul + Add); gelu_erf: x * (1 + erf(x / sqrt 2)) / 2
  // matched from the five nodes PyTorch exports for GELU; sum: a residual tensor added elementwise.
  enum class Kind { relu, leaky_relu, clip, sigmoid, tanh, gelu_erf, bias, sum };
  Kind kind = Kind::relu;
  float alpha = 0;        // leaky_relu slope; clip minimum
  float beta = 0;         // clip maximum
  int input = -1;         // sum, bias: index in the request's inputs of the tensor added to the result
  std::string node_name;  // the fused node, for plans and verbose lines
  std::string op_type;
};

const char* post_op_name(PostOp::Kind kind);

// The activations a product can apply to its own result: Relu, LeakyRelu, Clip with plan-time
// bounds, Sigmoid, Tanh. The node as a post-op, or nothing for other ops, a Clip whose bounds are
// only known at run time, or a non-float input.
std::optional<PostOp> activation_post_op(const OpSpec& spec);

}  // namespace kiln
