// oneDNN kernels against the native reference: each case is a small graph run twice, with oneDNN
// enabled and disabled, at 1 and 2 threads. Graphs chain ops so that channels-last layouts,
// reorders at plain readers and fused post-ops are exercised, not just single kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/native/native_backend.h"
#include "backends/selection.h"
#include "graph/session.h"
#include "graph_builder.h"
#include "op_test_util.h"
#include "runtime/threads.h"

#if KILN_WITH_ONEDNN
#include "backends/onednn/onednn_common.h"
#endif

namespace kiln {
namespace {

using testing::conv_attrs;
using testing::float_attr;
using testing::GraphBuilder;
using testing::int_attr;
using testing::ints_attr;
using testing::max_abs_diff;
using testing::random_tensor;

struct Outcome {
  std::vector<Tensor> outputs;
  std::shared_ptr<const Plan> plan;
};

// Runs with only `backend` (or nothing but native, when empty) enabled besides the native reference.
Outcome run_model(const Model& model, const Tensor& x, const std::string& backend, int threads) {
  const ScopedSettings only(
      Settings()
          .set(BackendSettingKey("enabled"), backend_position("onednn"), backend == "onednn")
          .set(BackendSettingKey("enabled"), backend_position("blas"), backend == "blas")
          .set("threads", threads));
  Session session(model);
  TensorMap result = session.run({{"x", x}});
  Outcome outcome;
  outcome.plan = session.plan_for({x.shape()});
  for (const ValueInfo& output : model.graph.outputs) outcome.outputs.push_back(result.at(output.name));
  return outcome;
}

// Runs `model` on `backend` (oneDNN unless named) and natively, at 1 and 2 threads; outputs must agree
// to `tolerance` x scale. Returns the fast plan so callers can check which kernels ran.
std::shared_ptr<const Plan> expect_matches_native(const Model& model, const Shape& input_shape,
                                                  double tolerance = 1e-4,
                                                  const std::string& backend = "onednn") {
  const Tensor x = random_tensor(input_shape, 1);
  const Outcome reference = run_model(model, x, "", 1);
  std::shared_ptr<const Plan> plan;
  for (int threads : {1, 2}) {
    const Outcome fast = run_model(model, x, backend, threads);
    plan = fast.plan;
    for (size_t i = 0; i < fast.outputs.size(); ++i) {
      const Tensor& expected = reference.outputs[i];
      EXPECT_EQ(fast.outputs[i].shape(), expected.shape());
      if (fast.outputs[i].shape() != expected.shape()) continue;
      double scale = 1;
      for (float v : expected.values<float>()) scale = std::max(scale, static_cast<double>(std::abs(v)));
      EXPECT_LE(max_abs_diff(fast.outputs[i], expected), tolerance * scale)
          << "output " << i << ", " << threads << " threads";
    }
  }
  return plan;
}

// The step running `op_type` (first one), to check which backend and kernel were chosen.
const StepRecord& step_for(const Plan& plan, const std::string& op_type) {
  for (const PlanStep& step : plan.steps()) {
    if (step.record.op_type == op_type) return step.record;
  }
  static const StepRecord none;
  ADD_FAILURE() << "no step runs " << op_type;
  return none;
}

struct ConvCase {
  Shape input;  // N, C, H, W
  int64_t out_channels;
  std::vector<int64_t> kernel, strides, pads;
  int64_t group;
  std::vector<int64_t> dilations;
  bool bias;
};

std::string case_name(const ConvCase& c) {
  return "c" + std::to_string(c.input[1]) + "_oc" + std::to_string(c.out_channels) + "_k" +
         std::to_string(c.kernel[0]) + "x" + std::to_string(c.kernel[1]) + "_s" +
         std::to_string(c.strides[0]) + "_g" + std::to_string(c.group) + "_d" +
         std::to_string(c.dilations[0]);
}
void PrintTo(const ConvCase& c, std::ostream* out) {
  *out << case_name(c);
}

class OnednnConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(OnednnConv, MatchesNativeWithFusedActivationAndResidual) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const ConvCase& c = GetParam();
  GraphBuilder g(c.input);
  const std::string w = g.weights({c.out_channels, c.input[1] / c.group, c.kernel[0], c.kernel[1]});
  std::vector<std::string> inputs = {"x", w};
  if (c.bias) inputs.push_back(g.weights({c.out_channels}));
  const std::string conv =
      g.add("Conv", inputs, conv_attrs(c.kernel, c.strides, c.pads, c.group, c.dilations));
  const std::string relu = g.add("Relu", {conv});
  // A second conv with a residual Add and a Clip fused into it, then a plain reader (Flatten).
  const std::string w2 = g.weights({c.out_channels, c.out_channels, 1, 1});
  const std::string conv2 = g.add("Conv", {relu, w2}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
  const std::string sum = g.add("Add", {conv2, relu});
  const std::string clip =
      g.add("Clip", {sum, g.constant(Tensor::scalar(0.0f)), g.constant(Tensor::scalar(0.8f))});
  const std::string flat = g.add("Flatten", {clip});
  const auto plan = expect_matches_native(g.finish({flat, relu}), c.input);
  const StepRecord& first = step_for(*plan, "Conv");
  EXPECT_EQ(first.backend, "onednn") << first.kernel;
  EXPECT_EQ(first.fused.size(), 1u);
  EXPECT_EQ(plan->fused_nodes(), 3);  // Relu; Add and Clip into the second conv
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, OnednnConv,
    ::testing::Values(
        ConvCase{{1, 3, 17, 15}, 16, {3, 3}, {1, 1}, {1, 1, 1, 1}, 1, {1, 1}, true},
        ConvCase{{2, 16, 12, 12}, 32, {3, 3}, {2, 2}, {0, 1, 1, 0}, 1, {1, 1}, true},
        ConvCase{{1, 32, 9, 9}, 32, {3, 3}, {1, 1}, {2, 2, 2, 2}, 32, {2, 2}, true},    // depthwise, dilated
        ConvCase{{1, 32, 10, 10}, 64, {3, 3}, {1, 1}, {1, 1, 1, 1}, 8, {1, 1}, false},  // grouped
        ConvCase{{1, 24, 7, 7}, 48, {1, 1}, {1, 1}, {0, 0, 0, 0}, 1, {1, 1}, true},
        ConvCase{{3, 8, 20, 6}, 8, {5, 3}, {3, 1}, {2, 1, 2, 1}, 2, {1, 1}, true}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return case_name(info.param); });

struct PoolCase {
  std::string op;
  std::vector<int64_t> kernel, strides, pads;
  int64_t ceil_mode;
  int64_t count_include_pad;
};

std::string case_name(const PoolCase& c) {
  return c.op + "_k" + std::to_string(c.kernel[0]) + "x" + std::to_string(c.kernel[1]) + "_ceil" +
         std::to_string(c.ceil_mode) + "_pad" + std::to_string(c.pads[1]) + "_include" +
         std::to_string(c.count_include_pad);
}
void PrintTo(const PoolCase& c, std::ostream* out) {
  *out << case_name(c);
}

class OnednnPool : public ::testing::TestWithParam<PoolCase> {};

TEST_P(OnednnPool, MatchesNativeOnChannelsLastAndPlainInputs) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const PoolCase& c = GetParam();
  const Shape input = {2, 16, 13, 11};
  GraphBuilder g(input);
  Attributes attributes;
  attributes.set("kernel_shape", ints_attr(c.kernel));
  attributes.set("strides", ints_attr(c.strides));
  attributes.set("pads", ints_attr(c.pads));
  attributes.set("ceil_mode", int_attr(c.ceil_mode));
  if (c.op == "AveragePool") attributes.set("count_include_pad", int_attr(c.count_include_pad));
  // The same pooling on the plain graph input and on a conv's channels-last output.
  const std::string plain_pool = g.add(c.op, {"x"}, attributes);
  const std::string conv =
      g.add("Conv", {"x", g.weights({16, 16, 1, 1})}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
  const std::string nhwc_pool = g.add(c.op, {conv}, attributes);
  const std::string global = g.add("GlobalAveragePool", {nhwc_pool});
  const auto plan = expect_matches_native(g.finish({plain_pool, nhwc_pool, global}), input);
  EXPECT_EQ(step_for(*plan, c.op).backend, "onednn");
}

INSTANTIATE_TEST_SUITE_P(Windows, OnednnPool,
                         ::testing::Values(PoolCase{"MaxPool", {3, 3}, {2, 2}, {1, 1, 1, 1}, 0, 0},
                                           PoolCase{"MaxPool", {3, 3}, {2, 2}, {0, 0, 0, 0}, 1, 0},
                                           PoolCase{"AveragePool", {3, 3}, {1, 1}, {1, 1, 1, 1}, 0, 1},
                                           PoolCase{"AveragePool", {2, 3}, {2, 2}, {0, 1, 0, 1}, 1, 0}),
                         [](const ::testing::TestParamInfo<PoolCase>& info) {
                           return case_name(info.param);
                         });

TEST(Onednn, GemmWithTransposesAlphaBetaAndFusedRelu) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {5, 12};
  GraphBuilder g(input);
  Attributes attributes;
  attributes.set("transB", int_attr(1));
  attributes.set("alpha", float_attr(0.5f));
  attributes.set("beta", float_attr(2.0f));
  const std::string gemm = g.add("Gemm", {"x", g.weights({7, 12}), g.weights({7})}, attributes);
  const std::string relu = g.add("Relu", {gemm});
  Attributes trans_a;
  trans_a.set("transA", int_attr(1));
  const std::string t = g.add("Transpose", {relu});
  const std::string gemm2 = g.add("Gemm", {t, g.weights({7, 3}), g.weights({1, 3})}, trans_a);
  const auto plan = expect_matches_native(g.finish({gemm2}), input);
  EXPECT_EQ(step_for(*plan, "Gemm").backend, "onednn");
  EXPECT_EQ(step_for(*plan, "Gemm").fused.size(), 1u);
}

TEST(Onednn, MatMulWithConstantAndComputedRightHandSides) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {2, 3, 6, 8};
  GraphBuilder g(input);
  const std::string projected = g.add("MatMul", {"x", g.weights({8, 8})});
  Attributes perm;
  perm.set("perm", ints_attr({0, 1, 3, 2}));
  const std::string transposed = g.add("Transpose", {projected}, perm);
  const std::string scores = g.add("MatMul", {"x", transposed});
  const auto plan = expect_matches_native(g.finish({projected, scores}), input);
  for (const PlanStep& step : plan->steps()) {
    if (step.record.op_type == "MatMul") {
      EXPECT_EQ(step.record.backend, "onednn") << step.record.node_name;
    }
  }
}

