// The Winograd backend: ungrouped stride-1 3 x 3 convolutions with fewer multiplies, by F(4x4, 3x3)
// and F(2x2, 3x3) (backends/winograd/winograd_conv.h), channels-last like oneDNN's, so choosing it
// adds no layout conversions. Which convolutions it takes is the conv_algorithm setting:
//   direct    none;
//   winograd  every one it can run (the tiles timed against each other);
//   auto      those where a tile stays within kAutoErrorBound of a float64 convolution on the
//             layer's own filters and measures faster than the next candidate's direct kernel.
// Accuracy and speed are judged per layer, at plan time (docs/backends.md, "Winograd").
#pragma once

#include <cstdint>

#include "backends/base/backend.h"

namespace kiln {

const Backend& winograd_backend();

namespace winograd {

// The fewest input and output channels it takes: below, the products are too thin to pay for
// the transforms.
inline constexpr int64_t kMinChannels = 16;

}  // namespace winograd
}  // namespace kiln
