#include <algorithm>
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "graph/passes/passes.h"

namespace kiln {

std::vector<size_t> order_live_nodes(PlanState& state) {
  const Graph& graph = state.graph;
  std::unordered_map<std::string, size_t> producer;
  std::unordered_set<std::string> sources;
  for (const ValueInfo& input : graph.inputs) sources.insert(input.name);
  for (const auto& [name, tensor] : graph.initializers) sources.insert(name);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    for (const std::string& output : node.outputs) {
      if (output.empty()) continue;
      KILN_CHECK(!sources.count(output), invalid_model, node_label(node), ": output '", output,
                 "' redefines a graph input or initializer");
      auto [it, inserted] = producer.emplace(output, i);
      KILN_CHECK(inserted, invalid_model, node_label(node), ": output '", output, "' is also produced by ",
                 node_label(graph.nodes[it->second]));
    }
  }
  for (const Node& node : graph.nodes) {
    for (const std::string& input : node.inputs) {
      KILN_CHECK(input.empty() || sources.count(input) || producer.count(input), invalid_model,
                 node_label(node), ": input '", input,
                 "' is not a graph input, an initializer, or the output of any node");
    }
  }
  // Liveness: walk back from the graph outputs.
  std::vector<bool> live(graph.nodes.size(), false);
  std::vector<size_t> pending;
  for (const ValueInfo& output : graph.outputs) {
    auto it = producer.find(output.name);
    if (it != producer.end()) {
      pending.push_back(it->second);
    } else {
      KILN_CHECK(sources.count(output.name), invalid_model, "graph output '", output.name,
                 "' is not produced by any node");
    }
  }
  while (!pending.empty()) {
    const size_t index = pending.back();
    pending.pop_back();
    if (live[index]) continue;
    live[index] = true;
    for (const std::string& input : graph.nodes[index].inputs) {
      auto it = producer.find(input);
      if (it != producer.end() && !live[it->second]) pending.push_back(it->second);
    }
  }
  // Kahn's algorithm over live nodes, keeping file order among ready nodes.
  std::vector<int> missing(graph.nodes.size(), 0);
  std::unordered_map<std::string, std::vector<size_t>> consumers;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!live[i]) continue;
    for (const std::string& input : graph.nodes[i].inputs) {
      if (producer.count(input)) {
        ++missing[i];
        consumers[input].push_back(i);
      }
    }
  }
  // Nodes without inputs (Constant) go first, so fusion finds e.g. Clip's bounds already planned.
  std::deque<size_t> ready;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (live[i] && missing[i] == 0 && graph.nodes[i].inputs.empty()) ready.push_back(i);
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (live[i] && missing[i] == 0 && !graph.nodes[i].inputs.empty()) ready.push_back(i);
  }
  state.readers = consumers;
  state.producers = producer;
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t index = ready.front();
    ready.pop_front();
    order.push_back(index);
    for (const std::string& output : graph.nodes[index].outputs) {
      auto it = consumers.find(output);
      if (it == consumers.end()) continue;
      for (size_t consumer : it->second) {
        if (--missing[consumer] == 0) ready.push_back(consumer);
      }
    }
  }
  const size_t live_count = static_cast<size_t>(std::count(live.begin(), live.end(), true));
  if (order.size() != live_count) {
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      if (live[i] && missing[i] > 0) {
        fail(ErrorKind::invalid_model, "the graph has a cycle through ", node_label(graph.nodes[i]));
      }
    }
  }
  return order;
}

}  // namespace kiln