TEST(Onednn, ConcatBinaryAndEltwiseFollowChannelsLast) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {1, 8, 9, 9};
  GraphBuilder g(input);
  const std::string a =
      g.add("Conv", {"x", g.weights({8, 8, 3, 3})}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
  const std::string b =
      g.add("Conv", {"x", g.weights({4, 8, 1, 1})}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
  Attributes axis;
  axis.set("axis", int_attr(1));
  const std::string joined = g.add("Concat", {a, b}, axis);
  const std::string scaled = g.add("Mul", {joined, g.weights({1, 12, 1, 1})});
  const std::string shifted = g.add("Sub", {scaled, g.weights({12, 1, 1})});
  const std::string squashed = g.add("Sigmoid", {shifted});
  const std::string leaky = g.add("LeakyRelu", {g.add("Tanh", {squashed})});
  const auto plan = expect_matches_native(g.finish({leaky}), input);
  for (const std::string op : {"Concat", "Mul", "Sub", "Sigmoid", "Tanh", "LeakyRelu"}) {
    const StepRecord& step = step_for(*plan, op);
    // A float32 Concat is native's (its copies measured faster than oneDNN's).
    EXPECT_EQ(step.backend, op == "Concat" ? "native" : "onednn") << op;
    EXPECT_EQ(step.output_layouts.at(0), Layout::nhwc) << op;
  }
  // Only the graph input (to channels-last) and the output (back to plain) are reordered.
  EXPECT_EQ(plan->reorder_steps(), 2);
}

// mobilenet_v3's hard-swish (x * HardSigmoid(x)) and squeeze-excitation (the pooled scale times the
// feature map, scale first) between oneDNN convs: native's HardSigmoid runs on the channels-last
// values as stored, the broadcasting Mul runs on oneDNN with its inputs swapped, and nothing is
// reordered but the graph's input and output (and the [N, C, 1, 1] scale, whose bytes are the same
// in both layouts: a view).
TEST(Onednn, HardSwishAndSqueezeExcitationStayChannelsLast) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {2, 8, 7, 6};
  GraphBuilder g(input);
  const std::string conv =
      g.add("Conv", {"x", g.weights({16, 8, 1, 1})}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
  Attributes hard;
  hard.set("alpha", float_attr(1.0f / 6));
  hard.set("beta", float_attr(0.5f));
  const std::string swish = g.add("Mul", {conv, g.add("HardSigmoid", {conv}, hard)});
  const std::string pooled = g.add("GlobalAveragePool", {swish});
  const std::string scale = g.add("HardSigmoid", {pooled}, hard);
  const std::string excited = g.add("Mul", {scale, swish});
  const std::string clipped =
      g.add("Clip", {excited, g.constant(Tensor::scalar(-0.5f)), g.constant(Tensor::scalar(0.5f))});
  const std::string out = g.add("Exp", {clipped});
  const std::string conv2 =
      g.add("Conv", {out, g.weights({4, 16, 1, 1})}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
  const auto plan = expect_matches_native(g.finish({conv2}), input);
  int mul_steps = 0;
  for (const PlanStep& step : plan->steps()) {
    const StepRecord& record = step.record;
    if (record.op_type == "HardSigmoid" || record.op_type == "Exp") {
      EXPECT_EQ(record.backend, "native") << record.node_name;
      EXPECT_EQ(record.output_layouts.at(0), Layout::nhwc) << record.node_name;
    }
    if (record.op_type == "Mul") {
      ++mul_steps;
      EXPECT_EQ(record.backend, "onednn") << record.node_name << ": " << record.kernel;
      EXPECT_EQ(record.output_layouts.at(0), Layout::nhwc) << record.node_name;
    }
  }
  EXPECT_EQ(mul_steps, 2);
  EXPECT_EQ(plan->reorder_steps(), 3);
}

// Native runs an elementwise step on channels-last values as stored only when its outputs are
// float32: Reorders convert nothing else, so a model stored in float16 would end in a Cast whose
// nhwc float16 output could never reach the caller.
TEST(Onednn, NativeElementwiseKeepsChannelsLastForFloat32OutputsOnly) {
  Attributes to;
  KernelRequest request;
  request.op.op_type = "Cast";
  request.op.opset = 13;
  request.op.attributes = &to;
  request.op.inputs = {TensorInfo{DType::f32, {1, 8, 5, 5}, {}}};
  request.input_layouts = {Layout::nhwc};
  for (const DType dtype : {DType::f32, DType::f16}) {
    to.set("to", int_attr(dtype == DType::f16 ? 10 : 1));
    const TensorInfo output{dtype, {1, 8, 5, 5}, {}};
    const KernelOrReason offer = native_backend().create_kernel(request, std::span(&output, 1));
    ASSERT_NE(offer.kernel, nullptr) << offer.refusal.detail;
    const Layout expected = dtype == DType::f32 ? Layout::nhwc : Layout::plain;
    EXPECT_EQ(offer.kernel->input_layout(0), expected) << dtype_name(dtype);
    EXPECT_EQ(offer.kernel->output_layout(0), expected) << dtype_name(dtype);
  }
  // An integer exponent of the output's shape would have to be read channels-last too: plain.
  KernelRequest power;
  power.op.op_type = "Pow";
  power.op.opset = 15;
  power.op.inputs = {TensorInfo{DType::f32, {1, 8, 5, 5}, {}}, TensorInfo{DType::i64, {1, 8, 5, 5}, {}}};
  power.input_layouts = {Layout::nhwc, Layout::plain};
  const TensorInfo powered{DType::f32, {1, 8, 5, 5}, {}};
  const KernelOrReason offer = native_backend().create_kernel(power, std::span(&powered, 1));
  ASSERT_NE(offer.kernel, nullptr) << offer.refusal.detail;
  EXPECT_EQ(offer.kernel->input_layout(0), Layout::plain);
  EXPECT_EQ(offer.kernel->output_layout(0), Layout::plain);
}

// A broadcast on both sides is still refused, naming why.
TEST(Onednn, BinaryWhoseInputsBothBroadcastIsRefused) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  GraphBuilder g({3, 1});
  const std::string sum = g.add("Add", {"x", g.weights({1, 4})});
  const auto plan = expect_matches_native(g.finish({sum}), {3, 1});
  const StepRecord& step = step_for(*plan, "Add");
  EXPECT_EQ(step.backend, "native");
  const auto onednn = std::find_if(step.decision.refusals.begin(), step.decision.refusals.end(),
                                   [](const auto& refusal) { return refusal.backend == "onednn"; });
  ASSERT_NE(onednn, step.decision.refusals.end());
  EXPECT_EQ(onednn->detail, "both inputs broadcast (oneDNN broadcasts only one)");
}

TEST(Onednn, Float32ConcatIsLeftToNativeWithTheReason) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {2, 5, 4, 3};
  for (const int64_t axis : {0, 1, 3}) {
    GraphBuilder g(input);
    Attributes attrs;
    attrs.set("axis", int_attr(axis));
    const std::string joined = g.add("Concat", {g.add("Relu", {"x"}), g.add("Sigmoid", {"x"})}, attrs);
    const auto plan = expect_matches_native(g.finish({g.add("Relu", {joined})}), input);
    const StepRecord& step = step_for(*plan, "Concat");
    EXPECT_EQ(step.backend, "native") << axis;
    EXPECT_EQ(step.output_layouts.at(0), Layout::plain) << axis;
    const auto onednn = std::find_if(step.decision.refusals.begin(), step.decision.refusals.end(),
                                     [](const auto& refusal) { return refusal.backend == "onednn"; });
    ASSERT_NE(onednn, step.decision.refusals.end()) << axis;
    EXPECT_EQ(onednn->kind, RefusalKind::unsupported_layout);
    EXPECT_EQ(onednn->detail, "float32 Concat runs on native (copies of contiguous runs, measured faster)");
  }
}

