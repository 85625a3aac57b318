// Each kind of refusal a backend or kernel selection returns, from a node or setting made for it: the
// kind is what code (tidy, tests) decides on, so each is checked where it arises. Kinds of a backend
// configured out are checked as not_built there.
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>

#include "backend_test_util.h"
#include "backends/base/refusal.h"
#include "backends/choice_cache.h"
#include "backends/prefer.h"
#include "backends/selection.h"
#include "graph/plan.h"
#include "graph_builder.h"

namespace kiln {
namespace {

using testing::conv_attrs;
using testing::GraphBuilder;

// The kind of `backend`'s refusal in `refusals`, if it refused.
std::optional<RefusalKind> kind_of(const std::vector<Refusal>& refusals, std::string_view backend) {
  for (const Refusal& refusal : refusals) {
    if (refusal.backend == backend) return refusal.kind;
  }
  return std::nullopt;
}

// The record of the step computing `value` (a GraphBuilder node's output, "<node>_out") of `model`
// planned for `input` under `settings`.
StepRecord planned_step(const Model& model, const Shape& input, const Settings& settings,
                        const std::string& value) {
  const auto plan = Plan::build(model, {input}, {}, settings);
  for (const PlanStep& step : plan->steps()) {
    if (step.record.node_name + "_out" == value) return step.record;
  }
  ADD_FAILURE() << "no step computes " << value;
  return {};
}

// `kind`, or not_built where `backend` was configured out (the selection then never asks it).
RefusalKind where_built(std::string_view backend, RefusalKind kind) {
  return backends::info(backend).built ? kind : RefusalKind::not_built;
}

TEST(RefusalKinds, EveryKindHasOneStableName) {
  std::set<std::string_view> names;
  for (RefusalKind kind : all_refusal_kinds()) {
    const std::string_view name = refusal_kind_name(kind);
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_EQ(refusal_kind_from_name(name), kind);
    EXPECT_NE(refusal_kind_names().find(name), std::string::npos);
  }
  EXPECT_EQ(refusal_kind_from_name("backend disabled"), std::nullopt);
}

TEST(RefusalKinds, SettingsKeepBackendsAway) {
  GraphBuilder g({1, 32, 8, 8});
  const std::string conv =
      g.add("Conv", {"x", g.weights({32, 32, 3, 3})}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
  const Model model = g.finish({conv});
  Settings settings = current_settings();
  settings.set_by_name("onednn_enabled", 0).set_by_name("conv_algorithm", 1);  // direct
  const StepRecord step = planned_step(model, {1, 32, 8, 8}, settings, conv);
  EXPECT_EQ(kind_of(step.decision.refusals, "onednn"), RefusalKind::disabled);
  EXPECT_EQ(kind_of(step.decision.refusals, "winograd"), RefusalKind::excluded_by_setting);

  GraphBuilder p({16, 16});
  const std::string product = p.add("MatMul", {"x", p.weights({16, 16})});
  const Model products = p.finish({product});
  Settings deterministic = current_settings();
  deterministic.set_by_name("deterministic", 1);
  const StepRecord exact = planned_step(products, {16, 16}, deterministic, product);
  EXPECT_EQ(kind_of(exact.decision.refusals, "blas"), where_built("blas", RefusalKind::deterministic));
  EXPECT_EQ(kind_of(exact.decision.refusals, "onednn"), where_built("onednn", RefusalKind::deterministic));

  // Only BLAS listed, for a product above its threshold: it refuses, and the others are not
  // preferred (a planning error lists all three).
  Settings blas_only = current_settings();
  const std::string_view blas[] = {"blas"};
  const std::string_view matmul[] = {"matmul"};
  blas_only.overlay(backends::prefer_setting(blas, matmul));
  Attributes none;
  KernelRequest request;
  request.op.op_type = "MatMul";
  request.op.attributes = &none;
  request.op.inputs = {TensorInfo{DType::f32, {64, 64}, {}}, TensorInfo{DType::f32, {64, 64}, {}}};
  const TensorInfo output{DType::f32, {64, 64}, {}};
  const KernelSelection none_preferred = find_kernel(request, std::span(&output, 1), blas_only);
  EXPECT_EQ(none_preferred.kernel, nullptr);
  EXPECT_EQ(kind_of(none_preferred.decision.refusals, "blas"), where_built("blas", RefusalKind::above_threshold));
  EXPECT_EQ(kind_of(none_preferred.decision.refusals, "onednn"), RefusalKind::not_preferred);
  EXPECT_EQ(kind_of(none_preferred.decision.refusals, "native"), RefusalKind::not_preferred);
}

TEST(RefusalKinds, BackendsSayWhatTheyDoNotTake) {
  // A stride-2 1x1 Conv whose weights are computed: Winograd refuses its kernel size, oneDNN its
  // weights.
  const Model computed = testing::computed_weights_conv();
  const auto plan = Plan::build(computed, {{1, 4, 5, 5}, {4, 4, 1, 1}}, {}, current_settings());
  const std::vector<Refusal>& refusals = plan->steps().at(0).record.decision.refusals;
  EXPECT_EQ(kind_of(refusals, "winograd"), RefusalKind::unsupported_shape);
  EXPECT_EQ(kind_of(refusals, "onednn"), where_built("onednn", RefusalKind::not_constant));

  GraphBuilder s({1, 32, 16, 16});
  const std::string strided =
      s.add("Conv", {"x", s.weights({32, 32, 3, 3})}, conv_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}));
  const StepRecord stride = planned_step(s.finish({strided}), {1, 32, 16, 16}, current_settings(), strided);
  EXPECT_EQ(kind_of(stride.decision.refusals, "winograd"), RefusalKind::unsupported_attribute);

