// Concats distributed into the convolutions reading them (graph/passes/concat_distribution.cpp): the
// split model computes what the joined one does, and the rewrite leaves every other case alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/registry.h"
#include "backends/selection.h"
#include "backends/settings.h"
#include "graph/passes/passes.h"
#include "graph/session.h"
#include "graph_builder.h"

namespace kiln {
namespace {

using testing::conv_attrs;
using testing::GraphBuilder;
using testing::int_attr;
using testing::max_abs_diff;
using testing::random_tensor;

const Shape kInput = {2, 8, 9, 9};

// A 1x1 convolution of `x` (`in` channels) to `out` channels, without bias.
std::string pointwise_conv(GraphBuilder& g, const std::string& x, int64_t out, int64_t in) {
  return g.add("Conv", {x, g.weights({out, in, 1, 1})}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
}

// Every output within 1e-5 of the expected one's scale: the parts summed in another order.
void expect_close(const std::vector<Tensor>& got, const std::vector<Tensor>& expected,
                  const std::string& what) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].shape(), expected[i].shape()) << what;
    double scale = 1;
    for (float v : expected[i].values<float>()) scale = std::max(scale, static_cast<double>(std::abs(v)));
    EXPECT_LE(max_abs_diff(got[i], expected[i]), 1e-5 * scale) << "output " << i << ", " << what;
  }
}

Attributes axis_attr(int64_t axis) {
  Attributes attributes;
  attributes.set("axis", int_attr(axis));
  return attributes;
}

// Three branches of 6, 10 and 4 channels joined, read by a 1x1 Conv (bias, Relu after) and a 3x3 one.
struct Branches {
  GraphBuilder g{kInput};
  std::string joined, pointwise, spatial;
  explicit Branches(int64_t axis = 1, int64_t pointwise_channels = 5) {
    const std::string a = g.add("Relu", {pointwise_conv(g, "x", 6, 8)});
    const std::string b = g.add(
        "Relu", {g.add("Conv", {"x", g.weights({10, 8, 3, 3})}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}))});
    const std::string c = pointwise_conv(g, "x", 4, 8);
    joined = g.add("Concat", {a, b, c}, axis_attr(axis));
    pointwise = g.add(
        "Relu",
        {g.add("Conv", {joined, g.weights({pointwise_channels, 20, 1, 1}), g.weights({pointwise_channels})},
               conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}))});
    spatial = g.add("Conv", {joined, g.weights({3, 20, 3, 3})}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
  }
};

std::vector<Tensor> run(const Model& model, const Tensor& x, bool native_only,
                        std::shared_ptr<const Plan>* plan) {
  Settings settings;
  if (native_only) {
    settings.set(BackendSettingKey("enabled"), backend_position("onednn"), false)
        .set(BackendSettingKey("enabled"), backend_position("blas"), false)
        .set(BackendSettingKey("enabled"), backend_position("winograd"), false);
  }
  const ScopedSettings scoped(
      settings.set("threads", 2).set(SettingKey("conv_algorithm"), static_cast<int>(ConvAlgorithm::direct)));
  Session session(model);
  const TensorMap result = session.run({{"x", x}});
  *plan = session.plan_for({x.shape()});
  return {result.at(model.graph.outputs[0].name), result.at(model.graph.outputs[1].name)};
}

std::optional<DistributedConcats> distributed_under(const Settings& settings, const Model& model) {
  return distribute_concats(model, settings);
}

// Whether some backend built here fuses a sum into a Conv (oneDNN, Winograd): else nothing distributes.
bool sums_fuse() {
  return has_post_op_kind(fusion_offered("Conv", Settings::defaults()).post_ops, PostOp::Kind::sum);
}

int concat_steps(const Plan& plan) {
  return static_cast<int>(std::count_if(plan.steps().begin(), plan.steps().end(), [](const PlanStep& step) {
    return step.record.op_type == "Concat";
  }));
}

