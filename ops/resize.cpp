// Resize (opsets 10-19) and Upsample (7-9): output size and the coordinate mapping of each dim.
#include "ops/resize.h"

#include <cmath>
#include <span>
#include <string>

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

ResizeMode parse_mode(const OpSpec& spec) {
  const std::string mode = spec.attrs().get_string("mode", "nearest");
  if (mode == "nearest") return ResizeMode::nearest;
  if (mode == "linear" || mode == "bilinear") return ResizeMode::linear;  // Upsample-7 says bilinear
  if (mode == "cubic" && spec.op_type == "Resize" && spec.opset >= 11) return ResizeMode::cubic;
  fail(ErrorKind::invalid_model, spec.op_type, " mode '", mode, "' is not one of nearest, linear",
       spec.op_type == "Resize" && spec.opset >= 11 ? ", cubic" : "");
}

CoordinateTransform parse_transform(const OpSpec& spec) {
  // Upsample and Resize-10 map coordinates asymmetrically; Resize-11 named the choice.
  if (spec.op_type == "Upsample" || spec.opset < 11) return CoordinateTransform::asymmetric;
  const std::string name = spec.attrs().get_string("coordinate_transformation_mode", "half_pixel");
  if (name == "half_pixel") return CoordinateTransform::half_pixel;
  if (name == "half_pixel_symmetric" && spec.opset >= 19) return CoordinateTransform::half_pixel_symmetric;
  if (name == "pytorch_half_pixel") return CoordinateTransform::pytorch_half_pixel;
  if (name == "align_corners") return CoordinateTransform::align_corners;
  if (name == "asymmetric") return CoordinateTransform::asymmetric;
  if (name == "tf_half_pixel_for_nn") return CoordinateTransform::tf_half_pixel_for_nn;
  if (name == "tf_crop_and_resize") return CoordinateTransform::tf_crop_and_resize;
  fail(ErrorKind::invalid_model, "Resize coordinate_transformation_mode '", name,
       "' is not one of half_pixel, ", spec.opset >= 19 ? "half_pixel_symmetric, " : "",
       "pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn, tf_crop_and_resize");
}

NearestRounding parse_rounding(const OpSpec& spec) {
  if (spec.op_type == "Upsample" || spec.opset < 11) return NearestRounding::simple;
  const std::string name = spec.attrs().get_string("nearest_mode", "round_prefer_floor");
  if (name == "round_prefer_floor") return NearestRounding::round_prefer_floor;
  if (name == "round_prefer_ceil") return NearestRounding::round_prefer_ceil;
  if (name == "floor") return NearestRounding::floor;
  if (name == "ceil") return NearestRounding::ceil;
  fail(ErrorKind::invalid_model, "Resize nearest_mode '", name,
       "' is not one of round_prefer_floor, round_prefer_ceil, floor, ceil");
}

std::vector<float> float_values(const Tensor& tensor, const char* what) {
  KILN_CHECK(is_floating(tensor.dtype()) && tensor.rank() <= 1, invalid_model, what,
             " must be a 1-D floating-point tensor, got ", dtype_name(tensor.dtype()), " ",
             shape_to_string(tensor.shape()));
  std::vector<float> values;
  for (int64_t i = 0; i < tensor.numel(); ++i) values.push_back(static_cast<float>(tensor.double_at(i)));
  return values;
}

// Where a model gives scales or sizes for `axes` only (opset 18), every other dim keeps its size.
std::vector<int64_t> resized_axes(const OpSpec& spec, int64_t rank) {
  std::vector<int64_t> axes = spec.attrs().get_ints("axes");
  if (axes.empty() || spec.opset < 18) {
    axes.clear();
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    return axes;
  }
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t& axis : axes) {
    axis = normalize_axis(axis, rank, "Resize axes entry");
    KILN_CHECK(!seen[static_cast<size_t>(axis)], invalid_model, "Resize axes name dim ", axis, " twice");
    seen[static_cast<size_t>(axis)] = true;
  }
  return axes;
}

// floor(x + 0.5): the spec's round_int for keep_aspect_ratio_policy.
int64_t round_half_up(double x) {
  return static_cast<int64_t>(std::floor(x + 0.5));
}

