// Elementwise ops: unary math, Clip, broadcasting binary and variadic ops, comparisons, logic,
// Where, Cast and CastLike.
#include <algorithm>

#include "core/error.h"
#include "ops/broadcast.h"
#include "ops/onnx_dtype.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

bool is_numeric(DType dtype) { return is_floating(dtype) || is_integer(dtype); }

std::vector<TensorInfo> same_as_input(const OpSpec& spec) {
  const TensorInfo& input = spec.input(0);
  return {TensorInfo{input.dtype, input.shape, {}}};
}

std::vector<TensorInfo> infer_float_unary(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  expect_floating(spec, 0);
  return same_as_input(spec);
}

// Relu, Neg, Abs, Sign and Shrink also take integers.
std::vector<TensorInfo> infer_numeric_unary(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  KILN_CHECK(is_numeric(spec.input(0).dtype), type_mismatch, spec.op_type, " input must be numeric, got ",
             dtype_name(spec.input(0).dtype));
  return same_as_input(spec);
}

std::vector<TensorInfo> infer_float_predicate(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  expect_floating(spec, 0);
  return {TensorInfo{DType::boolean, spec.input(0).shape, {}}};
}

std::vector<TensorInfo> infer_not(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  expect_dtype(spec, 0, DType::boolean);
  return same_as_input(spec);
}

std::vector<TensorInfo> infer_clip(const OpSpec& spec) {
  expect_inputs(spec, 1, spec.opset < 11 ? 1 : 3);
  KILN_CHECK(is_numeric(spec.input(0).dtype), type_mismatch, "Clip input must be numeric, got ",
             dtype_name(spec.input(0).dtype));
  for (int i = 1; i < spec.num_inputs(); ++i) {
    if (!spec.has_input(i)) continue;
    expect_dtype(spec, i, spec.input(0).dtype);
    KILN_CHECK(spec.input(i).shape.empty() || checked_numel(spec.input(i).shape) == 1, invalid_argument, "Clip ",
               i == 1 ? "min" : "max", " must be a scalar, got shape ", shape_to_string(spec.input(i).shape));
  }
  return same_as_input(spec);
}

Shape broadcast_all_inputs(const OpSpec& spec) {
  std::vector<Shape> shapes;
  for (int i = 0; i < spec.num_inputs(); ++i) shapes.push_back(spec.input(i).shape);
  return broadcast_shapes(shapes);
}

void expect_same_dtypes(const OpSpec& spec) {
  for (int i = 1; i < spec.num_inputs(); ++i) {
    KILN_CHECK(spec.input(i).dtype == spec.input(0).dtype, type_mismatch, spec.op_type, " input ", i, " is ",
               dtype_name(spec.input(i).dtype), " but input 0 is ", dtype_name(spec.input(0).dtype));
  }
}

std::vector<TensorInfo> infer_arithmetic(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  expect_same_dtypes(spec);
  KILN_CHECK(is_numeric(spec.input(0).dtype), type_mismatch, spec.op_type, " inputs must be numeric, got ",
             dtype_name(spec.input(0).dtype));
  return {TensorInfo{spec.input(0).dtype, broadcast_all_inputs(spec), {}}};
}

std::vector<TensorInfo> infer_variadic(const OpSpec& spec) {
  expect_inputs(spec, 1, 1 << 16);
  expect_same_dtypes(spec);
  KILN_CHECK(is_numeric(spec.input(0).dtype), type_mismatch, spec.op_type, " inputs must be numeric, got ",
             dtype_name(spec.input(0).dtype));
  return {TensorInfo{spec.input(0).dtype, broadcast_all_inputs(spec), {}}};
}

std::vector<TensorInfo> infer_pow(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  const DType base = spec.input(0).dtype;
  KILN_CHECK(is_floating(base) || base == DType::i32 || base == DType::i64, type_mismatch,
             "Pow base (input 0) must be a float, int32 or int64 tensor, got ", dtype_name(base));
  KILN_CHECK(is_numeric(spec.input(1).dtype), type_mismatch, "Pow exponent (input 1) must be numeric, got ",
             dtype_name(spec.input(1).dtype));
  return {TensorInfo{spec.input(0).dtype, broadcast_all_inputs(spec), {}}};
}

std::vector<TensorInfo> infer_prelu(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  expect_same_dtypes(spec);
  const Shape shape = broadcast_all_inputs(spec);
  KILN_CHECK(shape == spec.input(0).shape, invalid_argument, "PRelu slope of shape ",
             shape_to_string(spec.input(1).shape), " must broadcast to X's shape ",
             shape_to_string(spec.input(0).shape));
  return same_as_input(spec);
}

std::vector<TensorInfo> infer_comparison(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  expect_same_dtypes(spec);
  return {TensorInfo{DType::boolean, broadcast_all_inputs(spec), {}}};
}

std::vector<TensorInfo> infer_logical(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  expect_dtype(spec, 0, DType::boolean);
  expect_dtype(spec, 1, DType::boolean);
  return {TensorInfo{DType::boolean, broadcast_all_inputs(spec), {}}};
}

std::vector<TensorInfo> infer_bitshift(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  expect_same_dtypes(spec);
  const DType dtype = spec.input(0).dtype;
  KILN_CHECK(dtype == DType::u8 || dtype == DType::u16 || dtype == DType::u32 || dtype == DType::u64, type_mismatch,
             "BitShift inputs must be unsigned integers, got ", dtype_name(dtype));
  const std::string direction = spec.attrs().get_string("direction", "");
  KILN_CHECK(direction == "LEFT" || direction == "RIGHT", invalid_model,
             "BitShift attribute 'direction' must be LEFT or RIGHT, got '", direction, "'");
  return {TensorInfo{dtype, broadcast_all_inputs(spec), {}}};
}