TEST(ConcatDistribution, TheSplitConvolutionsComputeWhatTheJoinedOnesDo) {
  if (!sums_fuse()) GTEST_SKIP() << "no backend built here fuses a sum into a Conv";
  Branches split;
  const Model distributable = split.g.finish({split.pointwise, split.spatial});
  // The same model with the joined value also a graph output: the Concat stays.
  Branches kept;
  const Model joined = kept.g.finish({kept.pointwise, kept.spatial, kept.joined});

  const std::optional<DistributedConcats> rewritten = distributed_under(Settings::defaults(), distributable);
  ASSERT_TRUE(rewritten.has_value());
  EXPECT_EQ(rewritten->concats, 1);
  EXPECT_FALSE(distributed_under(Settings::defaults(), joined).has_value());
  int convs = 0, adds = 0;
  for (const Node& node : rewritten->model.graph.nodes) {
    EXPECT_NE(node.op_type, "Concat");
    convs += node.op_type == "Conv";
    adds += node.op_type == "Add";
  }
  EXPECT_EQ(convs, 3 + 2 * 3);  // the branches, then each reader as three parts
  EXPECT_EQ(adds, 2 * 2);

  const Tensor x = random_tensor(kInput, 3);
  for (const bool native_only : {false, true}) {
    // Native fuses no sums, so planning would keep the Concat there: the rewritten model is run
    // itself, the native kernels checking the rewrite's arithmetic.
    std::shared_ptr<const Plan> split_plan, joined_plan;
    const std::vector<Tensor> got =
        run(native_only ? rewritten->model : distributable, x, native_only, &split_plan);
    const std::vector<Tensor> expected = run(joined, x, native_only, &joined_plan);
    expect_close(got, expected, native_only ? "native" : "default backends");
    EXPECT_EQ(concat_steps(*split_plan), 0);
    EXPECT_EQ(concat_steps(*joined_plan), 1);
    const auto part =
        std::find_if(split_plan->steps().begin(), split_plan->steps().end(),
                     [](const PlanStep& step) { return step.record.node_name.ends_with(":part1"); });
    ASSERT_NE(part, split_plan->steps().end());
    if (!native_only) {
      EXPECT_TRUE(has_note(part->record, "distributed: part 2 of 3 (input channels 6..15)"));
    }
  }
  // Planned under native alone, the model keeps its Concat.
  std::shared_ptr<const Plan> native_plan;
  run(distributable, x, true, &native_plan);
  EXPECT_EQ(concat_steps(*native_plan), 1);
}

TEST(ConcatDistribution, NamesTheModelGivesTwiceLeaveTheModelAsWritten) {
  if (!sums_fuse()) GTEST_SKIP() << "no backend built here fuses a sum into a Conv";
  // Two readers named alike (ONNX does not require unique node names): each keeps its own weights.
  Branches b;
  Model model = b.g.finish({b.pointwise, b.spatial});
  for (Node& node : model.graph.nodes) {
    if (node.op_type == "Conv" && node.inputs[0] == b.joined) node.name = "reader";
  }
  // The second reader's parts would take the first one's names ("reader:part0"): nothing is split.
  EXPECT_FALSE(distributed_under(Settings::defaults(), model));
  Branches kept;
  const Model joined = kept.g.finish({kept.pointwise, kept.spatial, kept.joined});
  const Tensor x = random_tensor(kInput, 4);
  std::shared_ptr<const Plan> plan, joined_plan;
  const std::vector<Tensor> got = run(model, x, false, &plan);
  const std::vector<Tensor> expected = run(joined, x, false, &joined_plan);
  expect_close(got, expected, "names given twice");
}

// A 1x1 Conv reading the join of a 1x1 Conv's 6 channels and `other`'s 2 (from the [2, 8, 9, 9] input),
// which cannot be joined: planning must fail on the Concat as the file has it, not on a split node.
void expect_the_concat_refuses(const std::vector<int64_t>& other_kernel,
                               const std::vector<int64_t>& other_strides) {
  GraphBuilder g(kInput);
  const std::string a = pointwise_conv(g, "x", 6, 8);
  const std::string b = g.add("Conv", {"x", g.weights({2, 8, other_kernel[0], other_kernel[1]})},
                              conv_attrs(other_kernel, other_strides, {0, 0, 0, 0}));
  const std::string joined = g.add("Concat", {a, b}, axis_attr(1));
  const Model model = g.finish({pointwise_conv(g, joined, 2, 8)});
  ASSERT_TRUE(distributed_under(Settings::defaults(), model).has_value());
  try {
    Session(model).run({{"x", random_tensor(kInput, 2)}});
    ADD_FAILURE() << "planned a Concat of parts that differ outside the channels";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("Concat"), std::string::npos) << message;
    EXPECT_EQ(message.find(":part"), std::string::npos) << message;
    EXPECT_EQ(message.find(":sum"), std::string::npos) << message;
  }
}

TEST(ConcatDistribution, APlanningErrorNamesTheModelsOwnNodes) {
  if (!sums_fuse()) GTEST_SKIP() << "no backend built here fuses a sum into a Conv";
  expect_the_concat_refuses({1, 1}, {2, 2});  // [2, 6, 9, 9] and [2, 2, 5, 5]: the split Adds refuse too
}

TEST(ConcatDistribution, PartsThatCouldNotBeJoinedAreNotBroadcastTogether) {
  if (!sums_fuse()) GTEST_SKIP() << "no backend built here fuses a sum into a Conv";
  expect_the_concat_refuses({9, 9}, {1, 1});  // [2, 6, 9, 9] and [2, 2, 1, 1]: the Adds would broadcast
}

