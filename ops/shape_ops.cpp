// Ops that compute or change shapes: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Expand,
// ConstantOfShape, Constant, Identity, Dropout (inference), Range, EyeLike.
#include "ops/shape_ops.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "ops/broadcast.h"
#include "ops/onnx_dtype.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

// Range's output length is computed in double; beyond 2^53 elements it would not be exact (and no
// machine holds such a tensor anyway).
constexpr int64_t kMaxRangeElements = int64_t{1} << 53;
// ONNX's default Dropout ratio when the input is absent.
constexpr double kDefaultDropoutRatio = 0.5;

TensorInfo constant_info(Tensor value) {
  return TensorInfo{value.dtype(), value.shape(), value};
}

std::vector<TensorInfo> infer_shape(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  const Shape& shape = spec.input(0).shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t start = spec.opset >= 15 ? spec.attrs().get_int("start", 0) : 0;
  int64_t end = spec.opset >= 15 ? spec.attrs().get_int("end", rank) : rank;
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  std::vector<int64_t> dims;
  for (int64_t d = start; d < end; ++d) dims.push_back(shape[static_cast<size_t>(d)]);
  return {constant_info(Tensor::from_vector<int64_t>(dims, {static_cast<int64_t>(dims.size())}))};
}

std::vector<TensorInfo> infer_size(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  return {constant_info(Tensor::scalar<int64_t>(checked_numel(spec.input(0).shape)))};
}

std::vector<TensorInfo> infer_reshape(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  const Shape& input = spec.input(0).shape;
  const Tensor& target = spec.constant_input(1, "shape");
  KILN_CHECK(target.rank() == 1 && is_integer(target.dtype()), invalid_model,
             "Reshape shape must be a 1-D integer tensor, got ", dtype_name(target.dtype()), " ",
             shape_to_string(target.shape()));
  const bool allow_zero = spec.opset >= 14 && spec.attrs().get_int("allowzero", 0) != 0;
  Shape shape = target.to_int64_vector();
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      KILN_CHECK(i < input.size(), invalid_argument, "Reshape shape ",
                 shape_to_string(target.to_int64_vector()), " copies dim ", i, " but the input ",
                 shape_to_string(input), " has rank ", input.size());
      shape[i] = input[i];
    }
    if (shape[i] == -1) {
      KILN_CHECK(inferred < 0, invalid_model, "Reshape shape ", shape_to_string(target.to_int64_vector()),
                 " has more than one -1");
      inferred = static_cast<int>(i);
      continue;
    }
    KILN_CHECK(shape[i] >= 0, invalid_model, "Reshape shape ", shape_to_string(target.to_int64_vector()),
               " has a negative dim");
    KILN_CHECK(!__builtin_mul_overflow(known, shape[i], &known), invalid_argument, "Reshape shape ",
               shape_to_string(target.to_int64_vector()), " has more elements than an int64 counts");
  }
  const int64_t count = checked_numel(input);
  if (inferred >= 0) {
    KILN_CHECK(known != 0 && count % known == 0, invalid_argument, "cannot reshape ", shape_to_string(input),
               " to ", shape_to_string(target.to_int64_vector()));
    shape[static_cast<size_t>(inferred)] = count / known;
  }
  KILN_CHECK(checked_numel(shape) == count, invalid_argument, "cannot reshape ", shape_to_string(input), " (",
             count, " elements) to ", shape_to_string(shape));
  return {TensorInfo{spec.input(0).dtype, shape, {}}};
}

std::vector<TensorInfo> infer_flatten(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  const Shape& input = spec.input(0).shape;
  const int64_t rank = static_cast<int64_t>(input.size());
  int64_t axis = spec.attrs().get_int("axis", 1);
  KILN_CHECK(axis >= -rank && axis <= rank, invalid_model, "Flatten axis ", axis,
             " is out of range for rank ", rank);
  if (axis < 0) axis += rank;
  const std::span<const int64_t> dims(input);
  const int64_t outer = checked_numel(dims.first(static_cast<size_t>(axis)));
  const int64_t inner = checked_numel(dims.subspan(static_cast<size_t>(axis)));
  return {TensorInfo{spec.input(0).dtype, {outer, inner}, {}}};
}

