// Parameters shared by the data-movement ops' inference and their native kernels.
#pragma once

#include <string>
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

// Pad: per-dim pads (begin..., end...) for every dim (opset 18's axes expanded), mode ("constant",
// "reflect", "edge", or opset 19's "wrap"). Negative pads crop.
struct PadParams {
  std::vector<int64_t> pads;
  std::string mode;
};
PadParams pad_params(const OpSpec& spec);

// DepthToSpace / SpaceToDepth: the block size, and for DepthToSpace whether the channel index is
// read column-row-depth (mode CRD) rather than depth-column-row (DCR, the default).
struct SpaceDepthParams {
  int64_t block = 1;
  bool column_row_depth = false;
};
SpaceDepthParams space_depth_params(const OpSpec& spec);

}  // namespace kiln
