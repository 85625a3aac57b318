// Sequences (SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase,
// SequenceLength, SplitToSequence, ConcatFromSequence) and optionals (Optional, OptionalHasElement,
// OptionalGetElement). A sequence's info carries its elements' dtype, and their shape while every
// element is known to have it; what reads an element of unknown shape is planned when it runs.
#include "ops/sequence.h"

#include <algorithm>

#include "core/error.h"
#include "ops/onnx_dtype.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

const TensorInfo& sequence_input(const OpSpec& spec, int index) {
  const TensorInfo& info = spec.input(index);
  KILN_CHECK(info.kind == ValueKind::sequence, type_mismatch, spec.op_type, " input ", index,
             " must be a sequence, got a ", value_kind_name(info.kind));
  return info;
}

const TensorInfo& tensor_input(const OpSpec& spec, int index) {
  const TensorInfo& info = spec.input(index);
  KILN_CHECK(info.kind == ValueKind::tensor, type_mismatch, spec.op_type, " input ", index,
             " must be a tensor, got a ", value_kind_name(info.kind));
  return info;
}

TensorInfo sequence_info(DType dtype, const Shape* shape) {
  TensorInfo info;
  info.kind = ValueKind::sequence;
  info.dtype = dtype;
  info.shape_known = shape != nullptr;
  if (shape != nullptr) info.shape = *shape;
  return info;
}

// A sequence's element shape when every element is known to have it, else null.
const Shape* element_shape(const TensorInfo& sequence) {
  return sequence.shape_known ? &sequence.shape : nullptr;
}

bool known_empty(const TensorInfo& sequence) {
  return sequence.is_constant() && sequence.value.elements().empty();
}

void expect_position(const OpSpec& spec, int index) {
  const TensorInfo& position = tensor_input(spec, index);
  KILN_CHECK(position.dtype == DType::i32 || position.dtype == DType::i64, type_mismatch, spec.op_type,
             " position must be int32 or int64, got ", dtype_name(position.dtype));
  KILN_CHECK(!position.shape_known || checked_numel(position.shape) == 1, invalid_argument, spec.op_type,
             " position must be a scalar, got shape ", shape_to_string(position.shape));
}

std::vector<TensorInfo> infer_sequence_empty(const OpSpec& spec) {
  expect_inputs(spec, 0, 0);
  const DType dtype = dtype_attribute(spec, "dtype", DType::f32);
  TensorInfo info = sequence_info(dtype, nullptr);
  info.value = Tensor::sequence(dtype, {});
  return {info};
}

std::vector<TensorInfo> infer_sequence_construct(const OpSpec& spec) {
  KILN_CHECK(spec.num_inputs() >= 1, invalid_model, "SequenceConstruct needs at least one input");
  const TensorInfo& first = tensor_input(spec, 0);
  bool same_shape = first.shape_known;
  for (int i = 1; i < spec.num_inputs(); ++i) {
    const TensorInfo& input = tensor_input(spec, i);
    KILN_CHECK(input.dtype == first.dtype, type_mismatch, "SequenceConstruct input ", i, " is ",
               dtype_name(input.dtype), ", input 0 is ", dtype_name(first.dtype),
               ": a sequence's elements share one dtype");
    same_shape = same_shape && input.shape_known && input.shape == first.shape;
  }
  return {sequence_info(first.dtype, same_shape ? &first.shape : nullptr)};
}

std::vector<TensorInfo> infer_sequence_insert(const OpSpec& spec) {
  expect_inputs(spec, 2, 3);
  const TensorInfo& sequence = sequence_input(spec, 0);
  const TensorInfo& tensor = tensor_input(spec, 1);
  KILN_CHECK(tensor.dtype == sequence.dtype, type_mismatch, "SequenceInsert inserts a ",
             dtype_name(tensor.dtype), " tensor into a sequence of ", dtype_name(sequence.dtype));
  if (spec.has_input(2)) expect_position(spec, 2);
  const bool same_shape = tensor.shape_known &&
                          (known_empty(sequence) || (sequence.shape_known && sequence.shape == tensor.shape));
  return {sequence_info(sequence.dtype, same_shape ? &tensor.shape : nullptr)};
}