std::vector<TensorInfo> infer_squeeze(const OpSpec& spec) {
  expect_inputs(spec, 1, 2);
  const Shape& input = spec.input(0).shape;
  const int64_t rank = static_cast<int64_t>(input.size());
  std::vector<int64_t> axes = squeeze_axes(spec);
  std::set<int64_t> removed;
  for (int64_t axis : axes) {
    axis = normalize_axis(axis, rank, "Squeeze axis");
    KILN_CHECK(input[static_cast<size_t>(axis)] == 1, invalid_argument, "Squeeze axis ", axis, " of shape ",
               shape_to_string(input), " is not 1");
    removed.insert(axis);
  }
  Shape shape;
  for (int64_t d = 0; d < rank; ++d) {
    const bool squeeze = axes.empty() ? input[static_cast<size_t>(d)] == 1 : removed.count(d) != 0;
    if (!squeeze) shape.push_back(input[static_cast<size_t>(d)]);
  }
  return {TensorInfo{spec.input(0).dtype, shape, {}}};
}

std::vector<TensorInfo> infer_unsqueeze(const OpSpec& spec) {
  expect_inputs(spec, 1, 2);
  const Shape& input = spec.input(0).shape;
  const std::vector<int64_t> axes = squeeze_axes(spec);
  KILN_CHECK(!axes.empty(), invalid_model, "Unsqueeze needs axes");
  const int64_t rank = static_cast<int64_t>(input.size() + axes.size());
  std::set<int64_t> inserted;
  for (int64_t axis : axes) {
    KILN_CHECK(inserted.insert(normalize_axis(axis, rank, "Unsqueeze axis")).second, invalid_model,
               "Unsqueeze axes repeat ", axis);
  }
  Shape shape;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d) shape.push_back(inserted.count(d) ? 1 : input[next++]);
  return {TensorInfo{spec.input(0).dtype, shape, {}}};
}

std::vector<TensorInfo> infer_expand(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  const Tensor& target = spec.constant_input(1, "shape");
  KILN_CHECK(target.rank() == 1 && is_integer(target.dtype()), invalid_model,
             "Expand shape must be a 1-D integer tensor");
  return {
      TensorInfo{spec.input(0).dtype, broadcast_shapes(spec.input(0).shape, target.to_int64_vector()), {}}};
}

std::vector<TensorInfo> infer_constant_of_shape(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  const Tensor& target = spec.constant_input(0, "shape");
  KILN_CHECK(target.rank() == 1 && target.dtype() == DType::i64, invalid_model,
             "ConstantOfShape input must be a 1-D int64 tensor");
  DType dtype = DType::f32;
  if (const Attribute* value = spec.attrs().find("value")) {
    KILN_CHECK(value->type == Attribute::Type::t && value->t.numel() == 1, invalid_model,
               "ConstantOfShape value must be a one-element tensor");
    dtype = value->t.dtype();
  }
  Shape shape = target.to_int64_vector();
  checked_numel(shape);  // rejects negative dims with a clear error
  return {TensorInfo{dtype, std::move(shape), {}}};
}

std::vector<TensorInfo> infer_constant(const OpSpec& spec) {
  expect_inputs(spec, 0, 0);
  const Attributes& attrs = spec.attrs();
  KILN_CHECK(attrs.all().size() == 1, invalid_model, "Constant needs exactly one value attribute, got ",
             attrs.all().size());
  const auto& [name, attribute] = *attrs.all().begin();
  if (name == "value") return {constant_info(attrs.require_tensor("value"))};
  if (name == "value_float") return {constant_info(Tensor::scalar<float>(attrs.get_float(name, 0)))};
  if (name == "value_int") return {constant_info(Tensor::scalar<int64_t>(attrs.get_int(name, 0)))};
  if (name == "value_floats") {
    std::vector<float> values = attrs.get_floats(name);
    return {constant_info(Tensor::from_vector(values, {static_cast<int64_t>(values.size())}))};
  }
  if (name == "value_ints") {
    std::vector<int64_t> values = attrs.get_ints(name);
    return {constant_info(Tensor::from_vector(values, {static_cast<int64_t>(values.size())}))};
  }
  fail(ErrorKind::not_implemented, "Constant attribute '", name, "' is not supported");
}

