// Values whose shape only the run knows (NonZero's or NonMaxSuppression's output, an If whose
// branches differ, a Loop's stacked outputs, a sequence's element of unknown shape) cannot be
// planned on. The nodes that read them, and every node after them that depends on those, are left
// out of the plan and gathered into one region, planned when the run reaches it: a step that plans
// the region as a model of its own for the shapes the run produced (once per set of shapes, kept),
// and runs it. What does not depend on such values is planned ahead as usual.
#include <chrono>
#include <set>

#include "graph/passes/passes.h"

namespace kiln {

bool defer_if_run_time_shaped(PlanState& state, const Node& node) {
  const OpSchema* row = find_op_schema(node.op_type, node.domain);
  const bool reads_any_value = row != nullptr && row->reads_any_value;
  bool defer = false;
  for (const std::string& input : node.inputs) {
    if (input.empty()) continue;
    if (state.deferred_values.count(input)) {
      defer = true;
    } else if (!reads_any_value) {
      const Slot* slot = state.planned(input);
      defer = defer || state.run_time_sized.count(input) ||
              (slot != nullptr && slot->info.kind == ValueKind::tensor && !slot->info.shape_known);
    }
  }
  if (!defer) return false;
  state.deferred.push_back(&node);
  for (const std::string& output : node.outputs) {
    if (!output.empty()) state.deferred_values.insert(output);
  }
  return true;
}

void plan_deferred_region(PlanState& state) {
  if (state.deferred.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  auto region = std::make_shared<Graph>();
  region->name = str_cat("deferred from ", node_label(*state.deferred.front()));
  Node& step_node = state.synthesized.emplace_back();
  step_node.name = str_cat(state.deferred.front()->name, ":deferred");
  step_node.op_type = "DeferredRegion";
  std::set<std::string> seen;
  for (const Node* node : state.deferred) {
    region->nodes.push_back(*node);
    for (const std::string& input : node->inputs) {
      // What the region reads from the planned graph: its captures (inputs of the step).
      if (input.empty() || state.deferred_values.count(input) || !seen.insert(input).second) continue;
      step_node.inputs.push_back(input);
    }
  }
  for (const ValueInfo& output : state.graph.outputs) {
    if (!state.deferred_values.count(output.name)) continue;
    KILN_CHECK(output.dtype != DType::undefined, invalid_model, "graph output '", output.name,
               "' declares no element type, and its shape depends on values only the run knows");
    region->outputs.push_back(output);
    step_node.outputs.push_back(output.name);
  }
  Attribute body;
  body.type = Attribute::Type::g;
  body.g = region;
  step_node.attributes.set("body", std::move(body));

  const OpSpec spec = state.op_spec(step_node);
  std::vector<TensorInfo> outputs;
  for (const ValueInfo& output : region->outputs) {
    TensorInfo info{output.dtype, {}, {}};
    info.kind = output.kind;
    info.shape_known = false;
    outputs.push_back(info);
  }
  NodeForm form = unfused_form(state, step_node, spec, std::move(outputs));
  const size_t count = state.deferred.size();
  form.note = str_cat("planned when it runs, for the shapes the run produces: ", count,
                      count == 1 ? " node" : " nodes", " from ", node_label(*state.deferred.front()),
                      " on, which read values whose shape only the run knows");
  KernelSelection selection = select_kernel(form.request, form.outputs, state.settings);
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  add_step(state, std::move(form), std::move(selection), elapsed_ms);
}

}  // namespace kiln