  // BLAS takes small products only; oneDNN has no Transpose.
  GraphBuilder p({64, 64});
  const std::string product = p.add("MatMul", {"x", p.weights({64, 64})});
  const std::string transposed = p.add("Transpose", {product});
  const Model products = p.finish({transposed});
  EXPECT_EQ(kind_of(planned_step(products, {64, 64}, current_settings(), product).decision.refusals, "blas"),
            where_built("blas", RefusalKind::above_threshold));
  EXPECT_EQ(
      kind_of(planned_step(products, {64, 64}, current_settings(), transposed).decision.refusals, "onednn"),
      where_built("onednn", RefusalKind::no_kernel));
}

TEST(RefusalKinds, BackendsAskedDirectlyRefuseWithTheirKinds) {
  Attributes none;
  KernelRequest product;
  product.op.op_type = "MatMul";
  product.op.attributes = &none;
  product.op.inputs = {TensorInfo{DType::i32, {4, 4}, {}}, TensorInfo{DType::i32, {4, 4}, {}}};
  const TensorInfo product_output{DType::i32, {4, 4}, {}};
  const auto refusal_of = [&](std::string_view backend, const KernelRequest& request,
                              const TensorInfo& output) {
    return find_backend(backend)->create_kernel(request, std::span(&output, 1)).refusal.kind;
  };
  EXPECT_EQ(refusal_of("blas", product, product_output), where_built("blas", RefusalKind::unsupported_dtype));
  EXPECT_EQ(refusal_of("onednn", product, product_output),
            where_built("onednn", RefusalKind::unsupported_dtype));

  KernelRequest fused = product;
  fused.op.inputs = {TensorInfo{DType::f32, {4, 4}, {}}, TensorInfo{DType::f32, {4, 4}, {}}};
  PostOp relu;
  relu.kind = PostOp::Kind::relu;
  fused.post_ops = {relu};
  const TensorInfo fused_output{DType::f32, {4, 4}, {}};
  EXPECT_EQ(refusal_of("blas", fused, fused_output), where_built("blas", RefusalKind::unsupported_fusion));
  EXPECT_EQ(refusal_of("native", fused, fused_output), RefusalKind::unsupported_fusion);

  KernelRequest relu_request;
  relu_request.op.op_type = "Relu";
  relu_request.op.attributes = &none;
  relu_request.op.inputs = {TensorInfo{DType::f32, {4, 4}, {}}};
  relu_request.alternative = 1;
  EXPECT_EQ(refusal_of("onednn", relu_request, fused_output),
            where_built("onednn", RefusalKind::no_alternative));

  KernelRequest reorder = reorder_request({1, 4, 2, 2}, DType::f32, Layout::plain, Layout::nhwc);
  reorder.output_layouts.clear();
  const TensorInfo reordered{DType::f32, {1, 4, 2, 2}, {}};
  EXPECT_EQ(refusal_of("native", reorder, reordered), RefusalKind::unsupported_layout);
}

// A Softmax over a middle axis: oneDNN 2.6 has only its reference implementation for it on the CPUs
// kiln was measured on, and kiln refuses that rather than run it (native's kernel is faster).
TEST(RefusalKinds, OnednnReferenceImplementationIsRefusedAsTheLibrarys) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  GraphBuilder b({2, 5, 7});
  Attributes middle;
  middle.set_int("axis", 1);
  const std::string softmax = b.add("Softmax", {"x"}, middle);
  const StepRecord step = planned_step(b.finish({softmax}), {2, 5, 7}, current_settings(), softmax);
  if (step.kernel.starts_with("onednn:")) {
    GTEST_SKIP() << "oneDNN runs a middle-axis Softmax with " << step.kernel << " on this CPU";
  }
  EXPECT_EQ(kind_of(step.decision.refusals, "onednn"), RefusalKind::library_refused);
}