// A BatchNormalization after a Conv (with and without a bias) is folded into the conv's weights.
TEST(Onednn, BatchNormAfterConvIsFoldedIntoItsWeights) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {2, 6, 7, 7};
  GraphBuilder g(input);
  auto batch_norm = [&](const std::string& x) {
    const std::string variance = g.constant(random_tensor({6}, 11, 0.5f, 2.0f));
    return g.add("BatchNormalization", {x, g.weights({6}), g.weights({6}), g.weights({6}), variance});
  };
  const std::string with_bias =
      g.add("Conv", {"x", g.weights({6, 6, 3, 3}), g.weights({6})}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
  const std::string normalized = g.add("Relu", {batch_norm(with_bias)});
  const std::string without_bias =
      g.add("Conv", {normalized, g.weights({6, 6, 1, 1})}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
  const auto plan = expect_matches_native(g.finish({batch_norm(without_bias)}), input);
  EXPECT_EQ(plan->fused_nodes(), 3);  // two BatchNormalizations and the Relu
  for (const PlanStep& step : plan->steps()) EXPECT_NE(step.record.op_type, "BatchNormalization");
}

TEST(Onednn, SoftmaxLogSoftmaxAndLayerNormMatchNative) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {2, 8, 5, 6};
  GraphBuilder g(input);
  g.set_opset(17);
  Attributes last;
  last.set("axis", int_attr(-1));
  Attributes channels;
  channels.set("axis", int_attr(1));
  const std::string conv =
      g.add("Conv", {"x", g.weights({8, 8, 1, 1})}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
  const std::string over_channels = g.add("Softmax", {conv}, channels);  // on a channels-last value
  const std::string log_last = g.add("LogSoftmax", {"x"}, last);
  const std::string normalized = g.add("LayerNormalization", {"x", g.weights({6}), g.weights({6})}, last);
  const auto plan = expect_matches_native(g.finish({over_channels, log_last, normalized}), input);
  for (const std::string op : {"Softmax", "LogSoftmax", "LayerNormalization"}) {
    EXPECT_EQ(step_for(*plan, op).backend, "onednn") << op;
  }
  EXPECT_EQ(step_for(*plan, "Softmax").input_layouts.at(0), Layout::nhwc);
}

// MatMul + bias Add + GELU (as PyTorch exports it) and a second MatMul + bias + residual Add.
TEST(Onednn, MatMulFusesBiasGeluAndResidual) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {2, 5, 16};
  GraphBuilder g(input);
  const std::string hidden = g.add("Add", {g.weights({32}), g.add("MatMul", {"x", g.weights({16, 32})})});
  const std::string scaled = g.add("Div", {hidden, g.constant(Tensor::scalar(1.41421356f))});
  const std::string one_plus = g.add("Add", {g.add("Erf", {scaled}), g.constant(Tensor::scalar(1.0f))});
  const std::string gelu = g.add("Mul", {g.add("Mul", {hidden, one_plus}), g.constant(Tensor::scalar(0.5f))});
  const std::string projected = g.add("Add", {g.add("MatMul", {gelu, g.weights({32, 16})}), g.weights({16})});
  const std::string residual = g.add("Add", {projected, "x"});
  const auto plan = expect_matches_native(g.finish({residual}), input);
  ASSERT_EQ(plan->steps().size(), 2u);
  EXPECT_NE(plan->steps()[0].record.kernel.find("+bias+gelu_erf"), std::string::npos)
      << plan->steps()[0].record.kernel;
  EXPECT_NE(plan->steps()[1].record.kernel.find("+bias+sum"), std::string::npos)
      << plan->steps()[1].record.kernel;
  EXPECT_EQ(plan->fused_nodes(), 8);
}