std::vector<TensorInfo> infer_bitwise(const OpSpec& spec) {
  const bool unary = spec.op_type == "BitwiseNot";
  expect_inputs(spec, unary ? 1 : 2, unary ? 1 : 2);
  expect_same_dtypes(spec);
  const DType dtype = spec.input(0).dtype;
  KILN_CHECK(is_integer(dtype), type_mismatch, spec.op_type, " inputs must be integers, got ", dtype_name(dtype));
  return {TensorInfo{dtype, broadcast_all_inputs(spec), {}}};
}

std::vector<TensorInfo> infer_gelu(const OpSpec& spec) {
  const std::string approximate = spec.attrs().get_string("approximate", "none");
  KILN_CHECK(approximate == "none" || approximate == "tanh", invalid_model,
             "Gelu attribute 'approximate' must be none or tanh, got '", approximate, "'");
  return infer_float_unary(spec);
}

std::vector<TensorInfo> infer_where(const OpSpec& spec) {
  expect_inputs(spec, 3, 3);
  expect_dtype(spec, 0, DType::boolean);
  KILN_CHECK(spec.input(1).dtype == spec.input(2).dtype, type_mismatch, "Where inputs X and Y differ: ",
             dtype_name(spec.input(1).dtype), " vs ", dtype_name(spec.input(2).dtype));
  return {TensorInfo{spec.input(1).dtype, broadcast_all_inputs(spec), {}}};
}

std::vector<TensorInfo> infer_cast(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  const int64_t code = spec.attrs().require_int("to");
  const DType target = dtype_from_onnx(code);
  KILN_CHECK(target != DType::undefined, not_implemented, "Cast to ", onnx_dtype_name(code), " (", code,
             ") is not supported");
  return {TensorInfo{target, spec.input(0).shape, {}}};
}

std::vector<TensorInfo> infer_cast_like(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  return {TensorInfo{spec.input(1).dtype, spec.input(0).shape, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"Relu", infer_numeric_unary},
    {"Neg", infer_numeric_unary},
    {"Abs", infer_numeric_unary},
    {"Sign", infer_numeric_unary, 9},
    {"Sigmoid", infer_float_unary},
    {"Tanh", infer_float_unary},
    {"Erf", infer_float_unary, 9},
    {"Sqrt", infer_float_unary},
    {"Exp", infer_float_unary},
    {"Log", infer_float_unary},
    {"Reciprocal", infer_float_unary},
    {"Floor", infer_float_unary},
    {"Ceil", infer_float_unary},
    {"Round", infer_float_unary, 11},
    {"Sin", infer_float_unary, 7},
    {"Cos", infer_float_unary, 7},
    {"Tan", infer_float_unary, 7},
    {"Asin", infer_float_unary, 7},
    {"Acos", infer_float_unary, 7},
    {"Atan", infer_float_unary, 7},
    {"Sinh", infer_float_unary, 9},
    {"Cosh", infer_float_unary, 9},
    {"Asinh", infer_float_unary, 9},
    {"Acosh", infer_float_unary, 9},
    {"Atanh", infer_float_unary, 9},
    {"Softplus", infer_float_unary},
    {"Softsign", infer_float_unary},
    {"LeakyRelu", infer_float_unary},
    {"Elu", infer_float_unary},
    {"Selu", infer_float_unary},
    {"Celu", infer_float_unary, 12},
    {"HardSigmoid", infer_float_unary},
    {"HardSwish", infer_float_unary, 14},
    {"ThresholdedRelu", infer_float_unary, 10},
    {"Shrink", infer_numeric_unary, 9},
    {"Not", infer_not},
    {"IsNaN", infer_float_predicate, 9},
    {"IsInf", infer_float_predicate, 10},
    {"Clip", infer_clip},
    {"Add", infer_arithmetic},
    {"Sub", infer_arithmetic},
    {"Mul", infer_arithmetic},
    {"Div", infer_arithmetic},
    {"Mod", infer_arithmetic, 10},
    {"Pow", infer_pow},
    {"PRelu", infer_prelu},
    {"Max", infer_variadic},
    {"Min", infer_variadic},
    {"Sum", infer_variadic},
    {"Mean", infer_variadic},
    {"Equal", infer_comparison},
    {"Less", infer_comparison},
    {"Greater", infer_comparison},
    {"LessOrEqual", infer_comparison, 12},
    {"GreaterOrEqual", infer_comparison, 12},
    {"And", infer_logical},
    {"Or", infer_logical},
    {"Xor", infer_logical},
    {"BitShift", infer_bitshift, 11},
    {"BitwiseAnd", infer_bitwise, 18},
    {"BitwiseOr", infer_bitwise, 18},
    {"BitwiseXor", infer_bitwise, 18},
    {"BitwiseNot", infer_bitwise, 18},
    {"Gelu", infer_gelu, 20},
    {"Where", infer_where, 9},
    {"Cast", infer_cast},
    {"CastLike", infer_cast_like, 15},
};

}  // namespace

std::span<const OpSchema> elementwise_schemas() { return kSchemas; }

}  // namespace kiln
