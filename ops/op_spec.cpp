#include "ops/op_spec.h"

#include "core/error.h"
#include "ops/subgraph.h"

namespace kiln {

std::string_view value_kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::tensor:
      return "tensor";
    case ValueKind::sequence:
      return "sequence";
    case ValueKind::optional_tensor:
      return "optional(tensor)";
    case ValueKind::optional_sequence:
      return "optional(sequence)";
  }
  return "?";
}

bool holds_sequence(ValueKind kind) {
  return kind == ValueKind::sequence || kind == ValueKind::optional_sequence;
}

bool is_optional(ValueKind kind) {
  return kind == ValueKind::optional_tensor || kind == ValueKind::optional_sequence;
}

ValueKind held_kind(ValueKind kind) {
  if (kind == ValueKind::optional_tensor) return ValueKind::tensor;
  if (kind == ValueKind::optional_sequence) return ValueKind::sequence;
  return kind;
}

TensorInfo info_of(const Tensor& value) {
  TensorInfo info;
  info.dtype = value.dtype();
  if (!value.is_sequence()) {
    info.shape = value.shape();
    return info;
  }
  info.kind = ValueKind::sequence;
  const std::span<const Tensor> elements = value.elements();
  info.shape_known = !elements.empty();
  for (const Tensor& element : elements) {
    if (element.shape() != elements.front().shape()) info.shape_known = false;
  }
  if (info.shape_known) info.shape = elements.front().shape();
  return info;
}

const Subgraph& OpSpec::subgraph(std::string_view name) const {
  for (const auto& [attribute, graph] : subgraphs) {
    if (attribute == name && graph != nullptr) return *graph;
  }
  fail(ErrorKind::invalid_model, op_type, " needs the graph attribute '", name, "'");
}

bool is_default_domain(std::string_view domain) {
  return domain.empty() || domain == "ai.onnx";
}

const TensorInfo& OpSpec::input(int index) const {
  KILN_CHECK(has_input(index), invalid_model, op_type, " expects input ", index, " but it is missing");
  return inputs[static_cast<size_t>(index)];
}

const Tensor& OpSpec::constant_input(int index, const char* what) const {
  const TensorInfo& info = input(index);
  if (!info.is_constant()) {
    throw MissingConstantInput(index,
                               str_cat(op_type, " input ", index, " (", what,
                                       ") must be known at plan time (an initializer, a graph input, or "
                                       "computable from shapes); kiln plans shapes statically"));
  }
  return info.value;
}

void expect_inputs(const OpSpec& spec, int min_count, int max_count) {
  const int count = spec.num_inputs();
  KILN_CHECK(count >= min_count && count <= max_count, invalid_model, spec.op_type, " expects ",
             min_count == max_count ? str_cat(min_count) : str_cat(min_count, "..", max_count),
             " inputs, got ", count);
  for (int i = 0; i < min_count; ++i) spec.input(i);
}

void expect_rank(const OpSpec& spec, int input, int64_t rank) {
  const TensorInfo& info = spec.input(input);
  KILN_CHECK(static_cast<int64_t>(info.shape.size()) == rank, invalid_argument, spec.op_type, " input ",
             input, " must have rank ", rank, ", got shape ", shape_to_string(info.shape));
}

void expect_dtype(const OpSpec& spec, int input, DType dtype) {
  const TensorInfo& info = spec.input(input);
  KILN_CHECK(info.dtype == dtype, type_mismatch, spec.op_type, " input ", input, " must be ",
             dtype_name(dtype), ", got ", dtype_name(info.dtype));
}

void expect_floating(const OpSpec& spec, int input) {
  const TensorInfo& info = spec.input(input);
  KILN_CHECK(is_floating(info.dtype), type_mismatch, spec.op_type, " input ", input,
             " must be a floating-point tensor, got ", dtype_name(info.dtype));
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* what) {
  KILN_CHECK(axis >= -rank && axis < rank, invalid_model, what, " ", axis, " is out of range for rank ",
             rank);
  return axis < 0 ? axis + rank : axis;
}

}  // namespace kiln
