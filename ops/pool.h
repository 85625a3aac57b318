// Pooling parameters shared by inference and kernels.
#pragma once

#include "ops/window.h"

namespace kiln {

struct PoolParams {
  std::vector<int64_t> input_spatial;
  WindowParams window;
  bool count_include_pad = false;  // AveragePool
  int64_t storage_order = 0;       // MaxPool indices: 0 row-major, 1 column-major
  double p = 2;                    // LpPool: the norm's order
};

PoolParams pool_params(const OpSpec& spec);

// LpPool's and GlobalLpPool's order p: an int attribute, a float one at opset 1.
double lp_order(const OpSpec& spec);

// MaxUnpool scatters X into the tensor MaxPool's indices address, `unpooled` (N, C and per spatial
// dim (in - 1) * stride + kernel - pads), which sits at the origin of `output`: the same shape, or
// larger where the output_shape input asks for it.
struct MaxUnpoolParams {
  Shape unpooled;
  Shape output;
};

MaxUnpoolParams max_unpool_params(const OpSpec& spec);

}  // namespace kiln
