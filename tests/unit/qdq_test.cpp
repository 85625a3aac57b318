// QDQ models run as integer programs: DequantizeLinear -> Conv / MatMul / Gemm -> [Relu ->]
// QuantizeLinear chains are planned as QLinearConv / QLinearMatMul / QGemm steps whose results equal
// the plain-loop integer reference bit for bit, and a chain that cannot be (a Relu the quantization
// does not imply, a Gemm whose alpha is not 1) stays float32 with a note saying why. Add and Mul
// chains become QLinearAdd / QLinearMul with the float chain's bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/native/ref/reference.h"
#include "backends/registry.h"
#include "backends/settings.h"
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

// QuantizeLinear then DequantizeLinear on `value` in a built graph, per-tensor int8.
std::string add_quantize_dequantize(GraphBuilder& g, const std::string& value, float scale,
                                    int8_t zero_point) {
  const std::string s = g.constant(Tensor::scalar(scale)), z = g.constant(Tensor::scalar(zero_point));
  return g.add("DequantizeLinear", {g.add("QuantizeLinear", {value, s, z}), s, z});
}

// The same ops run one by one on the native kernels: the float chain an integer step stands for.
Tensor run_reference(const std::string& op, const std::vector<Tensor>& inputs) {
  return run_op({op, {}, inputs, 13})[0];
}
Tensor quantize_dequantize(const Tensor& value, float scale, int8_t zero_point) {
  const Tensor q =
      run_reference("QuantizeLinear", {value, Tensor::scalar(scale), Tensor::scalar(zero_point)});
  return run_reference("DequantizeLinear", {q, Tensor::scalar(scale), Tensor::scalar(zero_point)});
}

void expect_same_floats(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.numel(), want.numel());
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << "element " << i;
}

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

