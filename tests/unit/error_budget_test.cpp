// conv_algorithm auto's error budget (graph/error_budget.h): what the measurement plan records, how
// the budget is spent, what the final plan runs, and that every process and thread count plans the
// same layers and computes the same bits.
#include "graph/error_budget.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/settings.h"
#include "backends/winograd/accuracy.h"
#include "graph/plan.h"
#include "graph/session.h"
#include "graph_builder.h"

namespace kiln {
namespace {

constexpr int64_t kChannels = 128;
constexpr int64_t kSize = 28;
constexpr int64_t kBatch = 16;

// Four 3x3 convolutions of 128 channels on 28x28, ReLU between, with a symbolic batch: where
// F(4x4,3x3)'s probe error is above Winograd's own bound (1e-6) and its cost model predicts it
// faster than F(2x2,3x3) at batch 16.
Model conv_chain() {
  testing::GraphBuilder g({1, kChannels, kSize, kSize});
  const Attributes same = testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1});
  const float scale = std::sqrt(6.0f / (kChannels * 9));
  std::string value = "x";
  for (int i = 0; i < 4; ++i) {
    value = g.add(
        "Conv", {value, g.weights({kChannels, kChannels, 3, 3}, scale), g.weights({kChannels}, 0.1f)}, same);
    if (i < 3) value = g.add("Relu", {value});
  }
  Model model = g.finish({value});
  model.graph.inputs[0].shape[0] = Dim{-1, "batch"};
  return model;
}

Settings auto_settings(int threads) {
  Settings settings = current_settings();
  settings.set("threads", threads);
  settings.set(SettingKey("conv_algorithm"), static_cast<int>(ConvAlgorithm::automatic));
  return settings;
}

const std::vector<Shape> kShapes{{kBatch, kChannels, kSize, kSize}};

// The measurement plan: batch 1, one thread, forms weighed at kBatch.
std::shared_ptr<Plan> measurement_plan(const Model& model) {
  const std::optional<MeasurementPlan> measurement =
      error_budget_measurement(model, kShapes, {}, auto_settings(2));
  EXPECT_TRUE(measurement.has_value());
  EXPECT_EQ(measurement->input_shapes[0][0], 1);
  EXPECT_EQ(measurement->weigh_factor, kBatch);
  EXPECT_EQ(measurement->settings.threads(), 1);
  return Plan::build_once(model, measurement->input_shapes, {}, measurement->settings, {},
                          measurement->weigh_factor);
}

std::vector<std::string> kernels(const Plan& plan) {
  std::vector<std::string> names;
  for (const PlanStep& step : plan.steps()) names.push_back(step.record.kernel);
  return names;
}

TEST(ErrorBudget, MeasuresEachLayersFormOnTheModel) {
  KILN_SKIP_UNLESS_BUILT("winograd");
  const Model model = conv_chain();
  const std::shared_ptr<Plan> measured = measurement_plan(model);
  int weighed = 0;
  for (const PlanStep& step : measured->steps()) {
    if (!step.approximate_kernel) continue;
    ++weighed;
    const ApproximateForms& forms = step.approximate_forms;
    ASSERT_FALSE(forms.forms.empty());
    EXPECT_EQ(forms.forms.front().name, "F(4x4,3x3)");
    EXPECT_GT(forms.forms.front().error, winograd::kAutoErrorBound);
    EXPECT_LT(forms.forms.front().share, forms.baseline.share);
    EXPECT_TRUE(std::string(step.approximate_kernel->name()).starts_with("winograd:f4x4_3x3:"))
        << step.approximate_kernel->name();
    // The measurement plan itself runs what auto takes without a budget.
    EXPECT_FALSE(step.record.kernel.starts_with("winograd:f4x4_3x3:")) << step.record.kernel;
  }
  // On this project's machines (AVX-512 and AVX2 tiers, and the baseline tier) every layer does.
  if (weighed == 0) GTEST_SKIP() << "no layer of the chain has a faster form above the bound on this machine";

  // No budget: nothing taken, every layer measured.
  const ErrorBudgetDecision none = decide_error_budget(*measured, model.graph.inputs, {}, 0);
  EXPECT_EQ(none.layers.size(), static_cast<size_t>(weighed));
  EXPECT_TRUE(none.max_errors.empty());
  EXPECT_EQ(none.spent, 0);
  double total_change = 0;
  for (const auto& [node, share] : none.layers) {
    EXPECT_FALSE(share.taken) << node;
    // The form computes the layer differently: the outputs move, by a little.
    EXPECT_GT(share.output_change, 0) << node;
    EXPECT_LT(share.output_change, 1e-4) << node;
    EXPECT_GT(share.saving, 0) << node;
    total_change += share.output_change;
  }
  // A budget for everything takes everything; half of it takes part, within it.
  const ErrorBudgetDecision all = decide_error_budget(*measured, model.graph.inputs, {}, 1.0);
  EXPECT_EQ(all.max_errors.size(), static_cast<size_t>(weighed));
  EXPECT_NEAR(all.spent, total_change, 1e-12);
  const ErrorBudgetDecision half = decide_error_budget(*measured, model.graph.inputs, {}, total_change / 2);
  EXPECT_LE(half.spent, total_change / 2);
  EXPECT_LT(half.max_errors.size(), static_cast<size_t>(weighed));
  for (const auto& [node, share] : half.layers) {
    EXPECT_EQ(share.taken, half.max_errors.count(node) == 1) << node;
    // What was left out did not fit beside what was taken.
    if (!share.taken) {
      EXPECT_GT(half.spent + share.output_change, total_change / 2) << node;
    }
  }
  // Measured twice, the same numbers.
  const ErrorBudgetDecision again = decide_error_budget(*measurement_plan(model), model.graph.inputs, {}, 0);
  for (const auto& [node, share] : none.layers)
    EXPECT_EQ(again.layers.at(node).output_change, share.output_change);
}

