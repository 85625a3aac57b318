// ONNX's linear quantization, real = scale * (q - zero_point), in the ops that use it:
// QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, the int32-accumulator products
// ConvInteger and MatMulInteger, and their requantized forms QLinearConv and QLinearMatMul.
// Parsed once for shape inference and kernels.
#pragma once

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
// accumulators requantized to y's type. For MatMul, x is A and w is B.
struct IntegerOperands {
  int x = 0;
  int w = 1;
  int x_zero_point = 2;
  int w_zero_point = 3;
  int x_scale = -1;  // the scales, y's zero point and bias: QLinear ops only
  int w_scale = -1;
  int y_scale = -1;
  int y_zero_point = -1;
  int bias = -1;
  bool requantized() const { return y_scale >= 0; }
};
IntegerOperands integer_operands(const OpSpec& spec);

// QLinearConv / ConvInteger: Conv's geometry; x's zero point and scale per tensor, w's per tensor or
// per output channel, bias int32 [M].
ConvParams integer_conv_params(const OpSpec& spec);

// QLinearMatMul / MatMulInteger: MatMul's shapes; A's zero point and scale per tensor or per row of
// A (m values), B's per tensor or per column of B (n values).
MatMulParams integer_matmul_params(const OpSpec& spec);

}  // namespace kiln