std::vector<TensorInfo> infer_sequence_at(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  const TensorInfo& sequence = sequence_input(spec, 0);
  expect_position(spec, 1);
  TensorInfo info{sequence.dtype, sequence.shape, {}};
  info.shape_known = sequence.shape_known;
  return {info};
}

std::vector<TensorInfo> infer_sequence_erase(const OpSpec& spec) {
  expect_inputs(spec, 1, 2);
  const TensorInfo& sequence = sequence_input(spec, 0);
  if (spec.has_input(1)) expect_position(spec, 1);
  return {sequence_info(sequence.dtype, element_shape(sequence))};
}

std::vector<TensorInfo> infer_sequence_length(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  const TensorInfo& sequence = sequence_input(spec, 0);
  TensorInfo info{DType::i64, {}, {}};
  if (sequence.is_constant())
    info.value = Tensor::scalar<int64_t>(static_cast<int64_t>(sequence.value.elements().size()));
  return {info};
}

std::vector<TensorInfo> infer_split_to_sequence(const OpSpec& spec) {
  expect_inputs(spec, 1, 2);
  const TensorInfo& input = tensor_input(spec, 0);
  if (spec.has_input(1)) spec.constant_input(1, "split");
  // An input whose shape only the run knows is split when it runs.
  if (!input.shape_known) return {sequence_info(input.dtype, nullptr)};
  const SplitToSequenceParams params = split_to_sequence_params(spec);
  // Equal parts have one shape; a split list of different lengths leaves it to the run.
  Shape part = input.shape;
  if (params.sizes.empty()) return {sequence_info(input.dtype, nullptr)};
  const bool equal = std::all_of(params.sizes.begin(), params.sizes.end(),
                                 [&](int64_t size) { return size == params.sizes.front(); });
  if (!equal) return {sequence_info(input.dtype, nullptr)};
  part[static_cast<size_t>(params.axis)] = params.sizes.front();
  if (params.drop_axis) part.erase(part.begin() + params.axis);
  return {sequence_info(input.dtype, &part)};
}

std::vector<TensorInfo> infer_concat_from_sequence(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  const TensorInfo& sequence = sequence_input(spec, 0);
  spec.attrs().require_int("axis");
  TensorInfo info{sequence.dtype, {}, {}};
  info.shape_known = false;  // the length is the run's
  return {info};
}

std::vector<TensorInfo> infer_optional(const OpSpec& spec) {
  expect_inputs(spec, 0, 1);
  TensorInfo info;
  if (spec.has_input(0)) {
    const TensorInfo& input = spec.input(0);
    KILN_CHECK(!is_optional(input.kind), type_mismatch, "Optional wraps a tensor or a sequence, got a ",
               value_kind_name(input.kind));
    info = input;
    info.value = {};
    info.kind = input.kind == ValueKind::sequence ? ValueKind::optional_sequence : ValueKind::optional_tensor;
    return {info};
  }
  const Attribute* type = spec.attrs().find("type");
  KILN_CHECK(type != nullptr && type->type == Attribute::Type::type, invalid_model,
             "Optional without an input needs its 'type' attribute");
  info.dtype = type->value_type.dtype;
  info.kind = type->value_type.sequence ? ValueKind::optional_sequence : ValueKind::optional_tensor;
  info.shape_known = false;
  return {info};
}

const TensorInfo& optional_input(const OpSpec& spec) {
  expect_inputs(spec, spec.opset >= 18 ? 0 : 1, 1);
  return spec.input(0);
}

std::vector<TensorInfo> infer_optional_has_element(const OpSpec& spec) {
  if (spec.opset >= 18 && !spec.has_input(0)) return {TensorInfo{DType::boolean, {}, Tensor::scalar(false)}};
  const TensorInfo& input = optional_input(spec);
  KILN_CHECK(is_optional(input.kind) || spec.opset >= 18, type_mismatch,
             "OptionalHasElement reads an optional, got a ", value_kind_name(input.kind));
  TensorInfo info{DType::boolean, {}, {}};
  if (!is_optional(input.kind)) info.value = Tensor::scalar(true);
  return {info};
}