// The nine nodes of an exported LayerNorm run as one LayerNormalization step.
TEST(Onednn, DecomposedLayerNormBecomesOneStep) {
  const Shape input = {3, 8};
  GraphBuilder g(input);
  Attributes last_axis;
  last_axis.set("axes", ints_attr({-1}));
  const std::string mean = g.add("ReduceMean", {"x"}, last_axis);
  const std::string centred = g.add("Sub", {"x", mean});
  const std::string squared = g.add("Pow", {centred, g.constant(Tensor::scalar(2.0f))});
  const std::string variance = g.add("ReduceMean", {squared}, last_axis);
  const std::string deviation = g.add("Sqrt", {g.add("Add", {variance, g.constant(Tensor::scalar(1e-5f))})});
  const std::string scale = g.weights({8});
  const std::string bias = g.weights({8});
  const std::string normalized =
      g.add("Add", {g.add("Mul", {g.add("Div", {centred, deviation}), scale}), bias});
  const Model model = g.finish({normalized});
  Session session(model);
  const Tensor x = random_tensor(input, 3);
  const Tensor y = session.run({{"x", x}}).at(normalized);
  const auto plan = session.plan_for({input});
  ASSERT_EQ(plan->steps().size(), 1u);
  EXPECT_EQ(plan->steps()[0].record.op_type, "LayerNormalization");
  EXPECT_EQ(plan->fused_nodes(), 8);
  const float* gamma = model.graph.initializers.at(scale).data<float>();
  const float* beta = model.graph.initializers.at(bias).data<float>();
  for (int64_t row = 0; row < 3; ++row) {
    const float* in = x.data<float>() + row * 8;
    double sum = 0, squares = 0;
    for (int64_t i = 0; i < 8; ++i) sum += in[i];
    const double mu = sum / 8;
    for (int64_t i = 0; i < 8; ++i) squares += (in[i] - mu) * (in[i] - mu);
    const double sigma = std::sqrt(squares / 8 + 1e-5);
    for (int64_t i = 0; i < 8; ++i) {
      EXPECT_NEAR(y.data<float>()[row * 8 + i], (in[i] - mu) / sigma * gamma[i] + beta[i], 1e-5)
          << row << "," << i;
    }
  }
}

