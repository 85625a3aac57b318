// Which tile, if any, runs a convolution faster than a direct kernel, predicted from the layer's
// shape alone: the same layer, settings and machine always get the same answer, in any process and
// at any thread count (timing at plan time did not: layers near the margin flipped between
// processes, and with them the outputs' bits). What the prediction counts, in units of one direct
// multiply-add:
//   direct    9 C K per output pixel, plus reading its C K 3x3 filters;
//   winograd  alpha^2 C K per tile (a dilated layer's phases may overhang the output with more tiles
//             than an undilated one's) in the element-wise products, run at kProductEfficiency times
//             the direct kernel's rate (above 1: a few large, regular products); the input and
//             output transforms, kTransformCost per tile element and channel; and reading alpha^2 C K
//             transformed filters, which a small output cannot amortize (resnet's 512-channel layers
//             on 7x7 outputs: 16 MiB of filters for 16 tiles), and again by every later block of
//             tiles when they are larger than L2, at kStreamCost each (fcn_resnet50's 2048-channel
//             head: 64 MiB of filters read by 14 blocks).
// A filter element read from memory costs kElementCost multiply-adds: the direct kernel's rate over
// memory bandwidth, higher with wider vectors (kStreamCost is lower: streamed, prefetched reads).
// The constants are fitted to timings of 3x3 stride-1 layers (docs/performance.md, "Winograd's cost
// model" and "Dense prediction: segmentation and U-Net (AMD Turin-like VM)").
#pragma once

#include "backends/winograd/winograd_conv.h"

namespace kiln::winograd {

struct CostEstimate {
  double winograd = 0;  // predicted, in direct multiply-adds
  double direct = 0;
  double share() const { return direct > 0 ? winograd / direct : 0; }  // of the direct kernel's time
};

// The prediction for F(tile x tile, 3x3) on `shape` under the ISA tier in effect.
CostEstimate estimate_cost(const ConvShape& shape, int tile);

// conv_algorithm auto takes a tile only where it is predicted at most this share of a direct
// convolution's time: a tie is not worth the transformed filters' memory.
inline constexpr double kAutoMaxShare = 0.9;

}  // namespace kiln::winograd
