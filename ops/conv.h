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
// The geometry alone, from the X and W inputs at these positions (the quantized convolutions keep
// theirs elsewhere); checks shapes and attributes, not dtypes or bias.
ConvParams conv_geometry(const OpSpec& spec, int x_input, int w_input);

// The share of a convolution's multiply-adds whose tap lands inside the input; the rest multiply
// padding. Below 1 where a dilation is wide against the map (DeepLab's dilation 12 on 14x14: 0.18).
double live_tap_share(const std::vector<int64_t>& input_spatial, const WindowParams& window);

// At or below this share a convolution multiplies each tap over only the positions where it lands
// inside the input (native's per-tap products) instead of a direct kernel that multiplies the zeros.
inline constexpr double kMostlyPaddingShare = 0.5;

// ConvTranspose: X [N, C, spatial...], W [C, M / group, kernel...], B [M]. Each input pixel scatters
// its kernel-sized patch into the output, `strides` apart; pads crop the full result.
struct ConvTransposeParams {
  int64_t batch = 0;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t group = 1;
  std::vector<int64_t> input_spatial;
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads_begin;
  std::vector<int64_t> pads_end;
  std::vector<int64_t> output_padding;  // extra output at the end of each dim (only bias reaches it)
  std::vector<int64_t> output;          // output size per spatial dim
  bool has_bias = false;
};

ConvTransposeParams conv_transpose_params(const OpSpec& spec);

// Col2Im (opset 18): X [N, C * prod(block_shape), L] holds the patch of each of the L sliding-window
// positions; the image [N, C, image_shape...] is their sum. The geometry is ConvTranspose's with one
// input pixel per window position (input_spatial: windows per dim; kernel: block_shape).
ConvTransposeParams col2im_params(const OpSpec& spec);

}  // namespace kiln
