// Resize and Upsample: how each output coordinate maps back into the input, parsed once for shape
// inference and kernels. Every opset's defaults are resolved here, so a kernel sees one description.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op_spec.h"

namespace kiln {

enum class ResizeMode { nearest, linear, cubic };

// coordinate_transformation_mode: how output coordinate x maps to input coordinate x_original.
enum class CoordinateTransform {
  half_pixel,            // (x + 0.5) / scale - 0.5
  half_pixel_symmetric,  // half_pixel, centred when the output size was rounded (opset 19)
  pytorch_half_pixel,    // half_pixel, but 0 when the output has length 1
  align_corners,         // x * (in - 1) / (out - 1)
  asymmetric,            // x / scale (Upsample, and Resize before opset 11)
  tf_half_pixel_for_nn,  // (x + 0.5) / scale
  tf_crop_and_resize,    // through the region of interest; outside it, extrapolation_value
};

// nearest_mode: which input pixel a fractional x_original picks.
enum class NearestRounding {
  round_prefer_floor,
  round_prefer_ceil,
  floor,
  ceil,
  simple,  // Upsample and Resize-10: floor when enlarging, ceil when shrinking
};

struct ResizeParams {
  ResizeMode mode = ResizeMode::nearest;
  CoordinateTransform transform = CoordinateTransform::half_pixel;
  NearestRounding rounding = NearestRounding::round_prefer_floor;
  float cubic_coeff_a = -0.75f;
  bool exclude_outside = false;
  float extrapolation_value = 0.0f;
  bool antialias = false;     // linear and cubic widen their filter by 1 / scale when shrinking
  std::vector<float> scales;  // per dim: output / input as the model gives it (or as sizes imply)
  std::vector<float> roi;     // tf_crop_and_resize: starts of every dim, then ends (normalised)
  Shape output;
};

// Parses Resize (opsets 10, 11, 13, 18, 19) or Upsample (7, 9). Scales, sizes and roi must be known
// at plan time. Throws kiln::Error naming the attribute or input that is wrong.
ResizeParams resize_params(const OpSpec& spec);

// The input coordinate output coordinate `x` of one dim maps to (may lie outside [0, in - 1]).
// As in ONNX's reference, the transforms see the resized length as in * scale before rounding;
// `out` is the rounded size. `roi_start`/`roi_end` are only read by tf_crop_and_resize.
float original_coordinate(CoordinateTransform transform, int64_t x, float scale, int64_t in, int64_t out,
                          float roi_start, float roi_end);

}  // namespace kiln
