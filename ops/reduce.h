// Reduction parameters shared by inference and kernels.
#pragma once

#include <vector>

#include "ops/op_spec.h"

namespace kiln {

struct ReduceParams {
  std::vector<bool> reduced;  // per input dim
  bool keepdims = true;
  Shape output;
};

// Reduce* ops: axes from the attribute, or (ReduceSum from opset 13) the optional input; empty axes
// reduce everything unless noop_with_empty_axes. ArgMax/ArgMin: one axis.
ReduceParams reduce_params(const OpSpec& spec);

}  // namespace kiln
