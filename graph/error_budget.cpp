#include "graph/error_budget.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <string_view>

#include "backends/registry.h"
#include "core/error.h"
#include "core/events.h"
#include "graph/executor.h"
#include "graph/observer.h"
#include "graph/random_input.h"
#include "runtime/run_control.h"

namespace kiln {
namespace {

// An ungrouped stride-1 3x3 convolution with constant weights: what the budget could weigh.
bool has_weighable_conv(const Model& model) {
  for (const Node& node : model.graph.nodes) {
    if (node.op_type != "Conv" || !is_default_domain(node.domain) || node.inputs.size() < 2) continue;
    if (node.attributes.get_int("group", 1) != 1) continue;
    const std::vector<int64_t> strides = node.attributes.get_ints("strides", {});
    if (std::any_of(strides.begin(), strides.end(), [](int64_t stride) { return stride != 1; })) continue;
    const auto weights = model.graph.initializers.find(node.inputs[1]);
    if (weights == model.graph.initializers.end()) continue;
    const Shape& shape = weights->second.shape();
    if (shape.size() == 4 && shape[2] == 3 && shape[3] == 3) return true;
  }
  return false;
}

bool has_repeated_node_names(const Model& model) {
  std::set<std::string_view> names;
  for (const Node& node : model.graph.nodes) {
    if (!names.insert(node.name).second) return true;
  }
  return false;
}

// Runs one step on its less accurate kernel.
class Replacement final : public Observer {
 public:
  Replacement(size_t step, const Kernel& kernel) : step_(step), kernel_(kernel) {}
  const Kernel* replacement(const Plan&, size_t step) override { return step == step_ ? &kernel_ : nullptr; }

 private:
  size_t step_;
  const Kernel& kernel_;
};

// max over the float32 outputs of max |a - b| / max(1, max |b|): the model-parity tests' measure.
// NaN where no output is float32 or a value is not finite: nothing to measure the budget by.
double relative_distance(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double distance = NAN;
  for (size_t o = 0; o < a.size() && o < b.size(); ++o) {
    if (a[o].is_sequence() || b[o].is_sequence() || a[o].dtype() != DType::f32 ||
        b[o].dtype() != DType::f32 || a[o].numel() != b[o].numel())
      continue;
    const std::span<const float> got = a[o].values<float>();
    const std::span<const float> reference = b[o].values<float>();
    double scale = 1;
    double difference = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!std::isfinite(got[i]) || !std::isfinite(reference[i])) return NAN;
      scale = std::max(scale, std::abs(static_cast<double>(reference[i])));
      difference = std::max(difference, std::abs(static_cast<double>(got[i]) - reference[i]));
    }
    distance = std::isnan(distance) ? difference / scale : std::max(distance, difference / scale);
  }
  return distance;
}

int64_t measured_batch(const Plan& plan) {
  if (plan.input_slots().empty()) return 1;
  const Shape& shape = plan.slots()[static_cast<size_t>(plan.input_slots()[0])].info.shape;
  return shape.empty() ? 1 : shape[0];
}

std::string scientific(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1e", value);
  return text;
}

}  // namespace

std::optional<MeasurementPlan> error_budget_measurement(const Model& model,
                                                        const std::vector<Shape>& input_shapes,
                                                        const std::vector<Tensor>& input_values,
                                                        const Settings& settings) {
  const int winograd = backend_index("winograd");
  if (settings.get("conv_algorithm") != static_cast<int>(ConvAlgorithm::automatic) || winograd < 0 ||
      !settings.backend_enabled(winograd) || (settings.on("autotune") && !settings.on("deterministic")) ||
      !has_weighable_conv(model) || has_repeated_node_names(model))
    return std::nullopt;
  MeasurementPlan measurement{input_shapes, settings};
  const std::vector<ValueInfo>& inputs = model.graph.inputs;
  const bool bound = std::any_of(input_values.begin(), input_values.end(),
                                 [](const Tensor& value) { return value.defined(); });
  const bool batched =
      !bound && !inputs.empty() && inputs.size() == input_shapes.size() &&
      std::all_of(inputs.begin(), inputs.end(),
                  [](const ValueInfo& input) {
                    return input.has_shape && !input.shape.empty() && !input.shape[0].is_known();
                  }) &&
      std::all_of(input_shapes.begin(), input_shapes.end(),
                  [&](const Shape& shape) { return !shape.empty() && shape[0] == input_shapes[0][0]; });
  if (batched && input_shapes[0][0] > 0) {
    measurement.weigh_factor = input_shapes[0][0];
    for (Shape& shape : measurement.input_shapes) shape[0] = 1;
  }
  Settings& quiet = measurement.settings;
  quiet.set("threads", 1);
  quiet.set("execution_mode", static_cast<int>(ExecutionMode::sequential));
  quiet.set("verbose", 0);
  // Matrix products on BLAS (else native), which multiply the weights as given: oneDNN would reorder
  // a classifier's weights for a plan that runs a handful of times (vgg16's first: 1.3 s). What the
  // budget measures, how far a convolution's error carries, does not depend on it.
  quiet.set("prefer_matmul", priority_list_value({backend_index("blas"), backend_index("native")}));
  for (int backend = 0; backend < kBackendCount; ++backend)
    quiet.set(BackendSettingKey("verbose"), backend, 0);
  return measurement;
}