// Tiny products run on BLAS; larger ones are refused by BLAS with the size rule and go to oneDNN.
TEST(Blas, TinyProductsMatchNativeAndLargeOnesAreRefused) {
  KILN_SKIP_UNLESS_BUILT("blas");
  const Shape input = {3, 4, 16};
  GraphBuilder g(input);
  const std::string small = g.add("MatMul", {"x", g.weights({16, 8})});  // 3*4 x 8 x 16 products
  Attributes transposed;
  transposed.set("transB", int_attr(1));
  transposed.set("beta", float_attr(0.5f));
  const std::string flat = g.add("Flatten", {small});  // [3, 32]
  const std::string gemm = g.add("Gemm", {flat, g.weights({5, 32}), g.weights({5})}, transposed);
  const auto plan = expect_matches_native(g.finish({small, gemm}), input, 1e-4, "blas");
  EXPECT_EQ(step_for(*plan, "MatMul").kernel, "blas:sgemm");
  EXPECT_EQ(step_for(*plan, "Gemm").kernel, "blas:sgemm");

  GraphBuilder h({1, 64, 64});
  const Model large = h.finish({h.add("MatMul", {"x", h.weights({64, 64})})});
  Session session(large);
  const StepRecord& step = session.plan_for({{1, 64, 64}})->steps().at(0).record;
  EXPECT_EQ(step.backend, "onednn");
  ASSERT_FALSE(step.decision.refusals.empty());
  EXPECT_EQ(step.decision.refusals[0].backend, "blas");
  EXPECT_EQ(step.decision.refusals[0].kind, RefusalKind::above_threshold);
  EXPECT_EQ(step.decision.refusals[0].detail,
            "M x N x K = 64 x 64 x 64 is above blas_threshold 32768 (oneDNN is faster on larger products)");
}