std::vector<TensorInfo> infer_identity(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  TensorInfo info = spec.input(0);  // any kind: the planner forwards the value
  info.value = {};
  return {info};
}

std::vector<TensorInfo> infer_dropout(const OpSpec& spec) {
  expect_inputs(spec, 1, spec.opset >= 12 ? 3 : 1);
  expect_inference_dropout(spec);
  std::vector<TensorInfo> outputs = {TensorInfo{spec.input(0).dtype, spec.input(0).shape, {}}};
  // The mask is bool from opset 10; Dropout-7 typed it like the data.
  const DType mask_dtype = spec.opset >= 10 ? DType::boolean : spec.input(0).dtype;
  if (spec.num_outputs > 1) outputs.push_back(TensorInfo{mask_dtype, spec.input(0).shape, {}});
  return outputs;
}

std::vector<TensorInfo> infer_range(const OpSpec& spec) {
  expect_inputs(spec, 3, 3);
  const DType dtype = spec.input(0).dtype;
  for (int i = 1; i < 3; ++i) expect_dtype(spec, i, dtype);
  const double start = spec.constant_input(0, "start").double_at(0);
  const double limit = spec.constant_input(1, "limit").double_at(0);
  const double delta = spec.constant_input(2, "delta").double_at(0);
  KILN_CHECK(delta != 0, invalid_argument, "Range delta must not be 0");
  const double count = std::ceil((limit - start) / delta);
  KILN_CHECK(std::isfinite(count), invalid_argument, "Range has a non-finite element count");
  KILN_CHECK(count <= static_cast<double>(kMaxRangeElements), invalid_argument, "Range from ", start, " to ",
             limit, " by ", delta, " has too many elements (", count, ")");
  return {TensorInfo{dtype, {std::max<int64_t>(0, static_cast<int64_t>(count))}, {}}};
}

std::vector<TensorInfo> infer_eye_like(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  expect_rank(spec, 0, 2);
  DType dtype = spec.input(0).dtype;
  if (spec.attrs().has("dtype")) {
    const int64_t code = spec.attrs().get_int("dtype", 0);
    dtype = dtype_from_onnx(code);
    KILN_CHECK(dtype != DType::undefined, not_implemented, "EyeLike dtype ", onnx_dtype_name(code), " (",
               code, ") is not supported");
  }
  return {TensorInfo{dtype, spec.input(0).shape, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"Shape", infer_shape},         {"Size", infer_size},
    {"Reshape", infer_reshape, 5},  {"Flatten", infer_flatten},
    {"Squeeze", infer_squeeze},     {"Unsqueeze", infer_unsqueeze},
    {"Expand", infer_expand, 8},    {"ConstantOfShape", infer_constant_of_shape, 9},
    {"Constant", infer_constant},   {"Identity", infer_identity, 1, true, true},
    {"Dropout", infer_dropout},     {"Range", infer_range, 11},
    {"EyeLike", infer_eye_like, 9},
};

}  // namespace

std::vector<int64_t> squeeze_axes(const OpSpec& spec) {
  if (spec.opset < 13) return spec.attrs().get_ints("axes");
  if (!spec.has_input(1)) return {};
  return spec.constant_input(1, "axes").to_int64_vector();
}

void expect_inference_dropout(const OpSpec& spec) {
  if (spec.opset < 12 || !spec.has_input(2)) return;
  const Tensor& training = spec.constant_input(2, "training_mode");
  KILN_CHECK(training.numel() == 1, invalid_model, "Dropout training_mode must be a scalar, got shape ",
             shape_to_string(training.shape()));
  if (training.int_at(0) == 0) return;
  // Training with ratio 0 keeps every element, which is deterministic and the same as inference.
  const double ratio =
      spec.has_input(1) ? spec.constant_input(1, "ratio").double_at(0) : kDefaultDropoutRatio;
  KILN_CHECK(ratio == 0, not_implemented, "Dropout in training mode (ratio ", ratio,
             ") draws a random mask; kiln runs inference only");
}

std::span<const OpSchema> shape_schemas() {
  return kSchemas;
}

}  // namespace kiln
