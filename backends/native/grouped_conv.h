// Grouped 3x3 convolutions with four or eight input and output channels per group (ResNeXt-50's
// first two stages, ResNeXt-101 32x8d's first), read and written channels-last, on AVX-512. oneDNN
// 2.6 runs these on its older jit kernel far below the machine's peak. This kernel holds a group's
// weights of one tap in whole vectors (lanes: output channel x input channel: one vector for 4 x 4,
// four for 8 x 8), multiplies them by the group's input channels broadcast across the lanes, and
// sums the lanes of one output channel once per output pixel. Each broadcast serves the three
// horizontal taps of three neighbouring output pixels.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "backends/base/kernel.h"
#include "backends/base/kernel_request.h"
#include "backends/base/refusal.h"

namespace kiln::native {

// Why the channels-last grouped kernel cannot run `request`, or nothing when it can: float32 Conv
// with constant weights (and bias), two or more groups of four or eight channels in and as many out
// (channels in 16s for groups of four), a 3x3 window at stride 1, dilation 1 and padding 1 on every
// side, channels-last input, fused post-ops only Relu and Clip, and the AVX-512 tier in effect.
// oneDNN refuses the same convolutions while this says nothing and native may take the node.
std::optional<Refusal> grouped_conv_refusal(const KernelRequest& request);

KernelOrReason make_channels_last_grouped_conv(const KernelRequest& request,
                                               std::span<const TensorInfo> outputs);

}  // namespace kiln::native
