#include "graph/flops.h"

namespace kiln {
namespace {

int64_t numel(const Shape& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

}  // namespace

int64_t step_flops(const StepRecord& step) {
  if (step.output_shapes.empty() || step.input_shapes.size() < 2) return 0;
  const Shape& out = step.output_shapes[0];
  const Shape& a = step.input_shapes[0];
  // The integer products count their multiply-adds alike (QLinear*, QGemm: W is input 3).
  const bool qlinear =
      step.op_type == "QLinearConv" || step.op_type == "QLinearMatMul" || step.op_type == "QGemm";
  if (qlinear && step.input_shapes.size() < 4) return 0;
  const Shape& b = step.input_shapes[qlinear ? 3 : 1];
  const bool conv = step.op_type == "Conv" || step.op_type == "QLinearConv" || step.op_type == "ConvInteger";
  const bool matmul =
      step.op_type == "MatMul" || step.op_type == "QLinearMatMul" || step.op_type == "MatMulInteger";
  if (conv && b.size() >= 3) {
    // Each output element sums (input channels per group) x (kernel window) products.
    int64_t per_output = 1;
    for (size_t d = 1; d < b.size(); ++d) per_output *= b[d];
    return 2 * numel(out) * per_output;
  }
  if (step.op_type == "ConvTranspose" && b.size() >= 3) {
    // Each input element is scattered through (output channels per group) x (kernel window) products.
    int64_t per_input = 1;
    for (size_t d = 1; d < b.size(); ++d) per_input *= b[d];
    return 2 * numel(a) * per_input;
  }
  if ((step.op_type == "LSTM" || step.op_type == "GRU" || step.op_type == "RNN") && a.size() == 3 &&
      b.size() == 3 && step.input_shapes.size() > 2 && step.input_shapes[2].size() == 3) {
    // Every step of every sequence multiplies its input by W and the hidden state by R, per direction.
    const int64_t steps = numel(a) / a[2];
    const int64_t gate_rows = b[0] * b[1];
    return 2 * steps * gate_rows * (b[2] + step.input_shapes[2][2]);
  }
  if (matmul && !a.empty()) return 2 * numel(out) * a.back();
  const bool gemm = step.op_type == "Gemm" || step.op_type == "QGemm";
  if (gemm && out.size() == 2 && out[0] > 0) return 2 * numel(out) * (numel(a) / out[0]);
  return 0;
}

int64_t plan_flops(const Plan& plan) {
  int64_t total = 0;
  for (const PlanStep& step : plan.steps()) total += step_flops(step.record);
  return total;
}

}  // namespace kiln