std::vector<TensorInfo> infer_optional_get_element(const OpSpec& spec) {
  const TensorInfo& input = optional_input(spec);
  KILN_CHECK(is_optional(input.kind) || spec.opset >= 18, type_mismatch,
             "OptionalGetElement reads an optional, got a ", value_kind_name(input.kind));
  TensorInfo info = input;
  info.value = {};
  info.kind = held_kind(input.kind);
  return {info};
}

constexpr OpSchema kSchemas[] = {
    {"SequenceEmpty", infer_sequence_empty, 11, true, true},
    {"SequenceConstruct", infer_sequence_construct, 11, true, true},
    {"SequenceInsert", infer_sequence_insert, 11, true, true},
    {"SequenceAt", infer_sequence_at, 11, true, true},
    {"SequenceErase", infer_sequence_erase, 11, true, true},
    {"SequenceLength", infer_sequence_length, 11, true, true},
    {"SplitToSequence", infer_split_to_sequence, 11, true, true},
    {"ConcatFromSequence", infer_concat_from_sequence, 11, true, true},
    {"Optional", infer_optional, 15, true, true},
    {"OptionalHasElement", infer_optional_has_element, 15, true, true},
    {"OptionalGetElement", infer_optional_get_element, 15, true, true},
};

}  // namespace

DType dtype_attribute(const OpSpec& spec, const char* name, DType fallback) {
  if (!spec.attrs().has(name)) return fallback;
  const int64_t code = spec.attrs().get_int(name, 0);
  const DType dtype = dtype_from_onnx(code);
  KILN_CHECK(dtype != DType::undefined, not_implemented, spec.op_type, " attribute '", name, "' names ",
             onnx_dtype_name(code), " (", code, "), which kiln does not support");
  return dtype;
}

SplitToSequenceParams split_to_sequence_params(int64_t axis, bool keepdims, const Tensor& split,
                                               const Shape& shape) {
  SplitToSequenceParams params;
  params.axis = normalize_axis(axis, static_cast<int64_t>(shape.size()), "SplitToSequence axis");
  const int64_t length = shape[static_cast<size_t>(params.axis)];
  if (!split.defined()) {
    params.sizes.assign(static_cast<size_t>(length), 1);
    params.drop_axis = !keepdims;
    return params;
  }
  KILN_CHECK(is_integer(split.dtype()) && split.rank() <= 1, invalid_model,
             "SplitToSequence split must be an integer scalar or 1-D tensor, got ", dtype_name(split.dtype()),
             " ", shape_to_string(split.shape()));
  if (split.rank() == 0) {
    const int64_t size = split.int_at(0);
    KILN_CHECK(size > 0, invalid_argument, "SplitToSequence split ", size, " must be positive");
    for (int64_t start = 0; start < length; start += size)
      params.sizes.push_back(std::min(size, length - start));
    return params;
  }
  int64_t total = 0;
  for (int64_t size : split.to_int64_vector()) {
    KILN_CHECK(size >= 0, invalid_argument, "SplitToSequence split sizes must not be negative, got ", size);
    params.sizes.push_back(size);
    total += size;
  }
  KILN_CHECK(total == length, invalid_argument, "SplitToSequence split sizes add up to ", total,
             ", the axis has length ", length);
  return params;
}

SplitToSequenceParams split_to_sequence_params(const OpSpec& spec) {
  return split_to_sequence_params(spec.attrs().get_int("axis", 0), spec.attrs().get_int("keepdims", 1) != 0,
                                  spec.has_input(1) ? spec.constant_input(1, "split") : Tensor{},
                                  spec.input(0).shape);
}

std::span<const OpSchema> sequence_schemas() {
  return kSchemas;
}

}  // namespace kiln
