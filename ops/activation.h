// Activations a convolution or matmul can apply to its own result (as a fused post-op), and that
// oneDNN runs as one eltwise primitive: Relu, LeakyRelu, Clip with plan-time bounds, Sigmoid, Tanh.
#pragma once

#include <optional>

#include "ops/op_spec.h"

namespace kiln {

// The node as a post-op, or nothing when it is not such an activation (other ops, a Clip whose
// bounds are only known at run time, a non-float input).
std::optional<PostOp> activation_post_op(const OpSpec& spec);

}  // namespace kiln