// A classifier's Gemm as PyTorch exports it (transB = 1), quantized per output feature with an int32
// bias, becomes QGemm; the same Gemm with alpha 0.5 stays float32 and says why.
TEST(Qdq, GemmChainsBecomeQGemmEqualToTheReference) {
  const Shape input = {2, 8};
  const int64_t features = 5;
  GraphBuilder g{input};
  const std::string x_zero_point = g.constant(Tensor::scalar(kInputZeroPoint));
  const std::string x_scale = g.constant(Tensor::scalar(kInputScale));
  const std::string qx = g.add("QuantizeLinear", {"x", x_scale, x_zero_point});
  const std::string x = g.add("DequantizeLinear", {qx, x_scale, x_zero_point});
  const Tensor weights = int8_weights({features, 8}, 5);  // [N, K]: B stored transposed
  const std::vector<float> w_scales = {0.01f, 0.02f, 0.005f, 0.015f, 0.03f};
  const std::vector<int32_t> bias = {100, -2000, 0, 537, 9};
  Attributes axis0;
  axis0.set("axis", int_attr(0));
  const std::string w = g.add("DequantizeLinear",
                              {g.constant(weights), g.constant(Tensor::from_vector(w_scales, {features})),
                               g.constant(Tensor::zeros(DType::i8, {features}))},
                              axis0);
  std::vector<float> bias_scales;
  for (float scale : w_scales) bias_scales.push_back(kInputScale * scale);
  const std::string c = g.add("DequantizeLinear",
                              {g.constant(Tensor::from_vector(bias, {features})),
                               g.constant(Tensor::from_vector(bias_scales, {features}))},
                              axis0);
  const auto quantized_gemm = [&](float alpha) {
    Attributes attributes;
    attributes.set("transB", int_attr(1));
    attributes.set("alpha", testing::float_attr(alpha));
    const std::string gemm = g.add("Gemm", {x, w, c}, attributes);
    const std::string y_scale = g.constant(Tensor::scalar(0.1f));
    const std::string y_zero_point = g.constant(Tensor::scalar(int8_t{3}));
    const std::string q = g.add("QuantizeLinear", {gemm, y_scale, y_zero_point});
    return std::make_pair(node_of(gemm), g.add("DequantizeLinear", {q, y_scale, y_zero_point}));
  };
  const auto [integer_gemm, y] = quantized_gemm(1);
  const auto [float_gemm, y_float] = quantized_gemm(0.5f);
  const Model model = g.finish({y, y_float});

  const Tensor input_values = random_tensor(input, 6, -2, 2);
  Session session(model);
  const TensorMap outputs = session.run({{"x", input_values}});
  const std::shared_ptr<const Plan> plan = session.plan_for({input});
  const StepRecord* gemm = step_of(*plan, integer_gemm);
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->op_type, "QGemm");
  ASSERT_FALSE(gemm->notes.empty());
  EXPECT_NE(gemm->notes.back().find("QGemm from DequantizeLinear -> Gemm -> QuantizeLinear; A uint8"),
            std::string::npos)
      << gemm->notes.back();
  const StepRecord* unchanged = step_of(*plan, float_gemm);
  ASSERT_NE(unchanged, nullptr);
  EXPECT_EQ(unchanged->op_type, "Gemm");
  EXPECT_NE(unchanged->notes.back().find("stays float32: its alpha (0.5) and beta (1) must be 1"),
            std::string::npos)
      << unchanged->notes.back();

  // The reference: x quantized, A x B' in int32, + bias, requantized, dequantized.
  const Tensor qa = run_op({"QuantizeLinear",
                            {},
                            {input_values, Tensor::scalar(kInputScale), Tensor::scalar(kInputZeroPoint)}})[0];
  std::vector<int8_t> columns;  // B' = weights transposed, [K, N]
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t j = 0; j < features; ++j) columns.push_back(weights.data<int8_t>()[j * 8 + i]);
  }
  const std::vector<int32_t> acc = native::ref::matmul_integer(
      qa, Tensor::from_vector(columns, {8, features}), {{kInputZeroPoint}}, {{0}});
  const Tensor& result = outputs.at(model.graph.outputs[0].name);
  for (int64_t i = 0; i < 2 * features; ++i) {
    const int64_t j = i % features;
    const float multiplier = requantize_multiplier(kInputScale, w_scales[j], 0.1f);
    const int8_t q = requantize<int8_t>(acc[i], bias[j], multiplier, 3);
    ASSERT_EQ(result.data<float>()[i], static_cast<float>(q - 3) * 0.1f) << "element " << i;
  }
}

// A residual sum and a product of two dequantized tensors whose results are quantized become
// QLinearAdd (its Relu absorbed) and QLinearMul, giving the float chain's bits.
TEST(Qdq, AddAndMulChainsBecomeQLinearAddAndMulWithTheChainsBits) {
  const Shape input = {1, 4, 6, 6};
  GraphBuilder g{input};
  const auto q_dq = [&](const std::string& value, float scale, int8_t zero_point) {
    return add_quantize_dequantize(g, value, scale, zero_point);
  };
  const std::string a = q_dq("x", 0.02f, 5);
  const std::string b = q_dq(g.add("Relu", {"x"}), 0.01f, -128);
  const std::string sum = g.add("Add", {a, b});
  const std::string relu_sum = q_dq(g.add("Relu", {sum}), 0.03f, -128);
  const std::string product = g.add("Mul", {a, b});
  const std::string quantized_product = q_dq(product, 0.001f, 3);
  const Model model = g.finish({relu_sum, quantized_product});

  const Tensor x = random_tensor(input, 8, -2, 2);
  Session session(model);
  const TensorMap outputs = session.run({{"x", x}});
  const std::shared_ptr<const Plan> plan = session.plan_for({input});
  const StepRecord* add = step_of(*plan, node_of(sum));
  const StepRecord* mul = step_of(*plan, node_of(product));
  ASSERT_NE(add, nullptr);
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(add->op_type, "QLinearAdd");
  EXPECT_EQ(mul->op_type, "QLinearMul");
  ASSERT_TRUE(add->quantization.has_value());
  EXPECT_EQ(add->quantization->operands.size(), 3u);
  EXPECT_EQ(add->quantization->operands[2].zero_points, std::vector<double>{-128});

  // The float chain op by op, the Relu included.
  const Tensor a_value = quantize_dequantize(x, 0.02f, 5);
  const Tensor b_value = quantize_dequantize(run_reference("Relu", {x}), 0.01f, -128);
  const Tensor sum_value = run_reference("Add", {a_value, b_value});
  expect_same_floats(outputs.at(model.graph.outputs[0].name),
                     quantize_dequantize(run_reference("Relu", {sum_value}), 0.03f, -128));
  expect_same_floats(outputs.at(model.graph.outputs[1].name),
                     quantize_dequantize(run_reference("Mul", {a_value, b_value}), 0.001f, 3));
}

