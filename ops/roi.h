// RoiAlign and MaxRoiPool: a fixed-size grid of bins pooled out of each region of interest of an
// NCHW feature map. Attributes are parsed and checked once here, for shape inference and kernels.
#pragma once

#include <cstdint>

#include "ops/op_spec.h"

namespace kiln {

enum class RoiAlignMode { avg, max };

struct RoiAlignParams {
  RoiAlignMode mode = RoiAlignMode::avg;
  int64_t output_height = 1;
  int64_t output_width = 1;
  int64_t sampling_ratio = 0;  // samples per bin side; 0: ceil(roi size / output size), per roi
  float spatial_scale = 1.0f;
  // half_pixel (opset 16's default) shifts roi corners by -0.5 pixel and keeps their size as given;
  // output_half_pixel (opset 10's only behaviour) does not shift them and makes every roi at least 1x1.
  bool half_pixel = true;
};

// Parses RoiAlign (opsets 10 and 16) and checks its inputs: X [N, C, H, W], rois [num_rois, 4] as
// (x1, y1, x2, y2) in X's dtype, batch_indices int64 [num_rois]. Throws kiln::Error naming what is wrong.
RoiAlignParams roi_align_params(const OpSpec& spec);

struct MaxRoiPoolParams {
  int64_t pooled_height = 1;
  int64_t pooled_width = 1;
  float spatial_scale = 1.0f;
};

// Parses MaxRoiPool (opset 1) and checks its inputs: X [N, C, H, W], rois [num_rois, 5] as
// (batch_index, x1, y1, x2, y2) in X's dtype. Throws kiln::Error naming what is wrong.
MaxRoiPoolParams max_roi_pool_params(const OpSpec& spec);

// RoiAlign refuses to take more samples than this per bin side (sampling_ratio, or a roi's adaptive
// count at run time): a feature map is far smaller, so such a roi's coordinates are not pixels, and
// sampling it would run for hours.
inline constexpr int64_t kMaxRoiSamplesPerSide = int64_t{1} << 16;

}  // namespace kiln
