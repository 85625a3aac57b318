// Conv's parameters, parsed once for shape inference and kernels.
#pragma once

#include "ops/window.h"

namespace kiln {

struct ConvParams {
  int64_t batch = 0;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t group = 1;
  std::vector<int64_t> input_spatial;
  WindowParams window;
  bool has_bias = false;
};

ConvParams conv_params(const OpSpec& spec);

}  // namespace kiln
