// Parameters shared by the data-movement ops' inference and their native kernels.
#pragma once

#include <vector>

#include "ops/op_spec.h"

namespace kiln {

// Split sizes along the axis: attribute before opset 13, optional input after; equal parts when
// absent.
std::vector<int64_t> split_sizes(const OpSpec& spec, int64_t axis, int64_t dim);

// A normalized Slice: for every input dim, the first index, the step and the output size.
struct SliceParams {
  std::vector<int64_t> starts;
  std::vector<int64_t> steps;
  Shape output;
};
SliceParams slice_params(const OpSpec& spec);

// Transpose's permutation (default: reversed dims), validated.
std::vector<int64_t> transpose_perm(const OpSpec& spec);

// Pad: per-dim pads (begin..., end...), mode ("constant", "reflect", "edge").
struct PadParams {
  std::vector<int64_t> pads;
  std::string mode;
};
PadParams pad_params(const OpSpec& spec);

}  // namespace kiln