TEST(Onednn, RejectionReasonsAreRecorded) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {1, 4, 5, 5};
  GraphBuilder h(input);
  const std::string conv_ok =
      h.add("Conv", {"x", h.weights({4, 4, 1, 1})}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
  const Model model = h.finish({conv_ok});

  {
    const ScopedSettings off(Settings().set_by_name("onednn_enabled", 0));
    Session session(model);
    const StepRecord& step = session.plan_for({input})->steps().at(0).record;
    EXPECT_EQ(step.backend, "native");
    ASSERT_EQ(step.decision.refusals.size(), 2u);
    EXPECT_EQ(step.decision.refusals[0].backend, "winograd");
    EXPECT_EQ(step.decision.refusals[0].kind, RefusalKind::unsupported_shape);
    EXPECT_EQ(step.decision.refusals[0].detail, "kernel 1x1, not 3x3");
    EXPECT_EQ(step.decision.refusals[1].backend, "onednn");
    EXPECT_EQ(step.decision.refusals[1].kind, RefusalKind::disabled);
    EXPECT_EQ(step.decision.refusals[1].detail, "backend disabled");
  }

  // A Conv whose weights are a graph input (not a constant) is refused by oneDNN with that reason.
  Session session(testing::computed_weights_conv());
  const StepRecord& step = session.plan_for({input, {4, 4, 1, 1}})->steps().at(0).record;
  EXPECT_EQ(step.backend, "native");
  ASSERT_EQ(step.decision.refusals.size(), 2u);  // Winograd's first (a 1x1 kernel), then oneDNN's
  EXPECT_EQ(step.decision.refusals[1].backend, "onednn");
  EXPECT_EQ(step.decision.refusals[1].kind, RefusalKind::not_constant);
  EXPECT_EQ(step.decision.refusals[1].detail, "weights are not a plan-time constant");

  EXPECT_THROW(Settings().set_by_name("native_enabled", 0), Error);
  EXPECT_THROW(Settings().set_by_name("cuda_enabled", 0), Error);
}

// Weights oneDNN reordered into its kernels are not kept twice: the session releases the model's
// copies once no plan holds them, and reloads them from the file when a new plan needs them.
TEST(Onednn, CopiedWeightsAreReleasedAndReloadedForANewPlan) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  Session session(KILN_DEMO_MODEL);
  Tensor input = random_tensor({1, 3, 64, 64}, 5);
  const Tensor fast = session.run({{"input", input}}).at("logits");
  size_t released = 0;
  for (const auto& entry : session.model().graph.initializers) released += entry.second.defined() ? 0 : 1;
  EXPECT_GE(released, 4u) << "the four conv weights at least";

  Tensor reference;
  {
    const ScopedSettings off(Settings().set_by_name("onednn_enabled", 0));
    reference = session.run({{"input", input}}).at("logits");  // the native plan reads the weights again
  }
  EXPECT_LE(max_abs_diff(fast, reference), 1e-4);
  EXPECT_EQ(session.plan_for({{1, 3, 64, 64}})->steps().back().record.backend, "blas");
}

TEST(Onednn, DisablingOnednnReplansTheSession) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {1, 4, 5, 5};
  GraphBuilder g(input);
  const Model model =
      g.finish({g.add("Conv", {"x", g.weights({4, 4, 1, 1})}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}))});
  Session session(model);
  EXPECT_EQ(session.plan_for({input})->steps().back().record.backend, "onednn");
  const ScopedSettings off(Settings().set_by_name("onednn_enabled", 0));
  EXPECT_EQ(session.plan_for({input})->steps().back().record.backend, "native");
}

#if KILN_WITH_ONEDNN
// oneDNN's own scratchpad would be shared by concurrent runs: a primitive described without kiln's
// attributes is refused where it is created, naming it.
TEST(Onednn, APrimitiveLeavingItsScratchpadToOnednnIsRefused) {
  const dnnl::eltwise_forward::desc relu(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_relu,
                                         onednn::plain_desc({4, 4}), 0.0f);
  const dnnl::eltwise_forward::primitive_desc library(relu, onednn::engine());
  EXPECT_NE(testing::error_of([&] { onednn::Primitive{library}; }).find("library-managed scratchpad"),
            std::string::npos);
  const dnnl::eltwise_forward::primitive_desc user(relu, onednn::primitive_attributes(), onednn::engine());
  EXPECT_NO_THROW(onednn::Primitive{user});
}
#endif

// A 2-D ConvTranspose with a bias (W [C, M / group, k, k]); `pads` on every side.
Attributes conv_transpose_attrs(int64_t group, int64_t pads, int64_t output_padding) {
  Attributes attributes;
  attributes.set("strides", ints_attr({2, 2}));
  attributes.set("pads", ints_attr({pads, pads, pads, pads}));
  attributes.set("output_padding", ints_attr({output_padding, output_padding}));
  attributes.set("group", int_attr(group));
  return attributes;
}

