// What the planning passes share while one plan is built: the model, input shapes and settings it
// is built for, the plan's parts as they fill up (slots, steps, counters), and the indexes the
// passes keep over them: which slot holds each value name, which live nodes read each value,
// which nodes were planned inside another, which converted copies of values exist already.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backends/settings.h"
#include "graph/graph.h"
#include "graph/plan.h"

namespace kiln {

struct PlanState {
  PlanState(const Model& model, const std::vector<Shape>& input_shapes,
            const std::vector<Tensor>& input_values, const Settings& settings)
      : model(model),
        graph(model.graph),
        input_shapes(input_shapes),
        input_values(input_values),
        settings(settings),
        backend_options(read_backend_options(settings)) {}

  const Model& model;
  const Graph& graph;
  const std::vector<Shape>& input_shapes;
  const std::vector<Tensor>& input_values;  // empty, or one per graph input (bound values)
  const Settings& settings;
  // Every backend's options under `settings`, read once; each request of the plan carries them.
  std::shared_ptr<const BackendOptionSet> backend_options;

  // The plan's parts (Plan::build moves them into the Plan).
  std::vector<Slot> slots;
  std::vector<PlanStep> steps;
  std::vector<int> input_slots;
  std::vector<int> output_slots;
  int folded_nodes = 0;
  int removed_nodes = 0;
  int fused_nodes = 0;
  int reorder_steps = 0;
  std::vector<ParallelGroup> parallel_groups;  // parallel mode (passes/parallel.cpp)
  std::string parallel_summary;

  std::unordered_map<std::string, int> slot_by_name;
  std::vector<std::vector<size_t>> input_dependencies;           // per slot: graph inputs it derives from
  std::unordered_map<std::string, std::vector<size_t>> readers;  // value name -> live reader nodes
  std::unordered_map<std::string, size_t> producers;             // value name -> producing node
  std::unordered_set<const Node*> fused;                         // nodes planned inside another
  std::unordered_set<const Node*> planned_ahead;                 // planned before their turn (plan_ahead)
  std::unordered_set<const Node*> in_progress;                   // being planned now
  std::map<std::pair<int, Layout>, int> reordered;               // (slot, layout) -> converted slot
  // Each control-flow node's subgraphs, planned by the node's inputs as op_spec first saw them.
  mutable std::map<const Node*, std::vector<std::pair<std::string, std::shared_ptr<const Subgraph>>>>
      subgraphs;
  // Nodes left for the run to plan (passes/deferred.cpp), in order, and the values they produce.
  std::vector<const Node*> deferred;
  std::unordered_set<std::string> deferred_values;
  std::deque<Node> synthesized;  // nodes planning made (a deferred region's step), kept while it plans
  std::map<std::string, std::string> node_notes;  // node name -> note its step carries (a model rewrite's)
  // The error budget's allowances (KernelRequest::max_error) by node name; and in the plan the
  // budget measures on, how many times its batch the plan it decides for has: each step's less
  // accurate forms are weighed there (0: the steps describe none).
  std::map<std::string, double> max_errors;
  int64_t weigh_factor = 0;
  bool warned_of_export = false;  // a warning about how the model was exported went to stderr
  // Values whose size a step finds only when it runs (Kernel::sizes_outputs) -> that step's node label.
  std::map<std::string, std::string> run_time_sized;
  // A whole-pattern form (attention, ResidualLayerNorm, ChannelShuffle) that was refused, by the name
  // of the node it starts at: that node's step carries it as its unfused form.
  struct RefusedForm {
    std::vector<FusedNode> nodes;
    std::vector<Refusal> refusals;
  };
  std::map<std::string, RefusedForm> refused_forms;

  // Adds a slot; a non-empty `name` becomes the value name readers find it by.
  int add_slot(const std::string& name, TensorInfo info, SlotOrigin origin, Layout layout = Layout::plain,
               std::vector<size_t> dependencies = {});
  // The slot of a planned value; throws kiln::Error (runtime) for a name planning has not reached.
  int slot_of(const std::string& name) const;
  // A planned value's slot, or null when it is not planned (yet).
  const Slot* planned(const std::string& name) const;
  // The graph inputs the values in `slots` derive from, each once.
  std::vector<size_t> dependencies_of(const std::vector<int>& slots) const;

  // What the op layer sees of `node`: type, domain, opset, attributes and its planned inputs.
  OpSpec op_spec(const Node& node) const;
  OpSpec op_spec_without_inputs(const Node& node) const;
  // The subgraphs of `node`'s graph attributes, planned for `spec`'s inputs (made once per node).
  std::vector<std::pair<std::string, std::shared_ptr<const Subgraph>>> subgraphs_of(const Node& node,
                                                                                    const OpSpec& spec) const;
};

std::string node_label(const Node& node);

}  // namespace kiln