// A Clip (ReLU6) before the QuantizeLinear is absorbed where the quantization saturates at its bounds,
// and stays a float op with a note where it does not.
TEST(Qdq, ClipIsAbsorbedOnlyWhereSaturationClampsAtItsBounds) {
  const Shape input = {1, 4, 6, 6};
  GraphBuilder g{input};
  const auto scalar_constant = [&](auto value) { return g.constant(Tensor::scalar(value)); };
  const auto q_dq = [&](const std::string& value, float scale, int8_t zero_point) {
    return add_quantize_dequantize(g, value, scale, zero_point);
  };
  const std::string a = q_dq("x", 0.02f, 5);
  const std::string b = q_dq("x", 0.03f, -7);
  const std::string relu6 = g.add("Add", {a, b});
  const std::string clipped =
      q_dq(g.add("Clip", {relu6, scalar_constant(0.0f), scalar_constant(6.0f)}), 6.0f / 255, -128);
  const std::string narrow = g.add("Add", {b, a});
  const std::string not_implied =
      q_dq(g.add("Clip", {narrow, scalar_constant(0.0f), scalar_constant(1.0f)}), 0.03f, -128);
  const Model model = g.finish({clipped, not_implied});

  const Tensor x = random_tensor(input, 9, -8, 8);
  Session session(model);
  const TensorMap outputs = session.run({{"x", x}});
  const std::shared_ptr<const Plan> plan = session.plan_for({input});
  const StepRecord* absorbed = step_of(*plan, node_of(relu6));
  const StepRecord* kept = step_of(*plan, node_of(narrow));
  ASSERT_NE(absorbed, nullptr);
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(absorbed->op_type, "QLinearAdd");
  EXPECT_NE(absorbed->notes.back().find("-> Clip -> QuantizeLinear"), std::string::npos)
      << absorbed->notes.back();
  EXPECT_EQ(kept->op_type, "Add");
  EXPECT_NE(kept->notes.back().find("stays float32: the Clip after it is not implied by the quantization"),
            std::string::npos)
      << kept->notes.back();

  // The absorbed chain, op by op with its Clip.
  const Tensor sum =
      run_reference("Add", {quantize_dequantize(x, 0.02f, 5), quantize_dequantize(x, 0.03f, -7)});
  const Tensor clipped_sum = run_reference("Clip", {sum, Tensor::scalar(0.0f), Tensor::scalar(6.0f)});
  expect_same_floats(outputs.at(model.graph.outputs[0].name),
                     quantize_dequantize(clipped_sum, 6.0f / 255, -128));
}