TEST(ErrorBudget, PlansRunTheFormsTakenAndRecordTheDecision) {
  KILN_SKIP_UNLESS_BUILT("winograd");
  const Model model = conv_chain();
  const std::shared_ptr<const Plan> plan = Plan::build(model, kShapes, {}, auto_settings(2));
  const ErrorBudgetDecision& budget = plan->error_budget();
  ASSERT_FALSE(budget.layers.empty());
  ASSERT_FALSE(budget.max_errors.empty()) << budget.summary;
  EXPECT_EQ(budget.budget, kConvErrorBudget);
  EXPECT_LE(budget.spent, kConvErrorBudget);
  EXPECT_NE(budget.summary.find("error budget"), std::string::npos) << budget.summary;
  size_t recorded = 0;
  for (const PlanStep& step : plan->steps()) {
    // A layer whose faster form cannot run in its kernel's place (another layout) is not weighed.
    if (!step.record.error_share) continue;
    ++recorded;
    const ErrorShare& share = *step.record.error_share;
    EXPECT_EQ(share.taken, budget.max_errors.count(step.record.node_name) == 1);
    // A layer given its form's error runs the form (the cost model predicted it faster at this batch).
    EXPECT_EQ(step.record.kernel.starts_with("winograd:f4x4_3x3:"), share.taken) << step.record.kernel;
  }
  EXPECT_EQ(recorded, budget.layers.size());
}

TEST(ErrorBudget, EveryThreadCountPlansTheSameLayersAndBits) {
  KILN_SKIP_UNLESS_BUILT("winograd");
  const Model model = conv_chain();
  const Tensor x = testing::random_tensor(kShapes[0], 5, 0, 1);
  const std::shared_ptr<const Plan> first = Plan::build(model, kShapes, {}, auto_settings(1));
  ASSERT_FALSE(first->error_budget().max_errors.empty()) << first->error_budget().summary;
  for (int threads : {2, 1}) {
    const std::shared_ptr<const Plan> plan = Plan::build(model, kShapes, {}, auto_settings(threads));
    EXPECT_EQ(kernels(*plan), kernels(*first)) << threads << " threads";
    EXPECT_EQ(plan->error_budget().max_errors, first->error_budget().max_errors) << threads << " threads";
    for (const auto& [node, share] : first->error_budget().layers)
      EXPECT_EQ(plan->error_budget().layers.at(node).output_change, share.output_change) << node;
  }
  // Two sessions, one thread each: the same bits.
  std::vector<Tensor> outputs;
  for (int session_index = 0; session_index < 2; ++session_index) {
    Session session(model, auto_settings(1));
    outputs.push_back(session.run({{"x", x}}).begin()->second);
  }
  ASSERT_EQ(outputs[0].nbytes(), outputs[1].nbytes());
  EXPECT_EQ(std::memcmp(outputs[0].raw_data(), outputs[1].raw_data(), outputs[0].nbytes()), 0);
}

TEST(ErrorBudget, SpendsNothingWhereItCannotMeasure) {
  KILN_SKIP_UNLESS_BUILT("winograd");
  // Outputs that are not finite on the measurement's input (Log of the chain's negative values).
  Model logged = conv_chain();
  Node log;
  log.name = "log";
  log.op_type = "Log";
  log.inputs = {logged.graph.outputs[0].name};
  log.outputs = {"logged"};
  logged.graph.nodes.push_back(log);
  logged.graph.outputs[0].name = "logged";
  const std::shared_ptr<const Plan> plan = Plan::build(logged, kShapes, {}, auto_settings(2));
  EXPECT_TRUE(plan->error_budget().max_errors.empty());
  EXPECT_NE(plan->error_budget().summary.find("not finite"), std::string::npos)
      << plan->error_budget().summary;
  for (const PlanStep& step : plan->steps())
    EXPECT_FALSE(step.record.kernel.starts_with("winograd:f4x4_3x3:") && step.record.error_share.has_value());

  // Node names the model repeats: the budget, which keeps its decision by name, does not apply.
  Model repeated = conv_chain();
  for (Node& node : repeated.graph.nodes) {
    if (node.op_type == "Conv") node.name = "conv";
  }
  EXPECT_FALSE(error_budget_measurement(repeated, kShapes, {}, auto_settings(2)).has_value());
  // Nor under another conv_algorithm, or autotune.
  Settings direct = auto_settings(2);
  direct.set(SettingKey("conv_algorithm"), static_cast<int>(ConvAlgorithm::direct));
  EXPECT_FALSE(error_budget_measurement(conv_chain(), kShapes, {}, direct).has_value());
  Settings tuned = auto_settings(2);
  tuned.set("autotune", 1);
  EXPECT_FALSE(error_budget_measurement(conv_chain(), kShapes, {}, tuned).has_value());
}

}  // namespace
}  // namespace kiln
