// How far a Winograd tile strays from the exact convolution on one layer's filters: what
// conv_algorithm auto checks before it lets a layer run Winograd. The error grows with the tile
// (F(4)'s transforms have coefficients up to 8 and 1/24) and depends on the filters, so it is
// measured per layer, at plan time, instead of assumed.
#pragma once

#include <cstdint>

#include "backends/winograd/winograd_conv.h"

namespace kiln::winograd {

// conv_algorithm auto's bound on a layer's probe error. Chosen so that every model's outputs stay
// within 1e-4 of their scale with auto (docs/backends.md, "Winograd", has the measurements).
inline constexpr double kAutoErrorBound = 1e-6;

// max |winograd - float64| / max |float64| of tile F(tile x tile, 3x3) over a probe: one image of
// 2 x 2 tiles (no padding), inputs uniform in [0, 1) like a ReLU's outputs, through the filters
// `weights` (ONNX's [K, C, 3, 3]) of every output channel below 128, every (K / 64)-th above
// (64 to 127 of them), against a float64 convolution. Infinite when the result is not finite.
double probe_error(int tile, int64_t in_channels, int64_t out_channels, const float* weights);

}  // namespace kiln::winograd
