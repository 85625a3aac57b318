// RoiAlign (opsets 10 and 16) and MaxRoiPool (opset 1): attributes and the output shape
// [num_rois, C, output height, output width].
#include "ops/roi.h"

#include <cmath>
#include <span>
#include <string>

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

void expect_feature_map(const OpSpec& spec) {
  const TensorInfo& x = spec.input(0);
  KILN_CHECK(is_floating(x.dtype), type_mismatch, spec.op_type, " input X must be floating point, got ",
             dtype_name(x.dtype));
  KILN_CHECK(x.shape.size() == 4, invalid_argument, spec.op_type,
             " input X must have rank 4 (N, C, H, W), got shape ", shape_to_string(x.shape));
}

// rois: [num_rois, columns] in X's dtype; `layout` names the columns for the error.
void expect_rois(const OpSpec& spec, int64_t columns, const char* layout) {
  const TensorInfo& rois = spec.input(1);
  const DType dtype = spec.input(0).dtype;
  KILN_CHECK(rois.dtype == dtype, type_mismatch, spec.op_type, " input rois must have X's dtype ",
             dtype_name(dtype), ", got ", dtype_name(rois.dtype));
  KILN_CHECK(rois.shape.size() == 2 && rois.shape[1] == columns, invalid_argument, spec.op_type,
             " input rois must have shape [num_rois, ", columns, "] (", layout, " per roi), got ",
             shape_to_string(rois.shape));
}

float spatial_scale(const OpSpec& spec) {
  const float scale = spec.attrs().get_float("spatial_scale", 1.0f);
  KILN_CHECK(std::isfinite(scale) && scale > 0, invalid_model, spec.op_type, " spatial_scale ", scale,
             " must be a positive finite number");
  return scale;
}

int64_t positive_size(const OpSpec& spec, const char* name, int64_t value) {
  KILN_CHECK(value >= 1, invalid_model, spec.op_type, " ", name, " ", value, " must be at least 1");
  return value;
}

std::vector<TensorInfo> infer_roi_align(const OpSpec& spec) {
  const RoiAlignParams params = roi_align_params(spec);
  const Shape& x = spec.input(0).shape;
  return {TensorInfo{
      spec.input(0).dtype, {spec.input(1).shape[0], x[1], params.output_height, params.output_width}, {}}};
}

std::vector<TensorInfo> infer_max_roi_pool(const OpSpec& spec) {
  const MaxRoiPoolParams params = max_roi_pool_params(spec);
  const Shape& x = spec.input(0).shape;
  return {TensorInfo{
      spec.input(0).dtype, {spec.input(1).shape[0], x[1], params.pooled_height, params.pooled_width}, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"RoiAlign", infer_roi_align, 10},
    {"MaxRoiPool", infer_max_roi_pool, 1},
};

}  // namespace

RoiAlignParams roi_align_params(const OpSpec& spec) {
  expect_inputs(spec, 3, 3);
  expect_feature_map(spec);
  expect_rois(spec, 4, "x1, y1, x2, y2");
  const TensorInfo& batch_indices = spec.input(2);
  KILN_CHECK(batch_indices.dtype == DType::i64, type_mismatch,
             "RoiAlign input batch_indices must be int64, got ", dtype_name(batch_indices.dtype));
  const int64_t num_rois = spec.input(1).shape[0];
  KILN_CHECK(batch_indices.shape.size() == 1 && batch_indices.shape[0] == num_rois, invalid_argument,
             "RoiAlign input batch_indices must have shape [", num_rois, "] (one per roi), got ",
             shape_to_string(batch_indices.shape));

  RoiAlignParams params;
  const std::string mode = spec.attrs().get_string("mode", "avg");
  KILN_CHECK(mode == "avg" || mode == "max", invalid_model, "RoiAlign mode '", mode,
             "' is not one of avg, max");
  params.mode = mode == "avg" ? RoiAlignMode::avg : RoiAlignMode::max;
  params.output_height = positive_size(spec, "output_height", spec.attrs().get_int("output_height", 1));
  params.output_width = positive_size(spec, "output_width", spec.attrs().get_int("output_width", 1));
  params.sampling_ratio = spec.attrs().get_int("sampling_ratio", 0);
  KILN_CHECK(params.sampling_ratio >= 0 && params.sampling_ratio <= kMaxRoiSamplesPerSide, invalid_model,
             "RoiAlign sampling_ratio ", params.sampling_ratio, " must be in [0, ", kMaxRoiSamplesPerSide,
             "] (0: adapt to each roi's size)");
  params.spatial_scale = spatial_scale(spec);
  // Opset 10 had no choice; its behaviour is what opset 16 named output_half_pixel.
  if (spec.opset >= 16) {
    const std::string transform = spec.attrs().get_string("coordinate_transformation_mode", "half_pixel");
    KILN_CHECK(transform == "half_pixel" || transform == "output_half_pixel", invalid_model,
               "RoiAlign coordinate_transformation_mode '", transform,
               "' is not one of half_pixel, output_half_pixel");
    params.half_pixel = transform == "half_pixel";
  } else {
    params.half_pixel = false;
  }

  const Shape& x = spec.input(0).shape;
  const bool produces_values = num_rois > 0 && x[1] > 0;
  KILN_CHECK(!produces_values || (x[2] > 0 && x[3] > 0), invalid_argument,
             "RoiAlign input X has an empty spatial dim (shape ", shape_to_string(x),
             "), but rois must be sampled from it");
  return params;
}

MaxRoiPoolParams max_roi_pool_params(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  expect_feature_map(spec);
  expect_rois(spec, 5, "batch_index, x1, y1, x2, y2");
  const std::vector<int64_t> pooled = spec.attrs().get_ints("pooled_shape");
  KILN_CHECK(pooled.size() == 2, invalid_model,
             "MaxRoiPool needs attribute 'pooled_shape' with 2 ints (height, width), got ", pooled.size(),
             " ints");
  MaxRoiPoolParams params;
  params.pooled_height = positive_size(spec, "pooled_shape height", pooled[0]);
  params.pooled_width = positive_size(spec, "pooled_shape width", pooled[1]);
  params.spatial_scale = spatial_scale(spec);
  return params;
}

std::span<const OpSchema> roi_schemas() { return kSchemas; }

}  // namespace kiln