// oneDNN's deconvolution against the native ConvTranspose: the end pads take output_padding in.
TEST(Onednn, ConvTransposeMatchesNative) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {2, 4, 5, 6};
  for (const int64_t group : {1, 2}) {
    for (const int64_t kernel : {2, 3}) {
      GraphBuilder g(input);
      const std::string deconv =
          g.add("ConvTranspose", {"x", g.weights({4, 6 / group, kernel, kernel}), g.weights({6})},
                conv_transpose_attrs(group, 1, 1));
      const auto plan = expect_matches_native(g.finish({deconv}), input);
      const StepRecord& step = step_for(*plan, "ConvTranspose");
      EXPECT_EQ(step.backend, "onednn") << "group " << group << " kernel " << kernel;
      EXPECT_EQ(step.kernel.rfind("onednn:", 0), 0u) << step.kernel;
    }
  }
}

// output_padding beyond the end pads reaches past every patch, which oneDNN does not pad: native runs it.
TEST(Onednn, ConvTransposeWithOutputPaddingPastTheEndPadsRunsNatively) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {1, 4, 5, 6};
  GraphBuilder g(input);
  const std::string deconv =
      g.add("ConvTranspose", {"x", g.weights({4, 3, 3, 3}), g.weights({3})}, conv_transpose_attrs(1, 0, 1));
  const auto plan = expect_matches_native(g.finish({deconv}), input);
  const StepRecord& step = step_for(*plan, "ConvTranspose");
  EXPECT_EQ(step.backend, "native");
  EXPECT_EQ(step.kernel, "native:conv_transpose");
  const auto onednn = std::find_if(step.decision.refusals.begin(), step.decision.refusals.end(),
                                   [](const auto& refusal) { return refusal.backend == "onednn"; });
  ASSERT_NE(onednn, step.decision.refusals.end());
  EXPECT_EQ(onednn->kind, RefusalKind::unsupported_shape);
  EXPECT_NE(onednn->detail.find("output_padding beyond the end pads"), std::string::npos) << onednn->detail;
}

// Atrous convolutions whose dilation reaches past the input (DeepLab's ASPP: dilation 24 and 36 on
// a small feature map) keep only the taps that read the input: the same sums as native's full kernel.
// One whose taps still mostly read padding after cropping is left to native's per-tap products.
TEST(Onednn, DilatedConvReadingOnlyPaddingOutsideTheCentreIsCropped) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {1, 8, 6, 7};
  struct Case {
    int64_t dilation;
    const char* cropped_to;  // "" when every tap reads the input somewhere, or oneDNN refuses
    const char* backend;
  };
  for (const Case c : {Case{8, "[1, 1]", "onednn"}, Case{2, "", "onednn"}, Case{6, "", "native"}}) {
    GraphBuilder g(input);
    const int64_t d = c.dilation;
    const std::string conv = g.add("Conv", {"x", g.weights({4, 8, 3, 3}), g.weights({4})},
                                   conv_attrs({3, 3}, {1, 1}, {d, d, d, d}, 1, {d, d}));
    const auto plan = expect_matches_native(g.finish({conv}), input);
    const StepRecord& step = step_for(*plan, "Conv");
    ASSERT_EQ(step.backend, c.backend) << "dilation " << d;
    const bool noted = std::any_of(step.notes.begin(), step.notes.end(), [&](const std::string& note) {
      return note.find(str_cat("to ", c.cropped_to)) != std::string::npos;
    });
    EXPECT_EQ(noted, *c.cropped_to != 0) << "dilation " << d;
  }
  // Dilation 6 on 6x7: cropped to 1x3, whose side taps land inside for one column of seven.
  GraphBuilder g(input);
  const std::string conv = g.add("Conv", {"x", g.weights({4, 8, 3, 3}), g.weights({4})},
                                 conv_attrs({3, 3}, {1, 1}, {6, 6, 6, 6}, 1, {6, 6}));
  const auto plan = Plan::build(g.finish({conv}), {input});
  const StepRecord& step = step_for(*plan, "Conv");
  EXPECT_TRUE(step.kernel.starts_with("native:conv_live_taps_sgemm")) << step.kernel;
  const auto onednn = std::find_if(step.decision.refusals.begin(), step.decision.refusals.end(),
                                   [](const auto& refusal) { return refusal.backend == "onednn"; });
  ASSERT_NE(onednn, step.decision.refusals.end());
  EXPECT_EQ(onednn->kind, RefusalKind::predicted_slower);
  EXPECT_EQ(onednn->detail,
            "taps land inside the input for 43% of the kernel's multiply-adds (at most 50%: native's "
            "per-tap products skip the padding)");
}

// ---- LSTM, GRU, RNN: oneDNN's RNN primitives against the native kernel ----------------------------

struct RecurrentCase {
  std::string op;
  std::string direction = "forward";
  bool batch_first = false;
  bool initial = false;
  bool peepholes = false;
  int64_t linear_before_reset = 0;
  std::string activation = "";  // RNN only: its one function (empty: the default)
};

