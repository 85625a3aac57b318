#include "ops/op_spec.h"

#include "core/error.h"

namespace kiln {

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::plain:
      return "plain";
    case Layout::nhwc:
      return "nhwc";
    case Layout::plain_bf16:
      return "plain_bf16";
    case Layout::nhwc_bf16:
      return "nhwc_bf16";
  }
  return "?";
}

bool is_channels_last(Layout layout) {
  return layout == Layout::nhwc || layout == Layout::nhwc_bf16;
}

bool is_bf16(Layout layout) {
  return layout == Layout::plain_bf16 || layout == Layout::nhwc_bf16;
}

Shape stored_shape(const Shape& shape, Layout layout) {
  if (!is_channels_last(layout)) return shape;
  KILN_ASSERT(shape.size() == 4);  // channels-last storage is only chosen for 4-D values
  return {shape[0], shape[2], shape[3], shape[1]};
}

DType stored_dtype(DType dtype, Layout layout) {
  return is_bf16(layout) ? DType::bf16 : dtype;
}

const char* precision_name(Precision precision) {
  return precision == Precision::bf16 ? "bf16" : "fp32";
}

const char* post_op_name(PostOp::Kind kind) {
  switch (kind) {
    case PostOp::Kind::relu:
      return "relu";
    case PostOp::Kind::leaky_relu:
      return "leaky_relu";
    case PostOp::Kind::clip:
      return "clip";
    case PostOp::Kind::sigmoid:
      return "sigmoid";
    case PostOp::Kind::tanh:
      return "tanh";
    case PostOp::Kind::gelu_erf:
      return "gelu_erf";
    case PostOp::Kind::bias:
      return "bias";
    case PostOp::Kind::sum:
      return "sum";
  }
  return "?";
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
