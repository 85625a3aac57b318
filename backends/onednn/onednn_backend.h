// The oneDNN backend: convolutions, matmuls, pooling, eltwise, binary, concat, softmax and layer
// normalization on oneDNN's JIT kernels, with channels-last activations and weights prepacked at
// plan time.
#pragma once

#include <memory>

#include "backends/backend.h"

namespace kiln {

const Backend& onednn_backend();

// A kernel converting a float32 value of logical `shape` between layouts, for the planner's
// reorder steps (layouts other than plain only come from oneDNN kernels).
std::unique_ptr<Kernel> make_layout_reorder(const Shape& shape, Layout from, Layout to);

}  // namespace kiln