ErrorBudgetDecision decide_error_budget(const Plan& measured, const std::vector<ValueInfo>& graph_inputs,
                                        const std::vector<Tensor>& input_values, double budget) {
  ErrorBudgetDecision decision;
  decision.budget = budget;
  // The layers to weigh: those with a faster form above their backend's bound that can run in place
  // of their kernel.
  std::vector<size_t> layers;
  for (size_t s = 0; s < measured.steps().size(); ++s) {
    if (measured.steps()[s].approximate_kernel) layers.push_back(s);
  }
  if (layers.empty()) {
    decision.summary = str_cat("error budget ", scientific(budget),
                               " of the outputs' scale: no layer has a faster, less accurate form to weigh");
    return decision;
  }
  // Inputs: the bound values, else the seeded random ones `kiln run` feeds (the same in every process).
  std::vector<Shape> shapes;
  for (int slot : measured.input_slots())
    shapes.push_back(measured.slots()[static_cast<size_t>(slot)].info.shape);
  std::vector<Tensor> inputs = random_inputs(graph_inputs, shapes).ordered;
  for (size_t i = 0; i < inputs.size() && i < input_values.size(); ++i) {
    if (input_values[i].defined()) inputs[i] = input_values[i];
  }
  std::vector<const Tensor*> fed;
  for (const Tensor& input : inputs) fed.push_back(&input);
  // On the plan's one thread, quietly (no verbose lines, no profile events), and whatever run this
  // planning happens inside: no deadline or cancellation of a caller's may cut it short.
  Settings settings = Settings::defaults();
  settings.set("threads", measured.threads());
  const events::ScopedQuiet quiet;
  const ScopedRunControl no_control(nullptr);
  const std::vector<Tensor> reference = execute_plan(measured, fed, {}, settings);
  if (std::isnan(relative_distance(reference, reference))) {
    decision.summary =
        "error budget not spent: the model's outputs on the measurement's input are not finite float32 "
        "values";
    return decision;
  }

  struct Candidate {
    std::string node;
    ErrorShare share;
    double saved = 0;  // predicted, in the backend's unit
  };
  std::vector<Candidate> candidates;
  for (size_t s : layers) {
    const PlanStep& step = measured.steps()[s];
    Replacement replacement(s, *step.approximate_kernel);
    Observer* observers[] = {&replacement};
    const std::vector<Tensor> changed = execute_plan(measured, fed, observers, settings);
    const ApproximateForms& forms = step.approximate_forms;
    const ApproximateForm& fastest = forms.forms.front();
    Candidate candidate;
    candidate.node = step.record.node_name;
    candidate.share.baseline = forms.baseline.name;
    candidate.share.form = fastest.name;
    candidate.share.error = fastest.error;
    // A form that makes an output not finite moves it without bound.
    const double change = relative_distance(changed, reference);
    candidate.share.output_change = std::isnan(change) ? INFINITY : change;
    candidate.share.saving = forms.baseline.share - fastest.share;
    candidate.saved = candidate.share.saving * forms.exact_cost;
    candidates.push_back(std::move(candidate));
  }
  // Most time saved per unit of output change first; ties in step order.
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    // saved(a) / change(a) > saved(b) / change(b), without dividing by a zero change.
    return candidates[a].saved * candidates[b].share.output_change >
           candidates[b].saved * candidates[a].share.output_change;
  });
  int taken = 0;
  for (size_t i : order) {
    Candidate& candidate = candidates[i];
    if (decision.spent + candidate.share.output_change <= budget) {
      decision.spent += candidate.share.output_change;
      candidate.share.taken = true;
      decision.max_errors[candidate.node] = candidate.share.error;
      ++taken;
    }
  }
  for (Candidate& candidate : candidates) decision.layers[candidate.node] = std::move(candidate.share);
  decision.summary = str_cat(
      "error budget ", scientific(budget), " of the outputs' scale: ", taken, " of ", candidates.size(),
      " layers take a faster, less accurate form, moving the outputs by ", scientific(decision.spent),
      " (summed over the layers, measured on one thread at batch ", measured_batch(measured), ")");
  return decision;
}

}  // namespace kiln
