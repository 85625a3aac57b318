// QDQ models run as integer programs: DequantizeLinear -> Conv / MatMul -> [Relu ->] QuantizeLinear
// chains are planned as QLinearConv / QLinearMatMul steps whose results equal the plain-loop integer
// reference bit for bit, and a chain that cannot be (a Relu the quantization does not imply) stays
// float32 with a note saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/native/ref/reference.h"
#include "graph/passes/passes.h"
#include "graph/session.h"
#include "graph_builder.h"
#include "ops/quantize.h"
#include "ops/quantize_math.h"

namespace kiln {
namespace {

using testing::conv_attrs;
using testing::GraphBuilder;
using testing::int_attr;
using testing::OpRun;
using testing::random_tensor;
using testing::run_op;

const Shape kInput = {1, 3, 8, 8};
constexpr float kInputScale = 0.02f;
constexpr uint8_t kInputZeroPoint = 128;

Tensor int8_weights(const Shape& shape, uint32_t seed) {
  const Tensor random = random_tensor(shape, seed, -127, 127);
  std::vector<int8_t> values;
  for (int64_t i = 0; i < random.numel(); ++i) values.push_back(static_cast<int8_t>(random.data<float>()[i]));
  return Tensor::from_vector(values, shape);
}

// GraphBuilder names a node's output "<node>_out".
std::string node_of(const std::string& output) {
  return output.substr(0, output.size() - 4);
}

struct QdqModel {
  GraphBuilder g{kInput};
  Tensor w1 = int8_weights({4, 3, 3, 3}, 1);
  std::vector<float> w1_scales = {0.01f, 0.02f, 0.005f, 0.015f};
  std::vector<int32_t> bias = {100, -2000, 0, 537};
  Tensor w2 = int8_weights({2, 4, 1, 1}, 2);
  Tensor b = int8_weights({8, 5}, 3);
  std::vector<float> b_scales = {0.01f, 0.03f, 0.02f, 0.04f, 0.05f};
  std::string quantized_conv, float_conv, quantized_matmul;
  Model model;

  std::string dequantize(const std::string& q, float scale, const std::string& zero_point) {
    return g.add("DequantizeLinear", {q, g.constant(Tensor::scalar(scale)), zero_point});
  }
  std::string quantize(const std::string& x, float scale, const Tensor& zero_point) {
    return g.add("QuantizeLinear", {x, g.constant(Tensor::scalar(scale)), g.constant(zero_point)});
  }

