// QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, ConvInteger, MatMulInteger, QLinearConv,
// QLinearMatMul, and com.microsoft QGemm, QLinearAdd and QLinearMul.
#include "ops/quantize.h"

#include <span>

#include "core/error.h"
#include "ops/broadcast.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

bool is_int8(DType dtype) {
  return dtype == DType::i8 || dtype == DType::u8;
}

void expect_int8(const OpSpec& spec, int input, const char* what) {
  const DType dtype = spec.input(input).dtype;
  KILN_CHECK(is_int8(dtype), type_mismatch, spec.op_type, " ", what, " must be int8 or uint8, got ",
             dtype_name(dtype));
}

// A scale or zero point: one value (per tensor) or, when `per_index` > 1 is allowed, one per index
// (`per_what` names the dim). Absent optional zero points are zero.
void expect_quant_parameter(const OpSpec& spec, int input, const char* what, int64_t per_index,
                            const char* per_what) {
  const TensorInfo& info = spec.input(input);
  const int64_t count = checked_numel(info.shape);
  const bool scalar = count == 1 && info.shape.size() <= 1;
  const bool per_index_ok = per_index > 1 && info.shape == Shape{per_index};
  KILN_CHECK(
      scalar || per_index_ok, invalid_argument, spec.op_type, " ", what, " has shape ",
      shape_to_string(info.shape), ", expected one value",
      per_index > 1 ? std::string(" or [") + std::to_string(per_index) + "] (one per " + per_what + ")" : "");
}

void expect_scale(const OpSpec& spec, int input, const char* what, int64_t per_index, const char* per_what) {
  expect_dtype(spec, input, DType::f32);
  expect_quant_parameter(spec, input, what, per_index, per_what);
}

// A zero point: one value, or one per index like a per-index scale (a per-tensor zero point may
// go with per-index scales: symmetric weights). Unless `dtype` is undefined (a quantizing op's zero
// point gives the output its type), of type `dtype`.
void expect_zero_point(const OpSpec& spec, int input, DType dtype, const char* what, int64_t per_index,
                       const char* per_what) {
  if (!spec.has_input(input)) return;
  KILN_CHECK(dtype == DType::undefined || spec.input(input).dtype == dtype, type_mismatch, spec.op_type, " ",
             what, " must have its tensor's type ", dtype_name(dtype), ", got ",
             dtype_name(spec.input(input).dtype));
  expect_quant_parameter(spec, input, what, per_index, per_what);
}

std::vector<TensorInfo> infer_quantize_linear(const OpSpec& spec) {
  expect_inputs(spec, 2, 3);
  const DType x = spec.input(0).dtype;
  KILN_CHECK(is_floating(x) || x == DType::i32, type_mismatch,
             "QuantizeLinear input must be a float or int32 tensor, got ", dtype_name(x));
  quantize_linear_axis(spec);
  const DType y = spec.has_input(2) ? spec.input(2).dtype : DType::u8;
  KILN_CHECK(is_int8(y), not_implemented, "QuantizeLinear to ", dtype_name(y),
             ": kiln quantizes to int8 and uint8 (the zero point's type)");
  return {TensorInfo{y, spec.input(0).shape, {}}};
}

std::vector<TensorInfo> infer_dequantize_linear(const OpSpec& spec) {
  expect_inputs(spec, 2, 3);
  const DType x = spec.input(0).dtype;
  KILN_CHECK(is_int8(x) || x == DType::i32, type_mismatch,
             "DequantizeLinear input must be int8, uint8 or int32, got ", dtype_name(x));
  quantize_linear_axis(spec);
  return {TensorInfo{DType::f32, spec.input(0).shape, {}}};
}

std::vector<TensorInfo> infer_dynamic_quantize_linear(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  expect_dtype(spec, 0, DType::f32);
  return {TensorInfo{DType::u8, spec.input(0).shape, {}}, TensorInfo{DType::f32, {}, {}},
          TensorInfo{DType::u8, {}, {}}};
}

// int32 accumulators (float32 for a QGemm without y_scale), or y's zero point's type (uint8 without
// one).
DType integer_output_type(const OpSpec& spec) {
  const IntegerOperands at = integer_operands(spec);
  if (!at.requantized()) return at.scaled() ? DType::f32 : DType::i32;
  return spec.has_input(at.y_zero_point) ? spec.input(at.y_zero_point).dtype : DType::u8;
}

std::vector<TensorInfo> infer_integer_conv(const OpSpec& spec) {
  const ConvParams params = integer_conv_params(spec);
  Shape shape = {params.batch, params.out_channels};
  shape.insert(shape.end(), params.window.output.begin(), params.window.output.end());
  checked_numel(shape);
  return {TensorInfo{integer_output_type(spec), shape, {}}};
}

