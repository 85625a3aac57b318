// Pooling parameters shared by inference and kernels.
#pragma once

#include "ops/window.h"

namespace kiln {

struct PoolParams {
  std::vector<int64_t> input_spatial;
  WindowParams window;
  bool count_include_pad = false;  // AveragePool
  int64_t storage_order = 0;       // MaxPool indices: 0 row-major, 1 column-major
};

PoolParams pool_params(const OpSpec& spec);

}  // namespace kiln