  QdqModel() {
    const std::string x_zero_point = g.constant(Tensor::scalar(kInputZeroPoint));
    const std::string qx =
        g.add("QuantizeLinear", {"x", g.constant(Tensor::scalar(kInputScale)), x_zero_point});
    const std::string x = dequantize(qx, kInputScale, x_zero_point);
    // Conv 1: per-channel int8 weights, an int32 bias, a Relu that uint8 with zero point 0 implies.
    Attributes axis0;
    axis0.set("axis", int_attr(0));
    const std::string w = g.add("DequantizeLinear",
                                {g.constant(w1), g.constant(Tensor::from_vector(w1_scales, {4})),
                                 g.constant(Tensor::zeros(DType::i8, {4}))},
                                axis0);
    std::vector<float> bias_scales;
    for (float s : w1_scales) bias_scales.push_back(kInputScale * s);
    const std::string bias_value =
        g.add("DequantizeLinear",
              {g.constant(Tensor::from_vector(bias, {4})), g.constant(Tensor::from_vector(bias_scales, {4}))},
              axis0);
    const std::string conv = g.add("Conv", {x, w, bias_value}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
    quantized_conv = node_of(conv);
    const std::string q1 = quantize(g.add("Relu", {conv}), 0.05f, Tensor::scalar(uint8_t{0}));
    const std::string y1 = dequantize(q1, 0.05f, g.constant(Tensor::scalar(uint8_t{0})));
    // Conv 2: a Relu the quantization does not imply (zero point 5): float32, with a note.
    const std::string w2_value = dequantize(g.constant(w2), 0.02f, "");
    const std::string conv2 = g.add("Conv", {y1, w2_value}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
    float_conv = node_of(conv2);
    const std::string y2 = dequantize(quantize(g.add("Relu", {conv2}), 0.1f, Tensor::scalar(uint8_t{5})),
                                      0.1f, g.constant(Tensor::scalar(uint8_t{5})));
    // MatMul: [1, 4, 8, 8] x [8, 5] with per-column scales, to int8.
    Attributes axis1;
    axis1.set("axis", int_attr(1));
    const std::string b_value =
        g.add("DequantizeLinear", {g.constant(b), g.constant(Tensor::from_vector(b_scales, {5})), ""}, axis1);
    const std::string matmul = g.add("MatMul", {y1, b_value});
    quantized_matmul = node_of(matmul);
    const std::string y3 = dequantize(quantize(matmul, 0.2f, Tensor::scalar(int8_t{-3})), 0.2f,
                                      g.constant(Tensor::scalar(int8_t{-3})));
    model = g.finish({y1, y2, y3});
  }
};

const StepRecord* step_of(const Plan& plan, const std::string& node) {
  for (const PlanStep& step : plan.steps()) {
    if (step.record.node_name == node) return &step.record;
  }
  return nullptr;
}

TEST(Qdq, ConvAndMatMulChainsBecomeIntegerStepsEqualToTheReference) {
  QdqModel m;
  const std::optional<QuantizedModel> rewritten = fuse_qdq_chains(m.model);
  ASSERT_TRUE(rewritten.has_value());
  EXPECT_EQ(rewritten->integer_ops, 2);

  const Tensor x = random_tensor(kInput, 4, -2, 2);
  Session session(m.model);
  const TensorMap outputs = session.run({{"x", x}});
  const std::shared_ptr<const Plan> plan = session.plan_for({kInput});
  const StepRecord* conv = step_of(*plan, m.quantized_conv);
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->op_type, "QLinearConv");
  ASSERT_FALSE(conv->notes.empty());
  EXPECT_NE(
      conv->notes.back().find(
          "x uint8 (scale 0.02, zero point 128), w int8 (4 scales, one per output channel, zero point per "),
      std::string::npos)
      << conv->notes.back();
  const StepRecord* matmul = step_of(*plan, m.quantized_matmul);
  ASSERT_NE(matmul, nullptr);
  EXPECT_EQ(matmul->op_type, "QLinearMatMul");
  const StepRecord* float_conv = step_of(*plan, m.float_conv);
  ASSERT_NE(float_conv, nullptr);
  EXPECT_EQ(float_conv->op_type, "Conv");
  EXPECT_NE(float_conv->notes.back().find("stays float32: the Relu after it is not implied"),
            std::string::npos);

  // The first conv, by the plain-loop integer reference: x quantized, int32 accumulators, the bias,
  // requantized (the Relu is the saturation at zero point 0), then dequantized.
  OpRun quantize_x{"QuantizeLinear", {}, {x, Tensor::scalar(kInputScale), Tensor::scalar(kInputZeroPoint)}};
  const Tensor qx = run_op(quantize_x)[0];
  OpSpec spec;
  spec.op_type = "ConvInteger";
  const Attributes attributes = conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1});
  spec.attributes = &attributes;
  spec.inputs = {TensorInfo{DType::u8, kInput, {}}, TensorInfo{DType::i8, m.w1.shape(), {}}};
  const std::vector<int32_t> zero_weights_zero_point = {0};
  const std::vector<int32_t> acc = native::ref::conv_integer(
      qx, m.w1, kInputZeroPoint, zero_weights_zero_point, integer_conv_params(spec));
  const Tensor& y1 = outputs.at(m.model.graph.outputs[0].name);
  ASSERT_EQ(y1.numel(), static_cast<int64_t>(acc.size()));
  for (size_t i = 0; i < acc.size(); ++i) {
    const size_t channel = i / 64;
    const float multiplier = requantize_multiplier(kInputScale, m.w1_scales[channel], 0.05f);
    const uint8_t q = requantize<uint8_t>(acc[i], m.bias[channel], multiplier, 0);
    ASSERT_EQ(y1.data<float>()[i], static_cast<float>(q) * 0.05f) << "element " << i;
  }
}

}  // namespace
}  // namespace kiln
