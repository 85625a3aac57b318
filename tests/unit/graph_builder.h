// Small float32 graphs for tests that run whole sessions: a GraphBuilder adds nodes one by one
// to a model with one graph input "x"; weights are seeded random constants.
#pragma once

#include <random>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "op_test_util.h"

namespace kiln::testing {

inline Tensor random_tensor(const Shape& shape, uint32_t seed, float low = -1, float high = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  Tensor tensor = Tensor::empty(DType::f32, shape);
  for (float& value : std::span(tensor.data<float>(), static_cast<size_t>(tensor.numel()))) value = dist(rng);
  return tensor;
}

// Builds a float32 graph node by node; one graph input "x", outputs named at the end.
class GraphBuilder {
 public:
  explicit GraphBuilder(const Shape& input_shape) : input_shape_(input_shape) {
    model_.opsets[""] = 13;
    std::vector<Dim> dims;
    for (int64_t d : input_shape) dims.push_back(Dim{d, ""});
    model_.graph.inputs = {ValueInfo{"x", DType::f32, true, dims}};
  }

  std::string constant(const Tensor& value) {
    // Appended rather than "c" + to_string(...), which trips GCC 12's false -Wrestrict warning.
    std::string name = "c";
    name += std::to_string(model_.graph.initializers.size());
    model_.graph.initializers[name] = value;
    return name;
  }
  std::string weights(const Shape& shape, float scale = 0.5f) {
    return constant(
        random_tensor(shape, static_cast<uint32_t>(model_.graph.initializers.size() + 7), -scale, scale));
  }

  std::string add(const std::string& op, std::vector<std::string> inputs, Attributes attributes = {}) {
    Node node;
    node.name = op + std::to_string(model_.graph.nodes.size());
    node.op_type = op;
    node.inputs = std::move(inputs);
    node.outputs = {node.name + "_out"};
    node.attributes = std::move(attributes);
    model_.graph.nodes.push_back(node);
    return node.outputs[0];
  }

  // A node with `count` outputs (LSTM's Y, Y_h, Y_c); "" in `inputs` skips an optional input.
  std::vector<std::string> add_outputs(const std::string& op, std::vector<std::string> inputs, int count,
                                       Attributes attributes = {}) {
    const std::string first = add(op, std::move(inputs), std::move(attributes));
    Node& node = model_.graph.nodes.back();
    for (int i = 1; i < count; ++i) node.outputs.push_back(node.name + "_out" + std::to_string(i));
    node.outputs[0] = first;
    return node.outputs;
  }

  void set_opset(int64_t opset) { model_.opsets[""] = opset; }

  Model finish(const std::vector<std::string>& outputs) {
    for (const std::string& output : outputs)
      model_.graph.outputs.push_back(ValueInfo{output, DType::f32, false, {}});
    return model_;
  }
  const Shape& input_shape() const { return input_shape_; }

 private:
  Model model_;
  Shape input_shape_;
};

inline Attributes conv_attrs(std::vector<int64_t> kernel, std::vector<int64_t> strides,
                             std::vector<int64_t> pads, int64_t group = 1,
                             std::vector<int64_t> dilations = {1, 1}) {
  Attributes attributes;
  attributes.set("kernel_shape", ints_attr(kernel));
  attributes.set("strides", ints_attr(strides));
  attributes.set("pads", ints_attr(pads));
  attributes.set("group", int_attr(group));
  attributes.set("dilations", ints_attr(dilations));
  return attributes;
}

// A 1x1 Conv "conv" of input "x" [1, 4, 5, 5] whose weights are the second graph input "w"
// [4, 4, 1, 1], not a constant: kernels that need plan-time weights refuse it.
inline Model computed_weights_conv() {
  Model model;
  model.opsets[""] = 13;
  model.graph.inputs = {ValueInfo{"x", DType::f32, true, {Dim{1, ""}, Dim{4, ""}, Dim{5, ""}, Dim{5, ""}}},
                        ValueInfo{"w", DType::f32, true, {Dim{4, ""}, Dim{4, ""}, Dim{1, ""}, Dim{1, ""}}}};
  Node node;
  node.name = "conv";
  node.op_type = "Conv";
  node.inputs = {"x", "w"};
  node.outputs = {"y"};
  model.graph.nodes = {node};
  model.graph.outputs = {ValueInfo{"y", DType::f32, false, {}}};
  return model;
}

}  // namespace kiln::testing