TEST(ConcatDistribution, LeavesEveryOtherConcatAlone) {
  if (!sums_fuse()) GTEST_SKIP() << "no backend built here fuses a sum into a Conv";
  {  // a reader that is not a Conv
    Branches b;
    EXPECT_FALSE(distributed_under(Settings::defaults(),
                                   b.g.finish({b.pointwise, b.spatial, b.g.add("Relu", {b.joined})})));
  }
  {  // a grouped Conv reads it
    Branches b;
    const std::string grouped =
        b.g.add("Conv", {b.joined, b.g.weights({4, 10, 1, 1})}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, 2));
    EXPECT_FALSE(distributed_under(Settings::defaults(), b.g.finish({b.pointwise, b.spatial, grouped})));
  }
  {  // a Conv whose weights are computed, not constant
    Branches b;
    const std::string computed = b.g.add("Identity", {b.g.weights({3, 20, 1, 1})});
    const std::string reader =
        b.g.add("Conv", {b.joined, computed}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
    EXPECT_FALSE(distributed_under(Settings::defaults(), b.g.finish({b.pointwise, b.spatial, reader})));
  }
  {  // the Adds would read as many channels as the copy writes: (3 - 1) x 10 >= 20
    Branches b(1, 10);
    EXPECT_FALSE(distributed_under(Settings::defaults(), b.g.finish({b.pointwise, b.spatial})));
  }
  {  // two readers whose Adds together read as many channels as the copy writes: 2 x (2 x 5) >= 20
    Branches b;
    const std::string again = pointwise_conv(b.g, b.joined, 5, 20);
    EXPECT_FALSE(distributed_under(Settings::defaults(), b.g.finish({b.pointwise, again})));
  }
  {  // a reader whose result a BatchNormalization or a residual Add reads (their fusion would be lost)
    Branches b;
    const std::string normalized =
        b.g.add("BatchNormalization", {b.spatial, b.g.weights({3}), b.g.weights({3}), b.g.weights({3}),
                                       b.g.constant(random_tensor({3}, 5, 0.5f, 2.0f))});
    EXPECT_FALSE(distributed_under(Settings::defaults(), b.g.finish({b.pointwise, normalized})));
    Branches r;
    EXPECT_FALSE(distributed_under(Settings::defaults(),
                                   r.g.finish({r.pointwise, r.g.add("Add", {r.spatial, r.spatial})})));
  }
  {  // weights with no output channels
    GraphBuilder g(kInput);
    const std::string a = pointwise_conv(g, "x", 6, 8);
    const std::string b = pointwise_conv(g, "x", 2, 8);
    const std::string joined = g.add("Concat", {a, b}, axis_attr(1));
    const std::string y = g.add("Conv", {joined, g.constant(Tensor::zeros(DType::f32, {0, 8, 1, 1}))},
                                conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
    EXPECT_FALSE(distributed_under(Settings::defaults(), g.finish({y})));
  }
  {  // settings under which no backend would fuse the sums, or each partial sum would be rounded
    Branches b;
    const Model model = b.g.finish({b.pointwise, b.spatial});
    ASSERT_TRUE(distributed_under(Settings::defaults(), model).has_value());
    EXPECT_FALSE(distributed_under(Settings::defaults().set("deterministic", 1), model));
    EXPECT_FALSE(distributed_under(
        Settings::defaults().set(SettingKey("conv_precision"), static_cast<int>(Precision::bf16)), model));
    EXPECT_FALSE(
        distributed_under(Settings::defaults()
                              .set(BackendSettingKey("enabled"), backend_position("onednn"), false)
                              .set(BackendSettingKey("enabled"), backend_position("winograd"), false),
                          model));
  }
  {  // not along the channels
    Branches b(2);
    EXPECT_FALSE(distributed_under(Settings::defaults(), b.g.finish({b.pointwise})));
  }
  {  // a part whose channels no weight fixes (the graph input)
    GraphBuilder g(kInput);
    const std::string a = pointwise_conv(g, "x", 6, 8);
    const std::string joined = g.add("Concat", {a, "x"}, axis_attr(1));
    const std::string y = pointwise_conv(g, joined, 2, 14);
    EXPECT_FALSE(distributed_under(Settings::defaults(), g.finish({y})));
  }
  // Channels through -3 (the same axis), a Relu and a nested channel Concat are known.
  GraphBuilder g(kInput);
  const std::string a = pointwise_conv(g, "x", 6, 8);
  const std::string b = pointwise_conv(g, "x", 2, 8);
  const std::string inner = g.add("Relu", {g.add("Concat", {a, b}, axis_attr(1))});
  const std::string joined = g.add("Concat", {inner, a}, axis_attr(-3));
  const std::string y = pointwise_conv(g, joined, 2, 14);
  const std::optional<DistributedConcats> rewritten =
      distributed_under(Settings::defaults(), g.finish({y, inner}));
  ASSERT_TRUE(rewritten.has_value());
  EXPECT_EQ(rewritten->concats, 1);  // the inner one is read by a Relu: kept
}

}  // namespace
}  // namespace kiln
