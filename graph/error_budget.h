// conv_algorithm auto's error budget: the layers that run a less accurate convolution than
// Winograd's own bound allows may together move a model's outputs by at most kConvErrorBudget of
// their scale. What a layer spends is measured on the model itself: planning plans it at batch 1
// on one thread, runs it on the seeded random input `kiln run` feeds, then once more per layer
// with only that layer on its faster, less accurate form (Winograd's F(4x4,3x3) where F(2x2,3x3)
// or the direct kernel would run), and takes how far the outputs moved. The budget goes to the
// layers that save the most predicted time at the plan's own batch (Winograd's cost model) per
// unit of output change, each in turn while the sum of their changes fits. Every input of the
// decision is a function of the model, the plan's batch, the settings and the machine's ISA tier
// (one thread, a fixed input, the cost model's predictions), so every process and thread count
// plans the same layers for a batch.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/settings.h"
#include "graph/plan.h"

namespace kiln {

// How far the outputs may move, relative to their scale (max(1, max |output|)), through the less
// accurate kernels the budget allows. The model-parity tests hold kiln within 1e-4 of PyTorch; kiln's
// exact kernels are already up to 4.1e-5 from it (inception_v3), which leaves this with room.
inline constexpr double kConvErrorBudget = 3e-5;

// What the budget measures on: the model at batch 1 (where every graph input's first dimension is
// a symbol and no input value is bound; else at the shapes given) on one thread, run sequentially
// and quietly. Nothing when the budget does not apply: another conv_algorithm, Winograd disabled,
// autotune on (it times the tiles instead), no ungrouped stride-1 3x3 Conv with constant weights,
// or node names the model repeats (the decision is kept by node name).
struct MeasurementPlan {
  std::vector<Shape> input_shapes;
  Settings settings;
  // The plan's batch over the measurement's (1 where not batched): the forms' savings are
  // predicted at the plan's own shapes.
  int64_t weigh_factor = 1;
};
std::optional<MeasurementPlan> error_budget_measurement(const Model& model,
                                                        const std::vector<Shape>& input_shapes,
                                                        const std::vector<Tensor>& input_values,
                                                        const Settings& settings);

// `measured` is the plan of `measurement` (Plan::build_once with its weigh_factor) for a model with
// `graph_inputs`; `input_values` those it was planned with (a bound one is fed as it is, the others
// are graph/random_input.h's seeded values). Runs it as the header says and decides; `budget` is
// kConvErrorBudget outside tests. Errors of the runs propagate.
ErrorBudgetDecision decide_error_budget(const Plan& measured, const std::vector<ValueInfo>& graph_inputs,
                                        const std::vector<Tensor>& input_values,
                                        double budget = kConvErrorBudget);

}  // namespace kiln
