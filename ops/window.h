// Sliding-window geometry shared by Conv and the pooling ops: kernel, strides, dilations, pads
// (explicit or auto_pad) and the resulting output size per spatial dim.
#pragma once

#include <vector>

#include "ops/op_spec.h"

namespace kiln {

struct WindowParams {
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads_begin;
  std::vector<int64_t> pads_end;
  std::vector<int64_t> output;  // output size per spatial dim
};

// `spatial` are the input's spatial dims; `kernel` the window size (from kernel_shape or the
// weights). Reads strides, dilations, pads and auto_pad from the node; `ceil_mode` rounds the
// output size up (pooling only). Throws kiln::Error naming the bad attribute.
WindowParams window_params(const OpSpec& spec, const std::vector<int64_t>& spatial, std::vector<int64_t> kernel,
                           bool ceil_mode);

}  // namespace kiln