std::vector<TensorInfo> infer_integer_matmul(const OpSpec& spec) {
  const MatMulParams params = integer_matmul_params(spec);
  return {TensorInfo{integer_output_type(spec), params.output, {}}};
}

// com.microsoft QLinearAdd / QLinearMul: (A, A_scale, A_zero_point, B, B_scale, B_zero_point,
// C_scale[, C_zero_point]), A, B and C of one int8 type, every scale and zero point per tensor,
// A and B broadcasting as numpy's.
std::vector<TensorInfo> infer_qlinear_binary(const OpSpec& spec) {
  expect_inputs(spec, 7, 8);
  expect_int8(spec, 0, "A");
  const DType dtype = spec.input(0).dtype;
  KILN_CHECK(spec.input(3).dtype == dtype, type_mismatch, spec.op_type, " B must have A's type ",
             dtype_name(dtype), ", got ", dtype_name(spec.input(3).dtype));
  for (auto [scale, name] : {std::pair{1, "A_scale"}, {4, "B_scale"}, {6, "C_scale"}})
    expect_scale(spec, scale, name, 1, "");
  for (auto [zero_point, name] : {std::pair{2, "A_zero_point"}, {5, "B_zero_point"}, {7, "C_zero_point"}})
    expect_zero_point(spec, zero_point, dtype, name, 1, "");
  return {TensorInfo{dtype, broadcast_shapes(spec.input(0).shape, spec.input(3).shape), {}}};
}

std::vector<TensorInfo> infer_integer_gemm(const OpSpec& spec) {
  const GemmShape shape = integer_gemm_params(spec).shape;
  return {TensorInfo{integer_output_type(spec), {shape.m, shape.n}, {}}};
}

// The checks the integer Conv and MatMul share: int8 operands, zero points of their types, and for
// the QLinear ops float scales and y's zero point (whose type is the output's).
void expect_integer_operands(const OpSpec& spec, const IntegerOperands& at, int64_t x_count,
                             const char* x_per, int64_t w_count, const char* w_per) {
  expect_int8(spec, at.x, "input");
  expect_int8(spec, at.w, "weights");
  if (at.scaled()) {
    expect_scale(spec, at.x_scale, "x_scale", x_count, x_per);
    expect_scale(spec, at.w_scale, "w_scale", w_count, w_per);
  }
  if (at.requantized()) {
    expect_scale(spec, at.y_scale, "y_scale", 1, "");
    if (spec.has_input(at.y_zero_point)) {
      expect_int8(spec, at.y_zero_point, "y_zero_point");
      expect_quant_parameter(spec, at.y_zero_point, "y_zero_point", 1, "");
    }
  }
  expect_zero_point(spec, at.x_zero_point, spec.input(at.x).dtype, "x_zero_point", x_count, x_per);
  expect_zero_point(spec, at.w_zero_point, spec.input(at.w).dtype, "w_zero_point", w_count, w_per);
}

// The operands and scales are required; zero points are optional (absent: 0, and y uint8), and so is
// QLinearConv's bias, and QGemm's C and y_scale.
void expect_integer_inputs(const OpSpec& spec, const IntegerOperands& at) {
  const bool gemm = spec.op_type == "QGemm";
  const int most = gemm ? 9 : at.requantized() ? (at.bias >= 0 ? 9 : 8) : 4;
  const int least = gemm ? 6 : at.requantized() ? 7 : 2;
  KILN_CHECK(spec.num_inputs() >= least && spec.num_inputs() <= most, invalid_model, spec.op_type,
             " expects ", least, "..", most, " inputs, got ", spec.num_inputs());
  for (int required : {at.x, at.w, at.x_scale, at.w_scale, at.y_scale}) {
    if (required >= 0) spec.input(required);
  }
}

constexpr OpSchema kSchemas[] = {
    {"QuantizeLinear", infer_quantize_linear, 10},
    {"DequantizeLinear", infer_dequantize_linear, 10},
    {"DynamicQuantizeLinear", infer_dynamic_quantize_linear, 11},
    {"ConvInteger", infer_integer_conv, 10},
    {"QLinearConv", infer_integer_conv, 10},
    {"MatMulInteger", infer_integer_matmul, 10},
    {"QLinearMatMul", infer_integer_matmul, 10},
    {"QGemm", infer_integer_gemm, 1, true, false, kMicrosoftDomain},
    {"QLinearAdd", infer_qlinear_binary, 1, true, false, kMicrosoftDomain},
    {"QLinearMul", infer_qlinear_binary, 1, true, false, kMicrosoftDomain},
};

}  // namespace

