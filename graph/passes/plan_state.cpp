#include "graph/passes/plan_state.h"

#include <algorithm>

#include "graph/subgraph_runner.h"
#include "ops/control_flow.h"

namespace kiln {

std::string node_label(const Node& node) {
  return str_cat("node '", node.name, "' (", node.op_type, ")");
}

int PlanState::add_slot(const std::string& name, TensorInfo info, SlotOrigin origin, Layout layout,
                        std::vector<size_t> dependencies) {
  const int slot = static_cast<int>(slots.size());
  slots.push_back({name, std::move(info), layout, origin});
  input_dependencies.push_back(std::move(dependencies));
  if (!name.empty()) slot_by_name[name] = slot;
  return slot;
}

int PlanState::slot_of(const std::string& name) const {
  auto it = slot_by_name.find(name);
  KILN_CHECK(it != slot_by_name.end(), runtime, "value '", name, "' is read before it is planned");
  return it->second;
}

const Slot* PlanState::planned(const std::string& name) const {
  auto it = slot_by_name.find(name);
  return it == slot_by_name.end() ? nullptr : &slots[static_cast<size_t>(it->second)];
}

std::vector<size_t> PlanState::dependencies_of(const std::vector<int>& slot_ids) const {
  std::vector<size_t> dependencies;
  for (int slot : slot_ids) {
    if (slot < 0) continue;
    for (size_t input : input_dependencies[static_cast<size_t>(slot)]) {
      if (std::find(dependencies.begin(), dependencies.end(), input) == dependencies.end())
        dependencies.push_back(input);
    }
  }
  return dependencies;
}

OpSpec PlanState::op_spec_without_inputs(const Node& node) const {
  OpSpec spec;
  spec.op_type = node.op_type;
  spec.domain = node.domain;
  spec.node_name = node.name;
  auto opset = model.opsets.find(is_default_domain(node.domain) ? "" : node.domain);
  spec.opset = opset == model.opsets.end() ? 0 : opset->second;
  spec.attributes = &node.attributes;
  spec.num_outputs = static_cast<int>(node.outputs.size());
  return spec;
}

OpSpec PlanState::op_spec(const Node& node) const {
  OpSpec spec = op_spec_without_inputs(node);
  for (const std::string& input : node.inputs) {
    if (input.empty()) {
      spec.inputs.emplace_back();
      continue;
    }
    TensorInfo info = slots[static_cast<size_t>(slot_of(input))].info;
    // A value sized when it runs has only a bound for a shape here.
    if (run_time_sized.count(input)) {
      info.shape_known = false;
      info.shape.clear();
    }
    spec.inputs.push_back(std::move(info));
  }
  spec.subgraphs = subgraphs_of(node, spec);
  return spec;
}

std::vector<std::pair<std::string, std::shared_ptr<const Subgraph>>> PlanState::subgraphs_of(
    const Node& node, const OpSpec& spec) const {
  if (const auto found = subgraphs.find(&node); found != subgraphs.end()) return found->second;
  std::vector<std::pair<std::string, std::shared_ptr<const Subgraph>>> planned;
  for (const auto& [name, attribute] : node.attributes.all()) {
    if (attribute.g == nullptr) continue;
    const size_t body_inputs = node.op_type == "If" ? 0 : attribute.g->inputs.size();
    const size_t own = std::min(node.inputs.size(),
                                static_cast<size_t>(own_input_count(node.op_type, spec.opset, body_inputs)));
    std::vector<std::string> captures(node.inputs.begin() + static_cast<std::ptrdiff_t>(own),
                                      node.inputs.end());
    std::vector<TensorInfo> capture_infos(spec.inputs.begin() + static_cast<std::ptrdiff_t>(own),
                                          spec.inputs.end());
    planned.emplace_back(
        name, std::make_shared<PlannedSubgraph>(attribute.g, model.opsets, model.producer,
                                                std::move(captures), std::move(capture_infos), settings,
                                                str_cat(node_label(node), " subgraph '", name, "'"),
                                                node.op_type == "Loop" && name == "body"));
  }
  subgraphs[&node] = planned;
  return planned;
}

}  // namespace kiln
