// The Winograd backend: ungrouped stride-1 3 x 3 convolutions with fewer multiplies, by F(4x4, 3x3)
// and F(2x2, 3x3) (backends/winograd/winograd_conv.h), channels-last like oneDNN's, so choosing it
// adds no layout conversions. Which convolutions it takes is the conv_algorithm setting:
//   direct    none;
//   winograd  every one it can run, with the tile its cost model predicts faster;
//   auto      those where a tile stays within kAutoErrorBound of a float64 convolution on the
//             layer's own filters, or within the error planning's budget gave the layer
//             (KernelRequest::max_error, graph/error_budget.h), and, where an optimized direct kernel
//             (oneDNN's) would run the layer instead, its cost model (cost_model.h) predicts at most
//             kAutoMaxShare of that kernel's time.
// Accuracy is measured per layer at plan time, speed predicted from the shape: no choice depends on
// a timing, so every process plans the same. Under autotune each allowed tile is offered and timed
// (docs/backends.md, "Winograd").
#pragma once

#include <cstdint>

#include "backends/base/backend.h"

namespace kiln {

const Backend& winograd_backend();

// Its options: the conv_algorithm setting.
struct WinogradOptions final : BackendOptions {
  ConvAlgorithm conv_algorithm = ConvAlgorithm::automatic;
};

namespace winograd {

// The fewest input and output channels it takes: below, the products are too thin to pay for
// the transforms.
inline constexpr int64_t kMinChannels = 16;

}  // namespace winograd
}  // namespace kiln
