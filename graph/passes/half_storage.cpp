// Models stored in half precision (float16 or bfloat16 initializers, inputs or outputs, saved so to
// halve their size) are computed in float32: kernels' fast paths are float32 (bf16 where a
// precision setting asks), and float32 arithmetic only adds accuracy.
#include <algorithm>
#include <string>

#include "graph/passes/passes.h"
#include "ops/onnx_dtype.h"

namespace kiln {
namespace {

// ONNX's TensorProto.DataType codes this pass reads and writes.
constexpr int64_t kOnnxFloat = 1;
constexpr int64_t kOnnxFloat16 = 10;
constexpr int64_t kOnnxBFloat16 = 16;

bool is_half(DType dtype) {
  return dtype == DType::f16 || dtype == DType::bf16;
}

Tensor widened(const Tensor& value) {
  if (!is_half(value.dtype())) return value;
  Tensor result = Tensor::empty(DType::f32, value.shape());
  float* dst = result.data<float>();
  for (int64_t i = 0; i < value.numel(); ++i) {
    dst[i] = value.dtype() == DType::f16 ? float16_to_float(value.data<Float16>()[i])
                                         : bfloat16_to_float(value.data<BFloat16>()[i]);
  }
  return result;
}

// Renames value `from` to `to` wherever a node reads or writes it.
void rename_value(Graph& graph, const std::string& from, const std::string& to) {
  for (Node& node : graph.nodes) {
    for (std::string& name : node.inputs)
      if (name == from) name = to;
    for (std::string& name : node.outputs)
      if (name == from) name = to;
  }
}

Node cast_node(std::string name, std::string input, std::string output, int64_t to) {
  Node node;
  node.name = std::move(name);
  node.op_type = "Cast";
  node.inputs = {std::move(input)};
  node.outputs = {std::move(output)};
  node.attributes.set_int("to", to);
  return node;
}

// Attributes that name a half dtype or hold a half value now say float32.
void widen_attributes(Node& node) {
  for (const char* dtype_attribute : {"to", "dtype"}) {
    const Attribute* attribute = node.attributes.find(dtype_attribute);
    if (attribute != nullptr && attribute->type == Attribute::Type::i &&
        is_half(dtype_from_onnx(attribute->i)))
      node.attributes.set_int(dtype_attribute, kOnnxFloat);
  }
  for (const char* value_attribute : {"value"}) {
    const Attribute* attribute = node.attributes.find(value_attribute);
    if (attribute != nullptr && attribute->type == Attribute::Type::t && is_half(attribute->t.dtype())) {
      Attribute copy = *attribute;
      copy.t = widened(copy.t);
      node.attributes.set(value_attribute, std::move(copy));
    }
  }
}

}  // namespace

std::optional<Model> widen_half_storage(const Model& model) {
  const Graph& graph = model.graph;
  bool stores_half = false;
  for (const auto& [name, value] : graph.initializers) stores_half = stores_half || is_half(value.dtype());
  for (const ValueInfo& info : graph.inputs) stores_half = stores_half || is_half(info.dtype);
  for (const ValueInfo& info : graph.outputs) stores_half = stores_half || is_half(info.dtype);
  if (!stores_half) return std::nullopt;

  Model result = model;
  Graph& widened_graph = result.graph;
  for (auto& [name, value] : widened_graph.initializers) value = widened(value);
  for (Node& node : widened_graph.nodes) widen_attributes(node);
  for (ValueInfo& info : widened_graph.value_info) {
    if (is_half(info.dtype)) info.dtype = DType::f32;
  }
  // Half inputs are read through a Cast to float32 ...
  std::vector<Node> casts_in;
  for (const ValueInfo& input : widened_graph.inputs) {
    if (!is_half(input.dtype)) continue;
    const std::string wide = input.name + ":float32";
    rename_value(widened_graph, input.name, wide);
    casts_in.push_back(cast_node(input.name + ":to_float32", input.name, wide, kOnnxFloat));
  }
  // ... and half outputs computed in float32, then cast back to what the model declares.
  for (const ValueInfo& output : widened_graph.outputs) {
    if (!is_half(output.dtype)) continue;
    const bool is_input = std::any_of(widened_graph.inputs.begin(), widened_graph.inputs.end(),
                                      [&](const ValueInfo& input) { return input.name == output.name; });
    if (is_input) continue;  // handed back as given
    const std::string wide = output.name + ":float32";
    rename_value(widened_graph, output.name, wide);
    widened_graph.nodes.push_back(cast_node(output.name + ":to_" + std::string(dtype_name(output.dtype)),
                                            wide, output.name,
                                            output.dtype == DType::f16 ? kOnnxFloat16 : kOnnxBFloat16));
  }
  widened_graph.nodes.insert(widened_graph.nodes.begin(), casts_in.begin(), casts_in.end());
  return result;
}

}  // namespace kiln
