#include "graph/compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"

namespace kiln {
namespace {

// Per value X that `model` quantizes and dequantizes again, that dequantized value.
std::map<std::string, std::string> dequantized_copies(const Model& model) {
  std::map<std::string, const Node*> producer;
  for (const Node& node : model.graph.nodes) {
    for (const std::string& output : node.outputs) producer[output] = &node;
  }
  std::map<std::string, std::string> copies;
  for (const Node& node : model.graph.nodes) {
    if (node.op_type != "DequantizeLinear" || !is_default_domain(node.domain) || node.inputs.empty() ||
        node.outputs.empty())
      continue;
    const auto quantize = producer.find(node.inputs[0]);
    if (quantize == producer.end() || quantize->second->op_type != "QuantizeLinear" || quantize->second->inputs.empty())
      continue;
    copies.emplace(quantize->second->inputs[0], node.outputs[0]);
  }
  return copies;
}

ValueComparison compare_values(const std::string& name, const std::string& b_name, const Tensor& a, const Tensor& b) {
  ValueComparison result{name, b_name, a.shape()};
  double signal = 0;
  double noise = 0;
  double total = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.double_at(i);
    const double error = std::abs(x - b.double_at(i));
    signal += x * x;
    noise += error * error;
    total += error;
    result.max_abs_error = std::max(result.max_abs_error, error);
  }
  result.mean_abs_error = a.numel() > 0 ? total / static_cast<double>(a.numel()) : 0;
  if (noise > 0) {
    result.sqnr_db = signal > 0 ? 10 * std::log10(signal / noise) : -std::numeric_limits<double>::infinity();
  }
  return result;
}

TensorMap run_with(const Model& model, const Settings& settings, const TensorMap& inputs, const char* which) {
  return with_context(str_cat("model ", which), [&] {
    Session session(model, settings);
    TensorMap given;
    for (const ValueInfo& input : session.inputs()) {
      const auto found = inputs.find(input.name);
      KILN_CHECK(found != inputs.end(), invalid_argument, "no value for its input '", input.name, "'");
      given[input.name] = found->second;
    }
    return session.run(given);
  });
}

}  // namespace

std::vector<std::string> computed_values(const Model& model) {
  std::vector<std::string> values;
  for (const Node& node : model.graph.nodes) {
    for (const std::string& output : node.outputs) {
      if (!output.empty()) values.push_back(output);
    }
  }
  return values;
}

Model with_outputs(Model model, const std::vector<std::string>& values) {
  std::set<std::string> outputs;
  for (const ValueInfo& output : model.graph.outputs) outputs.insert(output.name);
  for (const std::string& value : values) {
    if (!outputs.insert(value).second) continue;
    ValueInfo output;
    output.name = value;
    model.graph.outputs.push_back(std::move(output));
  }
  return model;
}

std::vector<std::pair<std::string, std::string>> matching_values(const Model& a, const Model& b) {
  const std::map<std::string, std::string> quantized = dequantized_copies(b);
  const std::map<std::string, std::string> quantized_in_a = dequantized_copies(a);
  const std::vector<std::string> b_values = computed_values(b);
  const std::set<std::string> in_b(b_values.begin(), b_values.end());
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const std::string& value : computed_values(a)) {
    // A value A quantizes is compared as its dequantized copy (matched by name below); exposing the
    // value itself would keep A from planning the integer step computing it.
    if (quantized_in_a.count(value) != 0) continue;
    // The dequantized copy first: exposing B's own value would keep B from planning it as an
    // integer step.
    if (const auto copy = quantized.find(value); copy != quantized.end()) {
      pairs.emplace_back(value, copy->second);
    } else if (in_b.count(value) != 0) {
      pairs.emplace_back(value, value);
    }
  }
  return pairs;
}

std::vector<ValueComparison> compare_runs(const Model& a, const Settings& a_settings, const Model& b,
                                          const Settings& b_settings, const TensorMap& inputs) {
  const std::vector<std::pair<std::string, std::string>> pairs = matching_values(a, b);
  KILN_CHECK(!pairs.empty(), invalid_argument,
             "the two models compute no value of the same name (nor one quantizes the other's)");
  std::vector<std::string> a_names, b_names;
  for (const auto& [a_name, b_name] : pairs) {
    a_names.push_back(a_name);
    b_names.push_back(b_name);
  }
  const TensorMap a_values = run_with(with_outputs(a, a_names), a_settings, inputs, "A");
  const TensorMap b_values = run_with(with_outputs(b, b_names), b_settings, inputs, "B");
  std::set<std::string> a_outputs;
  for (const ValueInfo& output : a.graph.outputs) a_outputs.insert(output.name);
  std::vector<ValueComparison> results;
  for (const auto& [a_name, b_name] : pairs) {
    const Tensor& x = a_values.at(a_name);
    const Tensor& y = b_values.at(b_name);
    if (!x.defined() || !y.defined() || x.is_sequence() || y.is_sequence() || x.dtype() != DType::f32 ||
        y.dtype() != DType::f32 || x.shape() != y.shape())
      continue;
    ValueComparison result = compare_values(a_name, b_name, x, y);
    result.is_output = a_outputs.count(a_name) != 0;
    results.push_back(std::move(result));
  }
  std::stable_sort(results.begin(), results.end(),
                   [](const ValueComparison& l, const ValueComparison& r) { return l.sqnr_db < r.sqnr_db; });
  return results;
}

}  // namespace kiln