// Fills params.scales and params.output from the scales or sizes input (or Upsample's attribute).
void resolve_size(const OpSpec& spec, ResizeParams& params) {
  const Shape& input = spec.input(0).shape;
  const int64_t rank = static_cast<int64_t>(input.size());
  const std::vector<int64_t> axes = resized_axes(spec, rank);
  std::vector<float> scales;
  std::vector<int64_t> sizes;
  if (spec.op_type == "Upsample" && spec.opset < 9) {
    scales = spec.attrs().get_floats("scales");
    KILN_CHECK(!scales.empty(), invalid_model, "Upsample needs attribute 'scales'");
  } else {
    const int scales_input = spec.op_type == "Upsample" || spec.opset < 11 ? 1 : 2;
    if (spec.has_input(scales_input))
      scales = float_values(spec.constant_input(scales_input, "scales"), "scales");
    if (scales_input == 2 && spec.has_input(3)) {
      const Tensor& sizes_tensor = spec.constant_input(3, "sizes");
      KILN_CHECK(sizes_tensor.dtype() == DType::i64 && sizes_tensor.rank() <= 1, invalid_model,
                 "Resize sizes must be a 1-D int64 tensor, got ", dtype_name(sizes_tensor.dtype()), " ",
                 shape_to_string(sizes_tensor.shape()));
      sizes = sizes_tensor.to_int64_vector();
    }
  }
  KILN_CHECK(scales.empty() != sizes.empty(), invalid_model, spec.op_type,
             scales.empty() ? " needs either scales or sizes" : " takes scales or sizes, not both");
  const size_t count = axes.size();
  KILN_CHECK((scales.empty() ? sizes.size() : scales.size()) == count, invalid_argument, spec.op_type, " ",
             scales.empty() ? "sizes" : "scales", " has ", scales.empty() ? sizes.size() : scales.size(),
             " entries, expected ", count, " (one per ",
             spec.attrs().has("axes") ? "axis in axes" : "input dim", ", input ", shape_to_string(input),
             ")");
  params.scales.assign(static_cast<size_t>(rank), 1.0f);
  params.output = input;
  if (!scales.empty()) {
    for (size_t i = 0; i < count; ++i) {
      const auto d = static_cast<size_t>(axes[i]);
      KILN_CHECK(scales[i] > 0 && std::isfinite(scales[i]), invalid_argument, spec.op_type, " scale ",
                 scales[i], " for dim ", d, " must be a positive finite number");
      params.scales[d] = scales[i];
      const double size = std::floor(static_cast<double>(input[d]) * static_cast<double>(scales[i]));
      KILN_CHECK(size < 1e15, invalid_argument, spec.op_type, " scale ", scales[i], " makes dim ", d,
                 " too large");
      params.output[d] = static_cast<int64_t>(size);
    }
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    KILN_CHECK(sizes[i] > 0, invalid_argument, "Resize size ", sizes[i], " for dim ", axes[i],
               " must be positive");
    KILN_CHECK(input[static_cast<size_t>(axes[i])] > 0, invalid_argument, "Resize cannot resize empty dim ",
               axes[i], " of input ", shape_to_string(input), " to ", sizes[i]);
  }
  const std::string policy =
      spec.opset >= 18 ? spec.attrs().get_string("keep_aspect_ratio_policy", "stretch") : "stretch";
  KILN_CHECK(policy == "stretch" || policy == "not_larger" || policy == "not_smaller", invalid_model,
             "Resize keep_aspect_ratio_policy '", policy, "' is not one of stretch, not_larger, not_smaller");
  if (policy == "stretch") {
    for (size_t i = 0; i < count; ++i) {
      const auto d = static_cast<size_t>(axes[i]);
      params.output[d] = sizes[i];
      params.scales[d] = static_cast<float>(sizes[i]) / static_cast<float>(input[d]);
    }
    return;
  }
  // One scale for every listed dim: the largest that fits in sizes (not_larger) or the smallest that
  // covers it (not_smaller).
  double scale = policy == "not_larger" ? INFINITY : 0.0;
  for (size_t i = 0; i < count; ++i) {
    const double ratio =
        static_cast<double>(sizes[i]) / static_cast<double>(input[static_cast<size_t>(axes[i])]);
    scale = policy == "not_larger" ? std::min(scale, ratio) : std::max(scale, ratio);
  }
  for (int64_t axis : axes) {
    const auto d = static_cast<size_t>(axis);
    params.scales[d] = static_cast<float>(scale);
    params.output[d] = round_half_up(scale * static_cast<double>(input[d]));
  }
}

