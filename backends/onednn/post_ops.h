// Fused post-ops as oneDNN primitive attributes.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "backends/base/post_op.h"

namespace kiln::onednn {

struct Eltwise {
  dnnl::algorithm algorithm = dnnl::algorithm::undef;
  float alpha = 0;
  float beta = 0;
};

// The eltwise algorithm computing activation `op` (any kind but sum).
Eltwise eltwise_for(const PostOp& op);

// Attributes for a primitive: primitive_attributes() and `post_ops` in order.
dnnl::primitive_attr make_attr(const std::vector<PostOp>& post_ops);
// "+sum+relu": appended to kernel names so plans show what was fused.
std::string post_ops_suffix(const std::vector<PostOp>& post_ops);
// The input index of the sum post-op, or -1.
int sum_input(const std::vector<PostOp>& post_ops);

}  // namespace kiln::onednn