// A layer over x [seq 6, batch, input 5] (batch first: [batch, 6, 5]), hidden 8, every output kept.
Model recurrent_model(const RecurrentCase& c, const Shape& input) {
  const int64_t nd = c.direction == "bidirectional" ? 2 : 1;
  const int64_t gates = c.op == "LSTM" ? 4 : c.op == "GRU" ? 3 : 1;
  const int64_t hidden = 8, batch = input[c.batch_first ? 0 : 1];
  GraphBuilder g(input);
  g.set_opset(14);
  Attributes attributes;
  attributes.set("hidden_size", int_attr(hidden));
  attributes.set("direction", testing::string_attr(c.direction));
  attributes.set("layout", int_attr(c.batch_first ? 1 : 0));
  if (c.op == "GRU") attributes.set("linear_before_reset", int_attr(c.linear_before_reset));
  if (!c.activation.empty()) {
    Attribute names;
    names.type = Attribute::Type::strings;
    names.strings = {c.activation};
    attributes.set("activations", names);
  }
  if (c.activation == "LeakyRelu") {
    Attribute alpha;
    alpha.type = Attribute::Type::floats;
    alpha.floats = {0.2f};
    attributes.set("activation_alpha", alpha);
  }
  const Shape state = c.batch_first ? Shape{batch, nd, hidden} : Shape{nd, batch, hidden};
  std::vector<std::string> inputs = {"x",
                                     g.weights({nd, gates * hidden, input[2]}),
                                     g.weights({nd, gates * hidden, hidden}),
                                     g.weights({nd, 2 * gates * hidden}),
                                     "",
                                     c.initial ? g.weights(state, 1.0f) : ""};
  if (c.op == "LSTM") {
    inputs.push_back(c.initial ? g.weights(state, 1.0f) : "");
    inputs.push_back(c.peepholes ? g.weights({nd, 3 * hidden}) : "");
  }
  while (inputs.back().empty()) inputs.pop_back();
  return g.finish(g.add_outputs(c.op, inputs, c.op == "LSTM" ? 3 : 2, attributes));
}

class OnednnRecurrent : public ::testing::TestWithParam<RecurrentCase> {};

TEST_P(OnednnRecurrent, MatchesNative) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const RecurrentCase& c = GetParam();
  // Batch 7: oneDNN leaves batches of up to 4 to the native kernel.
  const Shape input = c.batch_first ? Shape{7, 6, 5} : Shape{6, 7, 5};
  const auto plan = expect_matches_native(recurrent_model(c, input), input);
  EXPECT_EQ(step_for(*plan, c.op).backend, "onednn");
}

INSTANTIATE_TEST_SUITE_P(
    Cells, OnednnRecurrent,
    ::testing::Values(
        RecurrentCase{.op = "LSTM"}, RecurrentCase{.op = "LSTM", .direction = "reverse", .initial = true},
        RecurrentCase{.op = "LSTM", .direction = "bidirectional", .initial = true, .peepholes = true},
        RecurrentCase{.op = "LSTM",
                      .direction = "bidirectional",
                      .batch_first = true,
                      .initial = true,
                      .peepholes = true},
        RecurrentCase{.op = "GRU"}, RecurrentCase{.op = "GRU", .direction = "bidirectional", .initial = true},
        RecurrentCase{.op = "GRU",
                      .direction = "bidirectional",
                      .batch_first = true,
                      .initial = true,
                      .linear_before_reset = 1},
        RecurrentCase{.op = "GRU", .direction = "reverse", .linear_before_reset = 1},
        RecurrentCase{.op = "RNN"},
        RecurrentCase{.op = "RNN",
                      .direction = "bidirectional",
                      .batch_first = true,
                      .initial = true,
                      .activation = "Relu"},
        RecurrentCase{.op = "RNN", .initial = true, .activation = "LeakyRelu"},
        RecurrentCase{.op = "RNN", .direction = "reverse", .activation = "Sigmoid"}));

// What oneDNN's primitives cannot compute runs natively, with the reason kept in the plan.
TEST(Onednn, RecurrentRefusalsNameTheirReason) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const Shape input = {6, 7, 5};
  auto refusal_of = [&](const Model& model, const Settings& settings) {
    const ScopedSettings scoped(settings);
    Session session(model);
    session.run({{"x", random_tensor(input, 2)}});
    const StepRecord& step = step_for(*session.plan_for({input}), "LSTM");
    EXPECT_EQ(step.backend, "native");
    const auto onednn = std::find_if(step.decision.refusals.begin(), step.decision.refusals.end(),
                                     [](const Refusal& r) { return r.backend == "onednn"; });
    return onednn != step.decision.refusals.end() ? *onednn : Refusal{};
  };
  Model clipped = recurrent_model(RecurrentCase{.op = "LSTM"}, input);
  clipped.graph.nodes.back().attributes.set("clip", float_attr(0.5f));
  const Refusal clip = refusal_of(clipped, Settings());
  EXPECT_EQ(clip.kind, RefusalKind::unsupported_attribute);
  EXPECT_NE(clip.detail.find("clip"), std::string::npos);
  const Refusal off = refusal_of(recurrent_model(RecurrentCase{.op = "LSTM"}, input),
                                 Settings().set(SettingKey("rnn_fastpath"), 0));
  EXPECT_EQ(off.kind, RefusalKind::excluded_by_setting);
  const Shape small = {6, 4, 5};
  Session session(recurrent_model(RecurrentCase{.op = "LSTM"}, small));
  session.run({{"x", random_tensor(small, 2)}});
  const StepRecord& step = step_for(*session.plan_for({small}), "LSTM");
  EXPECT_EQ(step.backend, "native");
  ASSERT_FALSE(step.decision.refusals.empty());
  EXPECT_EQ(step.decision.refusals.front().kind, RefusalKind::predicted_slower);
}

}  // namespace
}  // namespace kiln