// Autotune's losers are refused as slower, and a second plan of the node (another session of the
// same model) takes the decision from the choice cache without timing: same refusals, same timings.
TEST(RefusalKinds, AutotuneLosersAndTheDecisionAnotherPlanReuses) {
  GraphBuilder g({1, 16, 12, 12});
  const std::string conv =
      g.add("Conv", {"x", g.weights({16, 16, 3, 3})}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
  const Model model = g.finish({conv});
  Settings settings = current_settings();
  settings.set_by_name("autotune", 1).set_by_name("autotune_limit", 0);
  choice_cache().clear();
  const StepRecord first = planned_step(model, {1, 16, 12, 12}, settings, conv);
  EXPECT_EQ(first.decision.rule, DecisionRule::autotune);
  EXPECT_FALSE(first.decision.reused);
  ASSERT_GE(first.decision.timed.size(), 2u);  // native's kernel and at least one more
  bool slower = false;
  for (const Refusal& refusal : first.decision.refusals)
    slower = slower || refusal.kind == RefusalKind::autotune_slower;
  EXPECT_TRUE(slower);
  const size_t cached = choice_cache().size();

  const StepRecord again = planned_step(model, {1, 16, 12, 12}, settings, conv);
  EXPECT_TRUE(again.decision.reused);
  EXPECT_EQ(choice_cache().size(), cached);
  EXPECT_EQ(again.kernel, first.kernel);
  EXPECT_EQ(again.decision.refusals, first.decision.refusals);
  ASSERT_EQ(again.decision.timed.size(), first.decision.timed.size());
  for (size_t i = 0; i < first.decision.timed.size(); ++i) {
    EXPECT_EQ(again.decision.timed[i].kernel, first.decision.timed[i].kernel);
    EXPECT_EQ(again.decision.timed[i].milliseconds, first.decision.timed[i].milliseconds);
  }
  choice_cache().clear();
}

// oneDNN 2.6's implementation iterator can return cached copies of its first implementation once
// primitives exist for earlier positions (autotune creates each alternative's): every
// implementation is offered once, in the same order however full the primitive cache is.
TEST(RefusalKinds, AutotuneOffersEachOnednnImplementationOnce) {
  if (!backends::info("onednn").built) GTEST_SKIP() << "oneDNN is not built";
  GraphBuilder g({1, 16, 12, 12});
  const std::string conv =
      g.add("Conv", {"x", g.weights({16, 16, 3, 3})}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
  const Model model = g.finish({conv});
  Settings settings = current_settings();
  settings.set_by_name("autotune", 1).set_by_name("autotune_limit", 0);
  const auto onednn_implementations = [&] {
    choice_cache().clear();
    std::vector<std::string> names;
    for (const TimedCandidate& timed : planned_step(model, {1, 16, 12, 12}, settings, conv).decision.timed) {
      if (timed.kernel.starts_with("onednn:")) names.push_back(timed.kernel.substr(0, timed.kernel.find('#')));
    }
    return names;
  };
  const std::vector<std::string> first = onednn_implementations();
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(std::set<std::string>(first.begin(), first.end()).size(), first.size());
  EXPECT_EQ(onednn_implementations(), first);  // with every alternative's primitive now cached
  choice_cache().clear();
}

}  // namespace
}  // namespace kiln
