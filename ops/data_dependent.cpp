// NonZero, Compress, Unique, NonMaxSuppression: shapes are upper bounds unless the values that
// decide them are plan-time constants.
#include "ops/data_dependent.h"

#include <algorithm>
#include <span>

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

std::vector<TensorInfo> infer_non_zero(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  const Shape& x = spec.input(0).shape;
  // One column per element at most; a scalar counts as one element of rank 1.
  return {
      TensorInfo{DType::i64, {std::max<int64_t>(1, static_cast<int64_t>(x.size())), checked_numel(x)}, {}}};
}

std::vector<TensorInfo> infer_compress(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  expect_dtype(spec, 1, DType::boolean);
  const TensorInfo& condition = spec.input(1);
  KILN_CHECK(condition.shape.size() == 1, invalid_argument, "Compress condition must be 1-D, got shape ",
             shape_to_string(condition.shape));
  const Shape& x = spec.input(0).shape;
  const std::optional<int64_t> axis = compress_axis(spec);
  const int64_t length = axis ? x[static_cast<size_t>(*axis)] : checked_numel(x);
  KILN_CHECK(condition.shape[0] <= length, invalid_argument, "Compress condition has ", condition.shape[0],
             " entries, more than the ", length, axis ? " slices along the axis" : " elements of the input");
  // A constant condition fixes the size; otherwise every slice could be selected.
  int64_t selected = condition.shape[0];
  if (condition.is_constant()) {
    selected = 0;
    for (int64_t i = 0; i < condition.value.numel(); ++i) selected += condition.value.data<bool>()[i] ? 1 : 0;
  }
  Shape shape = axis ? x : Shape{};
  if (axis) {
    shape[static_cast<size_t>(*axis)] = selected;
  } else {
    shape.push_back(selected);
  }
  return {TensorInfo{spec.input(0).dtype, shape, {}}};
}

std::vector<TensorInfo> infer_unique(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  const TensorInfo& x = spec.input(0);
  KILN_CHECK(is_integer(x.dtype) || is_floating(x.dtype) || x.dtype == DType::boolean, type_mismatch,
             "Unique input must be numeric or bool, got ", dtype_name(x.dtype));
  const int64_t sorted = spec.attrs().get_int("sorted", 1);
  KILN_CHECK(sorted == 0 || sorted == 1, invalid_model, "Unique sorted must be 0 or 1, got ", sorted);
  const std::optional<int64_t> axis = unique_axis(spec);
  // At most every element (or slice) is unique.
  const int64_t slices = axis ? x.shape[static_cast<size_t>(*axis)] : checked_numel(x.shape);
  Shape y = axis ? x.shape : Shape{slices};
  return {TensorInfo{x.dtype, y, {}}, TensorInfo{DType::i64, {slices}, {}},
          TensorInfo{DType::i64, {slices}, {}}, TensorInfo{DType::i64, {slices}, {}}};
}

std::vector<TensorInfo> infer_non_max_suppression(const OpSpec& spec) {
  expect_inputs(spec, 2, 5);
  expect_dtype(spec, 0, DType::f32);
  expect_dtype(spec, 1, DType::f32);
  const Shape& boxes = spec.input(0).shape;
  const Shape& scores = spec.input(1).shape;
  KILN_CHECK(boxes.size() == 3 && boxes[2] == 4, invalid_argument,
             "NonMaxSuppression boxes must have shape [batch, boxes, 4], got ", shape_to_string(boxes));
  KILN_CHECK(scores.size() == 3 && scores[0] == boxes[0] && scores[2] == boxes[1], invalid_argument,
             "NonMaxSuppression scores must have shape [", boxes[0], ", classes, ", boxes[1], "] for boxes ",
             shape_to_string(boxes), ", got ", shape_to_string(scores));
  const int64_t center_point_box = spec.attrs().get_int("center_point_box", 0);
  KILN_CHECK(center_point_box == 0 || center_point_box == 1, invalid_model,
             "NonMaxSuppression center_point_box must be 0 (corners) or 1 (centre and size), got ",
             center_point_box);
  const DType scalar_types[] = {DType::undefined, DType::undefined, DType::i64, DType::f32, DType::f32};
  const char* names[] = {"", "", "max_output_boxes_per_class", "iou_threshold", "score_threshold"};
  for (int i = 2; i < spec.num_inputs(); ++i) {
    if (!spec.has_input(i)) continue;
    expect_dtype(spec, i, scalar_types[i]);
    KILN_CHECK(checked_numel(spec.input(i).shape) == 1 && spec.input(i).shape.size() <= 1, invalid_argument,
               "NonMaxSuppression ", names[i], " must hold one value, got shape ",
               shape_to_string(spec.input(i).shape));
  }
  // Each class of each image keeps at most max_output_boxes_per_class of its boxes.
  int64_t per_class = boxes[1];
  if (spec.has_input(2) && spec.input(2).is_constant())
    per_class = std::clamp<int64_t>(spec.input(2).value.int_at(0), 0, boxes[1]);
  if (!spec.has_input(2)) per_class = 0;
  return {TensorInfo{DType::i64, {boxes[0] * scores[1] * per_class, 3}, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"NonZero", infer_non_zero, 9},
    {"Compress", infer_compress, 9},
    {"Unique", infer_unique, 11},
    {"NonMaxSuppression", infer_non_max_suppression, 10},
};

}  // namespace

std::optional<int64_t> compress_axis(const OpSpec& spec) {
  if (!spec.attrs().has("axis")) return std::nullopt;
  return normalize_axis(spec.attrs().get_int("axis", 0), static_cast<int64_t>(spec.input(0).shape.size()),
                        "Compress axis");
}

std::optional<int64_t> unique_axis(const OpSpec& spec) {
  if (!spec.attrs().has("axis")) return std::nullopt;
  return normalize_axis(spec.attrs().get_int("axis", 0), static_cast<int64_t>(spec.input(0).shape.size()),
                        "Unique axis");
}

std::span<const OpSchema> data_dependent_schemas() {
  return kSchemas;
}

}  // namespace kiln
