// ONNX's linear quantization, real = scale * (q - zero_point), in the ops that use it:
// QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, the int32-accumulator products
// ConvInteger and MatMulInteger, their requantized forms QLinearConv and QLinearMatMul, and ONNX
// Runtime's com.microsoft QGemm, QLinearAdd and QLinearMul (its QOperator format's quantized Gemm and
// sums, and kiln's integer forms of QDQ Gemm, Add and Mul chains). Parsed once for shape inference and
// kernels.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ops/conv.h"
#include "ops/matmul.h"

namespace kiln {

// How a scale and its zero point apply to a tensor: one value for every element (count 1), or one
// per index of a dim, elements [o * count * inner + i * inner, + inner) taking value i.
struct QuantAxis {
  int64_t count = 1;
  int64_t inner = 1;  // elements after the dim
  bool per_tensor() const { return count == 1; }
};

// QuantizeLinear / DequantizeLinear (x, scale, zero point): per tensor, or per index of `axis`
// (opset 13) when the scale is 1-D.
QuantAxis quantize_linear_axis(const OpSpec& spec);

// Where an integer Conv's or MatMul's inputs are. ConvInteger / MatMulInteger take
// (x, w, x_zero_point, w_zero_point) and give int32 accumulators; QLinearConv / QLinearMatMul take
// (x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point[, bias]) and give the
// accumulators requantized to y's type. QGemm takes (A, a_scale, a_zero_point, B, b_scale,
// b_zero_point[, C[, y_scale[, y_zero_point]]]): without y_scale its output is float32. For MatMul and
// Gemm, x is A and w is B.
struct IntegerOperands {
  int x = 0;
  int w = 1;
  int x_zero_point = 2;
  int w_zero_point = 3;
  int x_scale = -1;  // the scales, y's zero point and bias: QLinear ops and QGemm only
  int w_scale = -1;
  int y_scale = -1;  // -1 also for a QGemm without y_scale
  int y_zero_point = -1;
  int bias = -1;
  bool scaled() const { return x_scale >= 0; }
  bool requantized() const { return y_scale >= 0; }
};
IntegerOperands integer_operands(const OpSpec& spec);

// QLinearConv / ConvInteger: Conv's geometry; x's zero point and scale per tensor, w's per tensor or
// per output channel, bias int32 [M].
ConvParams integer_conv_params(const OpSpec& spec);

// QLinearMatMul / MatMulInteger: MatMul's shapes; A's zero point and scale per tensor or per row of
// A (m values), B's per tensor or per column of B (n values).
MatMulParams integer_matmul_params(const OpSpec& spec);

// QGemm: Gemm's shapes and transposes; A's scale and zero point per tensor, B's per tensor or per
// column (n values); C int32 broadcast to [M, N], added to the accumulators, so its scale is
// alpha * a_scale * b_scale: y = (A'B' + C) * alpha * a_scale * b_scale, requantized when y_scale is
// given.
struct IntegerGemmParams {
  GemmShape shape;
  float alpha = 1;
};
IntegerGemmParams integer_gemm_params(const OpSpec& spec);

// What a quantized step computes, for `kiln explain --json` and Python's explain: each quantized
// operand's type, scales and zero points, and what the integer products accumulate in and become.
struct QuantizedOperand {
  std::string name;  // "x", "w", "y" (Conv, Quantize/DequantizeLinear), "A", "B", "y" (MatMul, Gemm)
  DType dtype = DType::undefined;
  // One value (per tensor) or one per index of `per`; empty when computed at run time (not constants)
  // or absent (a zero point: 0; ConvInteger and MatMulInteger have no scales).
  std::vector<double> scales;
  std::vector<double> zero_points;
  std::string per;                  // "tensor", "output channel", "row", "column", "index of axis N"
};
struct QuantizationSummary {
  std::vector<QuantizedOperand> operands;
  std::string accumulation;  // the integer products': "int32, exact"; empty for Quantize/DequantizeLinear
  std::string bias;          // "int32, added to the accumulators", or empty
  std::string output;        // what the step writes, and how it is rounded
};
// For the quantization ops and the integer products; nothing for other ops.
std::optional<QuantizationSummary> quantization_summary(const OpSpec& spec);

}  // namespace kiln
