// Parameters of the sequence ops that kernels share with shape inference.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op_spec.h"

namespace kiln {

struct SplitToSequenceParams {
  int64_t axis = 0;
  std::vector<int64_t> sizes;  // each part's length along the axis
  bool drop_axis = false;      // no split input and keepdims=0: parts lose the axis
};

// For an input of `shape`; `split` is the split input (undefined when absent).
SplitToSequenceParams split_to_sequence_params(int64_t axis, bool keepdims, const Tensor& split,
                                               const Shape& shape);
// The node's: needs a plan-time constant split input and the input's shape.
SplitToSequenceParams split_to_sequence_params(const OpSpec& spec);

// A dtype attribute holding an ONNX TensorProto data type code ("dtype" of SequenceEmpty), or
// `fallback` when absent; throws naming the op and attribute for a code kiln has no dtype for.
DType dtype_attribute(const OpSpec& spec, const char* name, DType fallback);

}  // namespace kiln