QuantAxis quantize_linear_axis(const OpSpec& spec) {
  const Shape& x = spec.input(0).shape;
  const Shape& scale = spec.input(1).shape;
  expect_dtype(spec, 1, DType::f32);
  // Dequantizing reads a zero point of the input's type; quantizing writes the zero point's type.
  const DType zero_point = spec.op_type == "DequantizeLinear" ? spec.input(0).dtype : DType::undefined;
  QuantAxis result;
  if (checked_numel(scale) == 1 && scale.size() <= 1) {
    expect_zero_point(spec, 2, zero_point, "zero point", 1, "");
    return result;
  }
  KILN_CHECK(spec.opset >= 13 && scale.size() == 1, invalid_argument, spec.op_type, " scale has shape ",
             shape_to_string(scale), ", expected one value",
             spec.opset >= 13 ? " or a 1-D tensor (per axis)" : "", " (opset ", spec.opset, ")");
  const auto rank = static_cast<int64_t>(x.size());
  const auto axis = static_cast<size_t>(normalize_axis(spec.attrs().get_int("axis", 1), rank, "axis"));
  KILN_CHECK(scale[0] == x[axis], invalid_argument, spec.op_type, " scale has ", scale[0],
             " values, the input's dim ", axis, " is ", x[axis], " (", shape_to_string(x),
             "): they must match");
  expect_zero_point(spec, 2, zero_point, "zero point", scale[0], "index of the axis");
  result.count = scale[0];
  for (size_t d = axis + 1; d < x.size(); ++d) result.inner *= x[d];
  return result;
}

IntegerOperands integer_operands(const OpSpec& spec) {
  IntegerOperands at;
  const bool qlinear = spec.op_type == "QLinearConv" || spec.op_type == "QLinearMatMul";
  if (!qlinear && spec.op_type != "QGemm") return at;  // ConvInteger, MatMulInteger
  // Both start (x, x_scale, x_zero_point, w, w_scale, w_zero_point).
  at = {.x = 0, .w = 3, .x_zero_point = 2, .w_zero_point = 5, .x_scale = 1, .w_scale = 4};
  if (qlinear) {
    at.y_scale = 6;
    at.y_zero_point = 7;
    at.bias = spec.op_type == "QLinearConv" ? 8 : -1;
  } else {
    at.bias = 6;
    at.y_scale = spec.has_input(7) ? 7 : -1;
    at.y_zero_point = 8;
  }
  return at;
}

ConvParams integer_conv_params(const OpSpec& spec) {
  const IntegerOperands at = integer_operands(spec);
  expect_integer_inputs(spec, at);
  ConvParams params = conv_geometry(spec, at.x, at.w);
  expect_integer_operands(spec, at, 1, "", params.out_channels, "output channel");
  params.has_bias = at.bias >= 0 && spec.has_input(at.bias);
  if (params.has_bias) {
    expect_dtype(spec, at.bias, DType::i32);
    KILN_CHECK(spec.input(at.bias).shape == Shape{params.out_channels}, invalid_argument, spec.op_type,
               " bias must have shape [", params.out_channels, "], got ",
               shape_to_string(spec.input(at.bias).shape));
  }
  return params;
}

MatMulParams integer_matmul_params(const OpSpec& spec) {
  const IntegerOperands at = integer_operands(spec);
  expect_integer_inputs(spec, at);
  const MatMulParams params = matmul_shapes(spec, at.x, at.w);
  // A 1-D A has one row and a 1-D B one column: their zero points are per tensor.
  const bool a_rows = spec.input(at.x).shape.size() > 1;
  const bool b_columns = spec.input(at.w).shape.size() > 1;
  expect_integer_operands(spec, at, a_rows ? params.m : 1, "row of A", b_columns ? params.n : 1,
                          "column of B");
  return params;
}

IntegerGemmParams integer_gemm_params(const OpSpec& spec) {
  const IntegerOperands at = integer_operands(spec);
  expect_integer_inputs(spec, at);
  IntegerGemmParams params;
  params.shape = gemm_shape(spec, at.x, at.w, at.bias);
  params.alpha = spec.attrs().get_float("alpha", 1.0f);
  expect_integer_operands(spec, at, 1, "", params.shape.n, "column of B");
  if (spec.has_input(at.bias)) expect_dtype(spec, at.bias, DType::i32);
  KILN_CHECK(at.requantized() || !spec.has_input(at.y_zero_point), invalid_model,
             "QGemm has y_zero_point but no y_scale: a quantized output needs both");
  return params;
}