// Quantized activations flow channels-last from one integer step to the next: where oneDNN runs the
// convolutions (exact with VNNI), the only Reorders are at the graph's edges, the int8 MaxPool, the
// residual QLinearAdd and the DequantizeLinear read channels-last too, and every output equals the
// native-only plan's bit for bit. Elsewhere native's plain kernels run the same plan without any
// Reorder. A MaxPool between different quantizations stays float32 and says why.
TEST(Qdq, QuantizedActivationsFlowChannelsLastBetweenIntegerSteps) {
  const Shape input = {1, 8, 10, 10};
  GraphBuilder g{input};
  const auto q_dq = [&](const std::string& value, float scale, int8_t zero_point) {
    return add_quantize_dequantize(g, value, scale, zero_point);
  };
  const auto conv = [&](const std::string& x, int64_t out_channels, uint32_t seed, float w_scale) {
    const Tensor weights = int8_weights({out_channels, 8, 3, 3}, seed);
    const std::string w = g.add("DequantizeLinear", {g.constant(weights), g.constant(Tensor::scalar(w_scale)),
                                                     g.constant(Tensor::scalar(int8_t{0}))});
    return g.add("Conv", {x, w}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
  };
  const std::string x = q_dq("x", 0.02f, 3);
  const std::string first = q_dq(g.add("Relu", {conv(x, 8, 4, 0.004f)}), 0.03f, -128);
  Attributes window = conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1});
  const std::string pool = g.add("MaxPool", {first}, window);
  const std::string pooled = q_dq(pool, 0.03f, -128);
  const std::string second = q_dq(conv(pooled, 8, 5, 0.003f), 0.05f, 7);
  const std::string sum = q_dq(g.add("Relu", {g.add("Add", {first, second})}), 0.04f, -128);
  const std::string requantizing_pool = g.add("MaxPool", {second}, window);
  const std::string float_pooled = q_dq(requantizing_pool, 0.06f, 7);
  const Model model = g.finish({sum, float_pooled});

  const Tensor value = random_tensor(input, 9, -2, 2);
  Session session(model);
  const TensorMap got = session.run({{"x", value}});
  Settings native_only = current_settings();
  for (int backend : {backend_position("onednn"), backend_position("blas"), backend_position("winograd")})
    native_only.set(BackendSettingKey("enabled"), backend, 0);
  Session reference(model, native_only);
  const TensorMap want = reference.run({{"x", value}});
  for (const ValueInfo& output : model.graph.outputs)
    expect_same_floats(got.at(output.name), want.at(output.name));

  const std::shared_ptr<const Plan> plan = session.plan_for({input});
  const StepRecord* int8_pool = step_of(*plan, node_of(pool));
  ASSERT_NE(int8_pool, nullptr);
  EXPECT_EQ(int8_pool->input_dtypes, std::vector<DType>{DType::i8});
  ASSERT_FALSE(int8_pool->notes.empty());
  EXPECT_NE(int8_pool->notes.back().find("MaxPool on the int8 values"), std::string::npos)
      << int8_pool->notes.back();
  const StepRecord* float_pool = step_of(*plan, node_of(requantizing_pool));
  ASSERT_NE(float_pool, nullptr);
  EXPECT_EQ(float_pool->input_dtypes, std::vector<DType>{DType::f32});
  ASSERT_FALSE(float_pool->notes.empty());
  EXPECT_NE(float_pool->notes.back().find("quantized differently"), std::string::npos)
      << float_pool->notes.back();
  int integer_convs_on_onednn = 0;
  for (const PlanStep& step : plan->steps()) {
    if (step.record.op_type == "QLinearConv" && step.record.backend == "onednn") {
      ++integer_convs_on_onednn;
      EXPECT_EQ(step.record.output_layouts, std::vector<Layout>{Layout::nhwc});
    }
    if (step.record.op_type == "QLinearAdd" && integer_convs_on_onednn == 2)
      EXPECT_EQ(step.record.output_layouts, std::vector<Layout>{Layout::nhwc});
  }
  // oneDNN's int8 convolutions need VNNI (see OnednnQuantized); without them native's run plain.
  if (integer_convs_on_onednn == 0) {
    EXPECT_EQ(plan->reorder_steps(), 0);
    return;
  }
  EXPECT_EQ(integer_convs_on_onednn, 2);
  // The quantized input into channels-last, the dequantized outputs back to plain.
  EXPECT_EQ(plan->reorder_steps(), 3);
}

}  // namespace
}  // namespace kiln
