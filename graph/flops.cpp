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
  const Shape& b = step.input_shapes[1];
  if (step.op_type == "Conv" && b.size() >= 3) {
    // Each output element sums (input channels per group) x (kernel window) products.
    int64_t per_output = 1;
    for (size_t d = 1; d < b.size(); ++d) per_output *= b[d];
    return 2 * numel(out) * per_output;
  }
  if (step.op_type == "MatMul" && !a.empty()) return 2 * numel(out) * a.back();
  if (step.op_type == "Gemm" && out.size() == 2 && out[0] > 0) return 2 * numel(out) * (numel(a) / out[0]);
  return 0;
}

int64_t plan_flops(const Plan& plan) {
  int64_t total = 0;
  for (const PlanStep& step : plan.steps()) total += step_flops(step.record);
  return total;
}

}  // namespace kiln
