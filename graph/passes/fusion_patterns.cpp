#include "graph/passes/fusion_patterns.h"

#include <algorithm>
#include <cmath>

namespace kiln {
namespace {

const TensorInfo* planned_info(const PlanState& state, const std::string& name) {
  const Slot* slot = state.planned(name);
  return slot == nullptr ? nullptr : &slot->info;
}

}  // namespace

std::optional<double> scalar_constant(const PlanState& state, const std::string& name) {
  const TensorInfo* planned = planned_info(state, name);
  if (planned == nullptr) return std::nullopt;
  const TensorInfo& info = *planned;
  if (!info.is_constant() || info.value.numel() != 1 || !is_floating(info.dtype)) return std::nullopt;
  return info.value.double_at(0);
}

std::vector<const Node*> match_gelu(const PlanState& state, const std::string& x) {
  auto readers = state.readers.find(x);
  if (readers == state.readers.end() || readers->second.size() != 2) return {};
  for (const ValueInfo& output : state.graph.outputs) {
    if (output.name == x) return {};
  }
  const Node* div = nullptr;
  for (size_t index : readers->second) {
    const Node& reader = state.graph.nodes[index];
    if (reader.op_type == "Div" && reader.inputs.size() == 2 && reader.inputs[0] == x) div = &reader;
  }
  auto near = [](std::optional<double> value, double expected) {
    return value && std::abs(*value - expected) < 1e-3;
  };
  if (div == nullptr || !near(scalar_constant(state, div->inputs[1]), std::sqrt(2.0))) return {};
  const Node* erf = sole_reader(state, div->outputs[0]);
  if (erf == nullptr || erf->op_type != "Erf") return {};
  const Node* add = sole_reader(state, erf->outputs[0]);
  if (add == nullptr || add->op_type != "Add" || add->inputs.size() != 2) return {};
  const std::string& one = add->inputs[0] == erf->outputs[0] ? add->inputs[1] : add->inputs[0];
  if (!near(scalar_constant(state, one), 1.0)) return {};
  const Node* mul = sole_reader(state, add->outputs[0]);
  if (mul == nullptr || mul->op_type != "Mul" || mul->inputs.size() != 2) return {};
  const std::string& other = mul->inputs[0] == add->outputs[0] ? mul->inputs[1] : mul->inputs[0];
  if (other != x) return {};
  const Node* half = sole_reader(state, mul->outputs[0]);
  if (half == nullptr || half->op_type != "Mul" || half->inputs.size() != 2) return {};
  const std::string& scale = half->inputs[0] == mul->outputs[0] ? half->inputs[1] : half->inputs[0];
  if (!near(scalar_constant(state, scale), 0.5)) return {};
  for (const Node* node : {div, erf, add, mul, half}) {
    if (!is_default_domain(node->domain) || node->outputs.size() != 1) return {};
  }
  return {div, erf, add, mul, half};
}

std::optional<LayerNormMatch> match_layer_norm(const PlanState& state, const Node& mean) {
  if (mean.inputs.empty()) return std::nullopt;
  const Slot* planned_x = state.planned(mean.inputs[0]);
  if (planned_x == nullptr || planned_x->layout != Layout::plain) return std::nullopt;
  return match_layer_norm(state, mean, planned_x->info);
}

std::optional<LayerNormMatch> match_layer_norm(const PlanState& state, const Node& mean,
                                               const TensorInfo& x) {
  if (mean.op_type != "ReduceMean" || !is_default_domain(mean.domain) || mean.inputs.empty()) return std::nullopt;
  if (x.dtype != DType::f32 || x.shape.empty()) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  auto over_last_axis = [&](const Node& reduce) {
    // An attribute before opset 18, a constant input from then on.
    std::vector<int64_t> axes = reduce.attributes.get_ints("axes");
    if (reduce.inputs.size() == 2) {
      const Slot* planned_axes = state.planned(reduce.inputs[1]);
      if (planned_axes == nullptr || !planned_axes->info.is_constant()) return false;
      axes = planned_axes->info.value.to_int64_vector();
    } else if (reduce.inputs.size() != 1) {
      return false;
    }
    return axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1) &&
           reduce.attributes.get_int("keepdims", 1) == 1;
  };
  if (!over_last_axis(mean)) return std::nullopt;
  auto other_input = [](const Node& node, const std::string& known) {
    return node.inputs[0] == known ? node.inputs[1] : node.inputs[0];
  };
  auto is = [](const Node* node, const char* op) {
    return node != nullptr && node->op_type == op && node->outputs.size() == 1 &&
           is_default_domain(node->domain);
  };
  // The values inside vanish into the step: none may be a graph output.
  const auto is_graph_output = [&](const std::string& value) {
    return std::any_of(state.graph.outputs.begin(), state.graph.outputs.end(),
                       [&](const ValueInfo& output) { return output.name == value; });
  };
  if (is_graph_output(mean.outputs[0])) return std::nullopt;
  // The centred value d is read by Pow and by Div.
  auto readers = state.readers.find(mean.outputs[0]);
  if (readers == state.readers.end() || readers->second.size() != 1) return std::nullopt;
  const Node* sub = &state.graph.nodes[readers->second[0]];
  if (!is(sub, "Sub") || sub->inputs.size() != 2 || sub->inputs[0] != mean.inputs[0] ||
      sub->inputs[1] != mean.outputs[0]) {
    return std::nullopt;
  }
  if (is_graph_output(sub->outputs[0])) return std::nullopt;
  auto d_readers = state.readers.find(sub->outputs[0]);
  if (d_readers == state.readers.end() || d_readers->second.size() != 2) return std::nullopt;
  const Node* pow = nullptr;
  const Node* div = nullptr;
  for (size_t index : d_readers->second) {
    const Node* reader = &state.graph.nodes[index];
    if (is(reader, "Pow") && reader->inputs.size() == 2 && reader->inputs[0] == sub->outputs[0]) pow = reader;
    if (is(reader, "Div") && reader->inputs.size() == 2 && reader->inputs[0] == sub->outputs[0]) div = reader;
  }
  if (pow == nullptr || div == nullptr || scalar_constant(state, pow->inputs.at(1)) != 2.0)
    return std::nullopt;
  const Node* variance = sole_reader(state, pow->outputs[0]);
  if (!is(variance, "ReduceMean") || !over_last_axis(*variance)) return std::nullopt;
  const Node* add_eps = sole_reader(state, variance->outputs[0]);
  if (!is(add_eps, "Add") || add_eps->inputs.size() != 2) return std::nullopt;
  const std::optional<double> epsilon = scalar_constant(state, other_input(*add_eps, variance->outputs[0]));
  const Node* sqrt = sole_reader(state, add_eps->outputs[0]);
  if (!epsilon || !is(sqrt, "Sqrt") || sole_reader(state, sqrt->outputs[0]) != div ||
      div->inputs[1] != sqrt->outputs[0]) {
    return std::nullopt;
  }
  const Node* mul = sole_reader(state, div->outputs[0]);
  if (!is(mul, "Mul") || mul->inputs.size() != 2) return std::nullopt;
  const Node* add_bias = sole_reader(state, mul->outputs[0]);
  if (!is(add_bias, "Add") || add_bias->inputs.size() != 2) return std::nullopt;
  LayerNormMatch match;
  match.scale = other_input(*mul, div->outputs[0]);
  match.bias = other_input(*add_bias, mul->outputs[0]);
  for (const std::string& name : {match.scale, match.bias}) {
    const TensorInfo* info = planned_info(state, name);
    if (info == nullptr) return std::nullopt;
    if (!info->is_constant() || info->dtype != DType::f32 || info->shape != Shape{x.shape.back()})
      return std::nullopt;
  }
  match.epsilon = static_cast<float>(*epsilon);
  match.nodes = {sub, pow, variance, add_eps, sqrt, div, mul, add_bias};
  return match;
}

bool is_onnx_op(const Node* node, std::string_view op_type) {
  return node != nullptr && node->op_type == op_type && is_default_domain(node->domain);
}

const Node* sole_reader(const PlanState& state, const std::string& value) {
  for (const ValueInfo& output : state.graph.outputs) {
    if (output.name == value) return nullptr;
  }
  auto it = state.readers.find(value);
  if (it == state.readers.end() || it->second.size() != 1) return nullptr;
  return &state.graph.nodes[it->second[0]];
}

}  // namespace kiln