std::vector<TensorInfo> infer_resize(const OpSpec& spec) {
  return {TensorInfo{spec.input(0).dtype, resize_params(spec).output, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"Resize", infer_resize, 10},
    {"Upsample", infer_resize, 7},
};

}  // namespace

ResizeParams resize_params(const OpSpec& spec) {
  const bool upsample = spec.op_type == "Upsample";
  expect_inputs(spec, 1, upsample ? (spec.opset < 9 ? 1 : 2) : (spec.opset < 11 ? 2 : 4));
  const TensorInfo& x = spec.input(0);
  KILN_CHECK(!x.shape.empty(), invalid_argument, spec.op_type, " input must have rank >= 1");
  ResizeParams params;
  params.mode = parse_mode(spec);
  params.transform = parse_transform(spec);
  params.rounding = parse_rounding(spec);
  params.cubic_coeff_a = spec.attrs().get_float("cubic_coeff_a", -0.75f);
  params.exclude_outside = spec.attrs().get_int("exclude_outside", 0) != 0;
  params.extrapolation_value = spec.attrs().get_float("extrapolation_value", 0.0f);
  params.antialias = spec.opset >= 18 && spec.attrs().get_int("antialias", 0) != 0;
  if (params.mode != ResizeMode::nearest) {
    KILN_CHECK(
        x.dtype == DType::f32 || x.dtype == DType::f16 || x.dtype == DType::bf16 || x.dtype == DType::f64,
        type_mismatch, spec.op_type, " mode linear or cubic needs a floating-point input, got ",
        dtype_name(x.dtype));
  }
  resolve_size(spec, params);
  checked_numel(params.output);
  const auto rank = static_cast<int64_t>(x.shape.size());
  if (params.transform == CoordinateTransform::tf_crop_and_resize) {
    KILN_CHECK(spec.has_input(1), invalid_model,
               "Resize with coordinate_transformation_mode tf_crop_and_resize needs the roi input");
    const std::vector<float> roi = float_values(spec.constant_input(1, "roi"), "Resize roi");
    const std::vector<int64_t> axes = resized_axes(spec, rank);
    const size_t count = axes.size();
    KILN_CHECK(roi.size() == 2 * count, invalid_argument, "Resize roi has ", roi.size(),
               " entries, expected ", 2 * count, " (starts then ends of ", count, " dims)");
    params.roi.assign(static_cast<size_t>(2 * rank), 0.0f);
    for (int64_t d = 0; d < rank; ++d) params.roi[static_cast<size_t>(rank + d)] = 1.0f;
    for (size_t i = 0; i < count; ++i) {
      params.roi[static_cast<size_t>(axes[i])] = roi[i];
      params.roi[static_cast<size_t>(rank + axes[i])] = roi[count + i];
    }
  }
  return params;
}

float original_coordinate(CoordinateTransform transform, int64_t x, float scale, int64_t in, int64_t out,
                          float roi_start, float roi_end) {
  const auto xf = static_cast<float>(x);
  const auto length = static_cast<float>(in);
  // The output length before rounding down: ONNX maps through in * scale, not the integer size.
  const float resized = length * scale;
  switch (transform) {
    case CoordinateTransform::half_pixel:
      return (xf + 0.5f) / scale - 0.5f;
    case CoordinateTransform::half_pixel_symmetric: {
      // Shift by what rounding the output size down removed, so both ends stay symmetric.
      const float adjustment = static_cast<float>(out) / resized;
      return length / 2 * (1 - adjustment) + (xf + 0.5f) / scale - 0.5f;
    }
    case CoordinateTransform::pytorch_half_pixel:
      return resized > 1 ? (xf + 0.5f) / scale - 0.5f : 0.0f;
    case CoordinateTransform::align_corners:
      return resized == 1 ? 0.0f : xf * (length - 1) / (resized - 1);
    case CoordinateTransform::asymmetric:
      return xf / scale;
    case CoordinateTransform::tf_half_pixel_for_nn:
      return (xf + 0.5f) / scale;
    case CoordinateTransform::tf_crop_and_resize:
      return resized > 1
                 ? roi_start * (length - 1) + xf * (roi_end - roi_start) * (length - 1) / (resized - 1)
                 : 0.5f * (roi_start + roi_end) * (length - 1);
  }
  return 0.0f;
}

std::span<const OpSchema> resize_schemas() {
  return kSchemas;
}

}  // namespace kiln
