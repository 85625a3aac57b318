// Planning as a pipeline of passes over one shared state (graph/passes/): order the live nodes,
// bind constants and inputs, then per node infer its outputs, drop or fold it, propose a fused form
// and select its kernel, and finally bind the outputs, compute liveness and the memory plan.
#include "graph/plan.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>

#include "graph/error_budget.h"
#include "graph/passes/passes.h"
#include "graph/verbose.h"
#include "runtime/threads.h"

namespace kiln {
namespace {

// torchvision (0.14 and earlier) writes RoiAlign without coordinate_transformation_mode at every
// opset; from opset 16 that means half_pixel (aligned=True), while its detectors use aligned=False
// (output_half_pixel). kiln follows the file, as ONNX Runtime does, and says what it suspects: on
// the step (kiln explain) and once per plan on stderr.
void warn_of_misread_export(PlanState& state, const Node& node, const OpSpec& spec) {
  if (node.op_type != "RoiAlign" || spec.opset < 16 ||
      node.attributes.has("coordinate_transformation_mode") || state.model.producer.rfind("pytorch", 0) != 0)
    return;
  const std::string warning = str_cat(
      "exported by ", state.model.producer, " at opset ", spec.opset,
      " without coordinate_transformation_mode, which from opset 16 means half_pixel (aligned=True); "
      "torchvision's detectors use aligned=False (output_half_pixel): export at opset 15 or earlier, or set "
      "the attribute, if this model means aligned=False");
  // The error budget's measurement plan (weigh_factor > 0) leaves the warning to the plan itself.
  if (state.node_notes.emplace(node.name, warning).second && !state.warned_of_export &&
      state.weigh_factor == 0) {
    state.warned_of_export = true;
    std::fprintf(stderr, "kiln: warning: RoiAlign node '%s' %s\n", node.name.c_str(), warning.c_str());
  }
}

// The step (or none) for one node: inferred, then removed, folded, or computed by the kernel
// selection finds for its fused form, else for the node alone.
void plan_node(PlanState& state, const Node& node) {
  state.in_progress.insert(&node);
  struct Done {
    PlanState& state;
    const Node& node;
    ~Done() { state.in_progress.erase(&node); }
  } done{state, node};
  // A value sized when it runs has no shape to plan on: not even Shape or Size may read it. Nor
  // may any op but the sequence, optional and control-flow ones read a sequence, an optional or a
  // tensor whose shape depends on the branch taken or the iterations run.
  const OpSchema* row = find_op_schema(node.op_type, node.domain);
  const bool reads_any_value = row != nullptr && row->reads_any_value;
  for (const std::string& input : node.inputs) {
    if (reads_any_value || input.empty()) continue;
    const auto sized = state.run_time_sized.find(input);
    if (sized != state.run_time_sized.end()) {
      fail(ErrorKind::not_implemented, sized->second, " sizes its output '", input,
           "' when it runs (the size depends on the input values), and this node reads it: ",
           "kiln fixes every other step's shapes when it plans, so such an output can only be ",
           "a graph output (or computed from plan-time constants, which kiln folds)");
    }
    const Slot* slot = state.planned(input);
    if (slot == nullptr || slot->info.is_static_tensor()) continue;
    if (slot->info.kind != ValueKind::tensor) {
      fail(ErrorKind::type_mismatch, node.op_type, " reads '", input, "', a ",
           value_kind_name(slot->info.kind), ": only the sequence, optional and control-flow ops take one");
    }
    fail(ErrorKind::not_implemented, "reads '", input, "', whose shape only the run knows (",
         "it comes from an If whose branches differ, a Loop, or a sequence of differently shaped tensors): ",
         "kiln fixes this node's shapes when it plans");
  }
  if (plan_attention(state, node)) return;
  if (plan_residual_layer_norm(state, node)) return;
  if (plan_channel_shuffle(state, node)) return;
  const OpSpec spec = state.op_spec(node);
  const OpSchema& schema = node_schema(node, spec);
  warn_of_misread_export(state, node, spec);
  std::vector<TensorInfo> outputs = infer_outputs(state, node, spec, schema);
  if (remove_pass_through(state, node)) return;
  if (fold_constants(state, node, spec, schema, outputs)) return;

  NodeForm alone = unfused_form(state, node, spec, std::move(outputs));
  if (const auto allowed = state.max_errors.find(node.name); allowed != state.max_errors.end())
    alone.request.max_error = allowed->second;
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  std::optional<KernelSelection> alone_selection;
  if (std::optional<NodeForm> fused = propose_fusion(state, node, alone)) {
    fused->request.max_error = alone.request.max_error;
    // Under a preference for the node's op family the listed order comes before fusion: the fused
    // form is kept only where a backend listed no later than the one taking the node alone runs it
    // (prefer native, blas, onednn: a MatMul + Relu runs on native, unfused).
    const bool ordered = has_preference(alone.request, state.settings);
    if (ordered) alone_selection = find_kernel(alone.request, alone.outputs, state.settings);
    KernelSelection selection = find_kernel(fused->request, fused->outputs, state.settings);
    if (selection.kernel != nullptr &&
        (!ordered || alone_selection->kernel == nullptr ||
         preference_rank(fused->request, state.settings, selection.decision.backend) <=
             preference_rank(alone.request, state.settings, alone_selection->decision.backend))) {
      add_step(state, std::move(*fused), std::move(selection), elapsed_ms());
      return;
    }
    // No backend takes the fused form, or the one that does is listed after the one taking the node
    // alone: the node runs alone, its followers as their own steps, and its record says why.
    for (const Node* follower : fused->fused) {
      if (follower != &node) alone.unfused.push_back({follower->op_type, follower->name});
    }
    alone.fused_form_refusals = std::move(selection.decision.refusals);
    if (selection.kernel != nullptr) {
      const int backend = selection.decision.backend;
      alone.fused_form_refusals.push_back(
          {std::string(kBackendRows[backend].name), std::string(selection.decision.variant),
           RefusalKind::not_preferred,
           str_cat("takes the fused form, but comes after ",
                   kBackendRows[alone_selection->decision.backend].name,
                   ", which takes the node alone, in the op family's preference")});
    }
  }
  KernelSelection selection = alone_selection && alone_selection->kernel != nullptr
                                  ? std::move(*alone_selection)
                                  : select_kernel(alone.request, alone.outputs, state.settings);
  add_step(state, std::move(alone), std::move(selection), elapsed_ms());
}

}  // namespace

bool plan_ahead(PlanState& state, const std::string& value, int depth) {
  if (state.planned(value) != nullptr) return true;
  const auto producer = state.producers.find(value);
  if (depth <= 0 || producer == state.producers.end() || state.deferred_values.count(value)) return false;
  const Node& node = state.graph.nodes[producer->second];
  if (state.in_progress.count(&node) || state.fused.count(&node) || state.planned_ahead.count(&node))
    return false;
  for (const std::string& input : node.inputs) {
    if (!input.empty() && !plan_ahead(state, input, depth - 1)) return false;
  }
  // Planning the inputs may have planned this node too (inside a fusion that starts there).
  if (state.planned(value) != nullptr) return true;
  if (state.fused.count(&node) || state.planned_ahead.count(&node)) return false;
  with_context(node_label(node), [&] { plan_node(state, node); });
  state.planned_ahead.insert(&node);
  return state.planned(value) != nullptr;
}

namespace {

// Every pass over `state`, kernels created (and planning's own kernel runs made) on the state's
// thread count.
void run_passes(PlanState& state) {
  const ScopedIntraOpThreads threads(state.settings.threads());
  const std::vector<size_t> order = order_live_nodes(state);
  bind_constants(state);
  bind_inputs(state);
  for (size_t index : order) {
    const Node& node = state.graph.nodes[index];
    // Its work happens inside the step it was fused into, or it was planned ahead of its turn.
    if (state.fused.count(&node) || state.planned_ahead.count(&node)) continue;
    if (defer_if_run_time_shaped(state, node)) continue;
    with_context(node_label(node), [&] { plan_node(state, node); });
  }
  plan_deferred_region(state);
  bind_outputs(state);
  plan_liveness(state);
  for (PlanStep& step : state.steps) step.threads = step.record.threads = state.settings.threads();
}

}  // namespace

std::shared_ptr<Plan> Plan::build_once(const Model& model, const std::vector<Shape>& input_shapes,
                                       const std::vector<Tensor>& input_values, const Settings& settings,
                                       const std::map<std::string, double>& max_errors,
                                       int64_t weigh_factor) {
  const bool parallel = settings.get("execution_mode") == static_cast<int>(ExecutionMode::parallel);
  // Branches overlap with half the run's threads each, or one when the run has one or two (a run on
  // one thread still overlaps branches on the other cores: see Plan::thread_capacity()).
  Settings reduced_settings = settings;
  reduced_settings.set("threads", std::max(1, settings.threads() / 2));
  // `distributed` when `planned` is its model: the Concats it dropped are checked once shapes are
  // known. `notes`: per node name, what its step's record notes.
  const auto plan_model = [&](const Model& planned, const DistributedConcats* distributed,
                              const std::map<std::string, std::string>& notes) {
    auto state = std::make_unique<PlanState>(planned, input_shapes, input_values, settings);
    state->node_notes = notes;
    state->max_errors = max_errors;
    state->weigh_factor = weigh_factor;
    run_passes(*state);
    if (distributed) check_distributed_joins(*state, *distributed);
    if (parallel && reduced_settings.threads() == settings.threads()) {
      plan_parallel_groups(*state, *state);
    } else if (parallel) {
      PlanState reduced(planned, input_shapes, input_values, reduced_settings);
      reduced.node_notes = notes;
      reduced.max_errors = max_errors;
      run_passes(reduced);
      plan_parallel_groups(*state, reduced);
    }
    return state;
  };
  const std::optional<Model> captured = append_captures(model);
  const std::optional<Model> widened = widen_half_storage(captured ? *captured : model);
  const Model& unquantized = widened ? *widened : captured ? *captured : model;
  const std::optional<QuantizedModel> quantized = fuse_qdq_chains(unquantized);
  const Model& source = quantized ? quantized->model : unquantized;
  const std::optional<DistributedConcats> distributed = distribute_concats(source, settings);
  std::unique_ptr<PlanState> planned;  // refers to the model it plans, so declared after `distributed`
  // Per node: what the rewrites changed (the integer ops; a Concat planned as written, and why).
  std::map<std::string, std::string> notes =
      quantized ? quantized->notes : std::map<std::string, std::string>{};
  if (distributed) {
    try {
      std::map<std::string, std::string> distributed_notes = distributed->notes;
      distributed_notes.insert(notes.begin(), notes.end());
      planned = plan_model(distributed->model, &*distributed, distributed_notes);
    } catch (const NeedsInputValue&) {
      throw;
    } catch (const Error& error) {
      // Planned as written instead: where that fails too, its error names the user's own nodes.
      for (const DistributedConcats::Join& join : distributed->joins)
        notes[join.concat] = str_cat("not distributed into the convolutions reading it: ", error.what());
    }
  }
  if (!planned) planned = plan_model(source, nullptr, notes);
  PlanState& state = *planned;

  auto plan = std::make_shared<Plan>();
  plan->steps_ = std::move(state.steps);
  plan->slots_ = std::move(state.slots);
  plan->input_slots_ = std::move(state.input_slots);
  plan->output_slots_ = std::move(state.output_slots);
  plan->folded_nodes_ = state.folded_nodes;
  plan->removed_nodes_ = state.removed_nodes;
  plan->fused_nodes_ = state.fused_nodes;
  plan->reorder_steps_ = state.reorder_steps;
  plan->threads_ = settings.threads();
  plan->thread_capacity_ = parallel ? std::max(settings.threads(), available_cores()) : settings.threads();
  plan->parallel_ = parallel;
  plan->settings_text_ = settings.describe_plan_settings();
  if (parallel) {
    plan->step_graph_ = StepGraph(plan->steps_);
    plan->parallel_groups_ = std::move(state.parallel_groups);
    plan->parallel_summary_ = std::move(state.parallel_summary);
  }
  // A run starts from the constants (those liveness kept); everything else is undefined.
  plan->initial_values_.resize(plan->slots_.size());
  for (size_t i = 0; i < plan->slots_.size(); ++i) {
    if (plan->slots_[i].origin == SlotOrigin::constant) plan->initial_values_[i] = plan->slots_[i].info.value;
  }
  plan->memory_plan_ = plan_memory(*plan);
  return plan;
}

std::shared_ptr<const Plan> Plan::build(const Model& model, const std::vector<Shape>& input_shapes,
                                        const std::vector<Tensor>& input_values, const Settings& settings) {
  std::shared_ptr<Plan> plan;
  if (std::optional<MeasurementPlan> measurement =
          error_budget_measurement(model, input_shapes, input_values, settings)) {
    const auto start = std::chrono::steady_clock::now();
    ErrorBudgetDecision decision;
    // Kept while the plan is built: the Winograd filters it transformed serve the plan too.
    std::shared_ptr<Plan> measured;
    try {
      measured = build_once(model, measurement->input_shapes, input_values, measurement->settings, {},
                            measurement->weigh_factor);
      decision = decide_error_budget(*measured, model.graph.inputs, input_values);
    } catch (const Error& error) {
      // A model that plans at its own shapes but not at batch 1 (a Reshape to a fixed batch) keeps
      // the layers auto takes within Winograd's own bound. Running out of memory is not the model's.
      if (error.kind() == ErrorKind::runtime || error.kind() == ErrorKind::cancelled ||
          error.kind() == ErrorKind::deadline_exceeded)
        throw;
      decision = ErrorBudgetDecision{};
      decision.budget = kConvErrorBudget;
      decision.summary =
          str_cat("error budget not spent: planning the model at batch 1 failed: ", error.what());
    }
    decision.measure_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    plan = build_once(model, input_shapes, input_values, settings, decision.max_errors, 0);
    for (PlanStep& step : plan->steps_) {
      const auto layer = decision.layers.find(step.record.node_name);
      if (layer != decision.layers.end()) step.record.error_share = layer->second;
    }
    plan->error_budget_ = std::move(decision);
  } else {
    plan = build_once(model, input_shapes, input_values, settings, {}, 0);
  }
  if (settings.max_verbose() >= 2) report_planned_steps(settings, *plan);
  return plan;
}

}  // namespace kiln
