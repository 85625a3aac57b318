// Control-flow nodes read values of enclosing graphs inside their subgraphs (ONNX's outer scope).
// This pass makes those reads ordinary inputs: each such node gets, after its own inputs, every
// value its subgraphs (and theirs, nested) read but do not define. Ordering, liveness and the
// memory plan then see the dependency like any other, and the subgraph is planned as a model whose
// inputs are its own followed by these (graph/subgraph_runner.h).
#include <algorithm>
#include <set>

#include "graph/passes/passes.h"
#include "ops/control_flow.h"

namespace kiln {
namespace {

bool has_subgraphs(const Node& node) {
  for (const auto& [name, attribute] : node.attributes.all()) {
    if (attribute.g != nullptr || !attribute.graphs.empty()) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> outer_scope_reads(const Graph& graph) {
  std::set<std::string> defined;
  for (const ValueInfo& input : graph.inputs) defined.insert(input.name);
  for (const auto& [name, value] : graph.initializers) defined.insert(name);
  for (const Node& node : graph.nodes) defined.insert(node.outputs.begin(), node.outputs.end());
  std::vector<std::string> reads;
  std::set<std::string> seen;
  const auto read = [&](const std::string& name) {
    if (!name.empty() && !defined.count(name) && seen.insert(name).second) reads.push_back(name);
  };
  for (const Node& node : graph.nodes) {
    for (const std::string& input : node.inputs) read(input);
    for (const auto& [name, attribute] : node.attributes.all()) {
      if (attribute.g != nullptr) {
        for (const std::string& inner : outer_scope_reads(*attribute.g)) read(inner);
      }
      for (const auto& branch : attribute.graphs) {
        for (const std::string& inner : outer_scope_reads(*branch)) read(inner);
      }
    }
  }
  // A subgraph may return an enclosing graph's value as it is.
  for (const ValueInfo& output : graph.outputs) read(output.name);
  return reads;
}

std::optional<Model> append_captures(const Model& model) {
  const auto needs = [](const Node& node) { return has_subgraphs(node); };
  if (std::none_of(model.graph.nodes.begin(), model.graph.nodes.end(), needs)) return std::nullopt;
  std::set<std::string> defined;
  for (const ValueInfo& input : model.graph.inputs) defined.insert(input.name);
  for (const auto& [name, value] : model.graph.initializers) defined.insert(name);
  for (const Node& node : model.graph.nodes) defined.insert(node.outputs.begin(), node.outputs.end());
  Model result = model;
  for (Node& node : result.graph.nodes) {
    if (!has_subgraphs(node)) continue;
    with_context(node_label(node), [&] {
      std::vector<std::string> captures;
      std::set<std::string> seen;
      size_t body_inputs = 0;
      for (const auto& [name, attribute] : node.attributes.all()) {
        std::vector<std::shared_ptr<const Graph>> graphs = attribute.graphs;
        if (attribute.g != nullptr) graphs.push_back(attribute.g);
        for (const auto& graph : graphs) {
          if (name == "body") body_inputs = graph->inputs.size();
          for (const std::string& value : outer_scope_reads(*graph)) {
            KILN_CHECK(defined.count(value), invalid_model, "subgraph '", name, "' reads '", value,
                       "', which neither it nor an enclosing graph defines");
            if (seen.insert(value).second) captures.push_back(value);
          }
        }
      }
      const auto opset = model.opsets.find(is_default_domain(node.domain) ? "" : node.domain);
      const size_t own = static_cast<size_t>(
          own_input_count(node.op_type, opset == model.opsets.end() ? 0 : opset->second, body_inputs));
      // A node already given its captures (a deferred region planning the model's own nodes) keeps them.
      const bool captured = node.inputs.size() == own + captures.size() && !captures.empty() &&
                            std::equal(captures.begin(), captures.end(),
                                       node.inputs.begin() + static_cast<std::ptrdiff_t>(own));
      if (captured) return;
      KILN_CHECK(node.inputs.size() <= own, invalid_model, "has ", node.inputs.size(),
                 " inputs, its subgraph takes ", own);
      node.inputs.resize(own);
      node.inputs.insert(node.inputs.end(), captures.begin(), captures.end());
    });
  }
  return result;
}

}  // namespace kiln
