// The MHA fast path: a residual Add (with the attention output's [L, B, E] -> [B, L, E] transposition
// before it) and the LayerNorm after it become one ResidualLayerNorm step, equal to the nodes it
// replaces; mha_fastpath off plans the nodes as exported.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/backends.h"
#include "graph/session.h"
#include "graph_builder.h"
#include "ops/residual_layer_norm.h"

namespace kiln {
namespace {

using testing::GraphBuilder;

Attributes perm_1_0_2() {
  Attributes perm;
  perm.set("perm", testing::ints_attr({1, 0, 2}));
  return perm;
}

// x [L, B, E]: residual = x as [B, L, E]; y = LayerNorm(Transpose(x W) + residual) over E.
Model residual_block(const Shape& shape, bool decomposed) {
  GraphBuilder g(shape);
  const int64_t e = shape[2];
  const std::string residual = g.add("Transpose", {"x"}, perm_1_0_2());
  const std::string attention_out = g.add("MatMul", {"x", g.weights({e, e})});
  const std::string sum = g.add("Add", {g.add("Transpose", {attention_out}, perm_1_0_2()), residual});
  const std::string scale = g.weights({e}, 1.5f);
  const std::string bias = g.weights({e});
  if (!decomposed) {
    g.set_opset(17);
    Attributes epsilon;
    epsilon.set("epsilon", testing::float_attr(1e-5f));
    return g.finish({g.add("LayerNormalization", {sum, scale, bias}, epsilon)});
  }
  Attributes last_axis;
  last_axis.set("axes", testing::ints_attr({-1}));
  const std::string mean = g.add("ReduceMean", {sum}, last_axis);
  const std::string centred = g.add("Sub", {sum, mean});
  const std::string variance =
      g.add("ReduceMean", {g.add("Pow", {centred, g.constant(Tensor::scalar(2.0f))})}, last_axis);
  const std::string deviation = g.add("Sqrt", {g.add("Add", {variance, g.constant(Tensor::scalar(1e-5f))})});
  return g.finish({g.add("Add", {g.add("Mul", {g.add("Div", {centred, deviation}), scale}), bias})});
}

double relative_error(const Tensor& got, const Tensor& want) {
  double error = 0;
  double scale = 1e-30;
  for (int64_t i = 0; i < want.numel(); ++i) {
    error = std::max(error, static_cast<double>(std::abs(got.data<float>()[i] - want.data<float>()[i])));
    scale = std::max(scale, static_cast<double>(std::abs(want.data<float>()[i])));
  }
  return error / scale;
}

int steps_of(Session& session, const Shape& shape, std::string_view op_type = {}) {
  int count = 0;
  for (const PlanStep& step : session.plan_for(std::vector<Shape>{shape})->steps())
    count += op_type.empty() || step.record.op_type == op_type ? 1 : 0;
  return count;
}

TEST(MhaFastPath, ResidualAddAndLayerNormAreOneStepEqualToTheNodes) {
  for (bool decomposed : {false, true}) {
    // Batch 1 and 3, a last axis that is and is not a multiple of the vector width.
    for (const Shape& shape : {Shape{6, 1, 32}, Shape{6, 3, 32}, Shape{5, 2, 20}}) {
      for (int threads : {1, 2}) {
        SCOPED_TRACE(str_cat(decomposed ? "decomposed " : "LayerNormalization ", shape_to_string(shape),
                             " threads ", threads));
        const ScopedThreads scoped(threads);
        const Model model = residual_block(shape, decomposed);
        const Tensor x = testing::random_tensor(shape, 5);
        Session fast(model);
        const Tensor out = fast.run({{"x", x}}).begin()->second;
        EXPECT_EQ(steps_of(fast, shape, kResidualLayerNormOp), 1);
        const int fast_steps = steps_of(fast, shape);
        const ScopedSettings off(Settings().set(SettingKey("mha_fastpath"), 0));
        Session exported(model);
        const Tensor expected = exported.run({{"x", x}}).begin()->second;
        EXPECT_EQ(steps_of(exported, shape, kResidualLayerNormOp), 0);
        // The Transpose before the Add and the Add go, and the LayerNorm's step(s).
        EXPECT_EQ(fast_steps + 2, steps_of(exported, shape));
        EXPECT_LE(relative_error(out, expected), 1e-5);
      }
    }
  }
}

TEST(MhaFastPath, ABroadcastAddOrAnotherReaderOfTheSumKeepsTheNodes) {
  GraphBuilder g({2, 4, 8});
  // The Add broadcasts a [8] operand: not a residual of the same shape.
  const std::string sum = g.add("Add", {g.add("Relu", {"x"}), g.weights({8})});
  g.set_opset(17);
  const std::string norm = g.add("LayerNormalization", {sum, g.weights({8}), g.weights({8})});
  Session broadcast(g.finish({norm}));
  EXPECT_EQ(steps_of(broadcast, {2, 4, 8}, kResidualLayerNormOp), 0);

  GraphBuilder h({2, 4, 8});
  const std::string residual_sum = h.add("Add", {h.add("Relu", {"x"}), "x"});
  h.set_opset(17);
  const std::string normalized = h.add("LayerNormalization", {residual_sum, h.weights({8}), h.weights({8})});
  // The sum is also a graph output: it must be stored.
  Session read_twice(h.finish({normalized, residual_sum}));
  EXPECT_EQ(steps_of(read_twice, {2, 4, 8}, kResidualLayerNormOp), 0);

  GraphBuilder k({2, 4, 8});
  const std::string other_sum = k.add("Add", {k.add("Relu", {"x"}), "x"});
  k.set_opset(17);
  const std::string other_norm = k.add("LayerNormalization", {other_sum, k.weights({8}), k.weights({8})});
  // Another node reads the sum too.
  Session other_reader(k.finish({other_norm, k.add("Sigmoid", {other_sum})}));
  EXPECT_EQ(steps_of(other_reader, {2, 4, 8}, kResidualLayerNormOp), 0);
}

TEST(MhaFastPath, TheSwitchIsASettingWithTorchsName) {
  EXPECT_EQ(backends::get_text("mha.fastpath_enabled"), "1");
  backends::set_text("mha.fastpath_enabled", "off");
  EXPECT_EQ(backends::get_text("mha.fastpath_enabled"), "0");
  EXPECT_EQ(backends::get("mha_fastpath"), 0);  // the alias is the setting
  {
    const ScopedSettings on(Settings().set(SettingKey("mha_fastpath"), 1));
    EXPECT_EQ(backends::get_text("mha.fastpath_enabled"), "1");
  }
  EXPECT_EQ(backends::get_text("mha.fastpath_enabled"), "0");
  backends::set_text("mha.fastpath_enabled", "on");
  EXPECT_EQ(backends::get_text("mha.fastpath_enabled"), "1");
  EXPECT_THROW(backends::set_text("mha.fastpath_enabled", "maybe"), Error);
}

}  // namespace
}  // namespace kiln