namespace {

// A scale's and zero point's values, when they are constants (ConvInteger and MatMulInteger have
// zero points only: scale -1), and what they are per.
void describe_parameters(const OpSpec& spec, int scale, int zero_point, QuantizedOperand& operand,
                         const char* per_index) {
  const auto present = [&](int input) { return input >= 0 && spec.has_input(input); };
  const auto values = [&](int input) {
    std::vector<double> result;
    if (!present(input) || !spec.input(input).is_constant()) return result;
    const Tensor& value = spec.input(input).value;
    for (int64_t i = 0; i < value.numel(); ++i) result.push_back(value.double_at(i));
    return result;
  };
  operand.scales = values(scale);
  operand.zero_points = values(zero_point);
  const int counted = present(scale) ? scale : zero_point;
  const int64_t count = present(counted) ? checked_numel(spec.input(counted).shape) : 1;
  operand.per = count > 1 ? per_index : "tensor";
}

}  // namespace

std::optional<QuantizationSummary> quantization_summary(const OpSpec& spec) {
  const std::string& op = spec.op_type;
  QuantizationSummary summary;
  if (op == "QuantizeLinear" || op == "DequantizeLinear") {
    const bool quantizing = op == "QuantizeLinear";
    QuantizedOperand operand{quantizing ? "y" : "x", DType::undefined, {}, {}, {}};
    operand.dtype = quantizing ? (spec.has_input(2) ? spec.input(2).dtype : DType::u8) : spec.input(0).dtype;
    const std::string axis = str_cat("index of axis ", spec.attrs().get_int("axis", 1));
    describe_parameters(spec, 1, 2, operand, axis.c_str());
    summary.operands.push_back(std::move(operand));
    summary.output = quantizing ? "x / scale rounded half to even, plus the zero point, saturated"
                                : "float32: (x - zero point) * scale";
    return summary;
  }
  if (op == "DynamicQuantizeLinear") {
    summary.operands.push_back({"y", DType::u8, {}, {}, "tensor"});
    summary.output = "uint8 over the run's own range, rounded half to even";
    return summary;
  }
  if (op == "QLinearAdd" || op == "QLinearMul") {
    const DType dtype = spec.input(0).dtype;
    for (auto [name, scale] : {std::pair{"A", 1}, {"B", 4}, {"y", 6}}) {
      QuantizedOperand operand{name, dtype, {}, {}, {}};
      describe_parameters(spec, scale, scale + 1, operand, "tensor");
      summary.operands.push_back(std::move(operand));
    }
    summary.output = str_cat(dtype_name(dtype), ": A and B dequantized in float32, ",
                             op == "QLinearAdd" ? "added" : "multiplied",
                             ", quantized to y (rounded half to even, saturated): the same bits as "
                             "DequantizeLinear, the float op and QuantizeLinear");
    return summary;
  }
  const bool conv = op == "QLinearConv" || op == "ConvInteger";
  const bool product = conv || op == "QLinearMatMul" || op == "MatMulInteger" || op == "QGemm";
  if (!product) return std::nullopt;
  const IntegerOperands at = integer_operands(spec);
  QuantizedOperand x{conv ? "x" : "A", spec.input(at.x).dtype, {}, {}, {}};
  QuantizedOperand w{conv ? "w" : "B", spec.input(at.w).dtype, {}, {}, {}};
  describe_parameters(spec, at.x_scale, at.x_zero_point, x, "row");
  describe_parameters(spec, at.w_scale, at.w_zero_point, w, conv ? "output channel" : "column");
  summary.operands = {std::move(x), std::move(w)};
  summary.accumulation = "int32, exact";
  if (at.bias >= 0 && spec.has_input(at.bias)) summary.bias = "int32, added to the accumulators";
  if (at.requantized()) {
    QuantizedOperand y{"y", integer_output_type(spec), {}, {}, {}};
    describe_parameters(spec, at.y_scale, at.y_zero_point, y, "tensor");
    summary.operands.push_back(std::move(y));
    const char* scales = conv            ? "x_scale * w_scale"
                         : op == "QGemm" ? "alpha * a_scale * b_scale"
                                         : "a_scale * b_scale";
    summary.output = str_cat(dtype_name(integer_output_type(spec)), ": (accumulator + bias) * ", scales,
                             " / y_scale in float32, plus y's zero point, rounded half to even, saturated");
  } else {
    summary.output =
        at.scaled() ? "float32: (accumulator + C) * alpha * a_scale * b_scale" : "int32 accumulators";
  }
  return summary;
}

std::span<const OpSchema> quantize_schemas() {
  return kSchemas;
}

}  // namespace kiln
