// The backend registry as selection, the fusion pass and planning read it: candidate order, the
// deterministic rules, what is fused, Reorders as selected kernels, and a backend left out at
// configure time.
#include "backends/registry.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "backend_test_util.h"
#include "backends/not_built.h"
#include "backends/selection.h"
#include "graph/plan.h"
#include "graph_builder.h"

namespace kiln {
namespace {

using testing::conv_attrs;
using testing::GraphBuilder;

constexpr int kOnednn = backend_position("onednn");
constexpr int kBlas = backend_position("blas");
constexpr int kNative = backend_position("native");
constexpr int kWinograd = backend_position("winograd");

KernelRequest request_for(const std::string& op_type, std::vector<TensorInfo> inputs,
                          std::string domain = {}) {
  KernelRequest request;
  request.op.op_type = op_type;
  request.op.domain = std::move(domain);
  request.op.inputs = std::move(inputs);
  return request;
}

TensorInfo f32(Shape shape) {
  return TensorInfo{DType::f32, std::move(shape), {}};
}

TEST(Registry, EveryRowNamesItsBackendAndNativeComesLast) {
  ASSERT_EQ(all_backends().size(), kBackendRows.size());
  for (size_t i = 0; i < kBackendRows.size(); ++i) {
    EXPECT_EQ(all_backends()[i]->name(), kBackendRows[i].name);
    EXPECT_EQ(kBackendNames[i], kBackendRows[i].name);
    EXPECT_EQ(backend_index(kBackendRows[i].name), static_cast<int>(i));
  }
  EXPECT_EQ(kNative, kBackendCount - 1);
  EXPECT_FALSE(all_backends()[kNative]->can_be_disabled());
  EXPECT_EQ(build_option("onednn"), "KILN_WITH_ONEDNN");
}

TEST(Registry, CandidatesFollowRanksAndTheOpsARowLists) {
  // BLAS lists the ONNX-domain products and has the lowest rank; the others take every op.
  EXPECT_EQ(candidate_backends(request_for("MatMul", {f32({2, 3}), f32({3, 4})})),
            (std::vector<int>{kBlas, kOnednn, kNative}));
  EXPECT_EQ(candidate_backends(request_for("Gemm", {f32({2, 3}), f32({3, 4})})),
            (std::vector<int>{kBlas, kOnednn, kNative}));
  // Winograd lists Conv and is asked first (it refuses what it cannot run or, under auto, must
  // outrun the next candidate).
  EXPECT_EQ(candidate_backends(request_for("Conv", {f32({1, 3, 8, 8})})),
            (std::vector<int>{kWinograd, kOnednn, kNative}));
  EXPECT_EQ(candidate_backends(request_for("MatMul", {f32({2, 3}), f32({3, 4})}, "com.example")),
            (std::vector<int>{kOnednn, kNative}));
}

TEST(Registry, DeterministicRefusalsComeFromTheRows) {
  Settings settings = current_settings();
  settings.set(SettingKey("deterministic"), 1);
  Attributes none;
  KernelRequest product = request_for("MatMul", {f32({2, 3}), f32({3, 4})});
  product.op.attributes = &none;
  const TensorInfo product_output = f32({2, 4});
  const KernelSelection selection = find_kernel(product, std::span(&product_output, 1), settings);
  ASSERT_NE(selection.kernel, nullptr);
  EXPECT_EQ(selection.decision.backend, kNative);
  ASSERT_EQ(selection.decision.refusals.size(), 2u);
  EXPECT_EQ(selection.decision.refusals[0].backend, "blas");
  // Both offer a kernel for this product where they are built; deterministic mode refuses it.
  EXPECT_EQ(selection.decision.refusals[0].detail,
            backends::info("blas").built ? "deterministic mode: BLAS splits products by thread count"
                                         : "not built (kiln was configured with KILN_WITH_BLAS=OFF)");
  EXPECT_EQ(selection.decision.refusals[1].backend, "onednn");
  EXPECT_EQ(selection.decision.refusals[1].detail,
            backends::info("onednn").built
                ? "deterministic mode: oneDNN's MatMul may sum in another order on another thread count"
                : "not built (kiln was configured with KILN_WITH_ONEDNN=OFF)");

  // A backend with no kernel for the node gives its own reason, not deterministic mode's.
  KernelRequest transpose = request_for("Transpose", {f32({2, 3})});
  transpose.op.attributes = &none;
  const TensorInfo transposed = f32({3, 2});
  const KernelSelection moved = find_kernel(transpose, std::span(&transposed, 1), settings);
  ASSERT_EQ(moved.decision.refusals.size(), 1u);
  EXPECT_EQ(moved.decision.refusals[0].detail,
            backends::info("onednn").built ? "no oneDNN kernel for Transpose"
                                           : "not built (kiln was configured with KILN_WITH_ONEDNN=OFF)");

  // An exact op stays on oneDNN where it is built; with a post-op it would not be exact.
  KernelRequest relu = request_for("Relu", {f32({1, 8, 4, 4})});
  relu.op.attributes = &none;
  const TensorInfo relu_output = f32({1, 8, 4, 4});
  const KernelSelection exact = find_kernel(relu, std::span(&relu_output, 1), settings);
  ASSERT_NE(exact.kernel, nullptr);
  EXPECT_EQ(exact.decision.backend, backends::info("onednn").built ? kOnednn : kNative);
}

TEST(Registry, FusionIsOfferedByEnabledBackendsOnly) {
  Settings settings = current_settings();
  const FusionRule conv = fusion_offered("Conv", settings);
  const bool onednn = backends::info("onednn").built;
  const bool winograd = backends::info("winograd").built;
  EXPECT_EQ(has_post_op_kind(conv.post_ops, PostOp::Kind::relu), onednn || winograd);
  EXPECT_EQ(has_post_op_kind(conv.post_ops, PostOp::Kind::sum), onednn || winograd);
  EXPECT_EQ(has_post_op_kind(conv.post_ops, PostOp::Kind::sigmoid), onednn);
  EXPECT_FALSE(has_post_op_kind(conv.post_ops, PostOp::Kind::bias));  // a Conv has its own bias input
  EXPECT_EQ(conv.folds_batch_norm, onednn || winograd);
  EXPECT_EQ(has_post_op_kind(fusion_offered("MatMul", settings).post_ops, PostOp::Kind::bias), onednn);
  EXPECT_EQ(fusion_offered("Relu", settings).post_ops, 0u);
  // Without oneDNN, Winograd's output transform still takes activations and a residual sum.
  settings.set(BackendSettingKey("enabled"), kOnednn, 0);
  const FusionRule without_onednn = fusion_offered("Conv", settings);
  EXPECT_TRUE(has_post_op_kind(without_onednn.post_ops, PostOp::Kind::relu));
  EXPECT_TRUE(has_post_op_kind(without_onednn.post_ops, PostOp::Kind::sum));
  EXPECT_FALSE(has_post_op_kind(without_onednn.post_ops, PostOp::Kind::sigmoid));
  settings.set(BackendSettingKey("enabled"), kWinograd, 0);
  EXPECT_EQ(fusion_offered("Conv", settings).post_ops, 0u);
  EXPECT_FALSE(fusion_offered("Conv", settings).folds_batch_norm);
}

TEST(Registry, ReordersAreKernelsSelectedLikeAnyOther) {
  const Settings settings = current_settings();
  const KernelSelection to_nhwc =
      select_reorder({1, 8, 4, 4}, DType::f32, Layout::plain, Layout::nhwc, settings);
  const KernelSelection of_int =
      select_reorder({1, 8, 4, 4}, DType::i64, Layout::plain, Layout::nhwc, settings);
  EXPECT_EQ(of_int.kernel, nullptr);
  EXPECT_NE(of_int.decision.refusals_text().find(
                "native: native converts float32, int32, uint8 and int8 values between plain and nhwc only"),
            std::string::npos)
      << of_int.decision.refusals_text();
  if (!backends::info("onednn").built) {
    // The native conversion takes it: channels-last kernels (Winograd's) still plan without oneDNN.
    ASSERT_NE(to_nhwc.kernel, nullptr);
    EXPECT_EQ(to_nhwc.decision.backend, kNative);
    EXPECT_NE(to_nhwc.decision.refusals_text().find("onednn: not built"), std::string::npos)
        << to_nhwc.decision.refusals_text();
    return;
  }
  ASSERT_NE(to_nhwc.kernel, nullptr);
  EXPECT_EQ(to_nhwc.decision.backend, kOnednn);
  EXPECT_EQ(to_nhwc.kernel->input_layout(0), Layout::plain);
  EXPECT_EQ(to_nhwc.kernel->output_layout(0), Layout::nhwc);
  EXPECT_NE(of_int.decision.refusals_text().find(
                "onednn: layouts convert float32, int32, uint8 and int8 values only"),
            std::string::npos)
      << of_int.decision.refusals_text();
}

// Quantized activations stored channels-last convert like float32 ones, byte for byte, on every backend
// that converts layouts.
TEST(Registry, IntegerValuesConvertBetweenLayouts) {
  const Shape shape = {2, 5, 3, 4};
  std::vector<int8_t> values;
  for (int i = 0; i < 120; ++i) values.push_back(static_cast<int8_t>(i * 37 % 256 - 128));
  const Tensor plain = Tensor::from_vector(values, shape);
  for (int backend : {kOnednn, kNative}) {
    Settings settings = current_settings();
    if (backend == kNative) settings.set(BackendSettingKey("enabled"), kOnednn, 0);
    const KernelSelection to_nhwc = select_reorder(shape, DType::i8, Layout::plain, Layout::nhwc, settings);
    const KernelSelection back = select_reorder(shape, DType::i8, Layout::nhwc, Layout::plain, settings);
    if (backend == kOnednn && !backends::info("onednn").built) continue;
    ASSERT_NE(to_nhwc.kernel, nullptr) << to_nhwc.decision.refusals_text();
    ASSERT_NE(back.kernel, nullptr) << back.decision.refusals_text();
    EXPECT_EQ(to_nhwc.decision.backend, backend);
    std::vector<Tensor> channels_last = {Tensor::empty(DType::i8, stored_shape(shape, Layout::nhwc))};
    to_nhwc.kernel->run(std::span<const Tensor>(&plain, 1), channels_last);
    // Element (n, c, p) of the plain value sits at (n, p, c).
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 5; ++c)
        for (int64_t p = 0; p < 12; ++p)
          ASSERT_EQ(channels_last[0].data<int8_t>()[(n * 12 + p) * 5 + c],
                    values[static_cast<size_t>((n * 5 + c) * 12 + p)]);
    std::vector<Tensor> round_trip = {Tensor::empty(DType::i8, shape)};
    back.kernel->run(channels_last, round_trip);
    EXPECT_EQ(std::vector<int8_t>(round_trip[0].data<int8_t>(), round_trip[0].data<int8_t>() + 120), values);
  }
}

TEST(Registry, ABackendLeftOutRefusesEveryNodeAndSaysSo) {
  const NotBuiltBackend left_out("acme");
  EXPECT_EQ(left_out.name(), "acme");
  EXPECT_FALSE(left_out.is_built());
  EXPECT_FALSE(left_out.is_available());
  const TensorInfo output = f32({1});
  EXPECT_EQ(left_out.create_kernel(request_for("Relu", {f32({1})}), std::span(&output, 1)).kernel, nullptr);
  for (const Backend* backend : all_backends()) {
    const backends::BackendInfo info = backends::info(backend->name());
    EXPECT_EQ(info.built, backend->is_built());
    if (!info.built) {
      EXPECT_FALSE(info.available) << info.name;
    }
  }
}

// With deterministic mode no backend applies post-ops: the fused form of Conv + Relu is refused by
// every candidate, and only then is the Conv planned alone, the Relu as its own step.
TEST(Planning, AFusedFormNoBackendTakesIsPlannedUnfused) {
  GraphBuilder g({1, 4, 8, 8});
  const std::string conv =
      g.add("Conv", {"x", g.weights({8, 4, 3, 3}), g.weights({8})}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
  const Model model = g.finish({g.add("Relu", {conv})});
  Settings deterministic = current_settings();
  deterministic.set(SettingKey("deterministic"), 1);
  const auto unfused = Plan::build(model, {{1, 4, 8, 8}}, {}, deterministic);
  ASSERT_EQ(unfused->steps().size(), 2u);
  EXPECT_EQ(unfused->steps()[0].record.op_type, "Conv");
  EXPECT_EQ(unfused->steps()[1].record.op_type, "Relu");
  EXPECT_EQ(unfused->fused_nodes(), 0);

  KILN_SKIP_UNLESS_BUILT("onednn");
  const auto fused = Plan::build(model, {{1, 4, 8, 8}}, {}, current_settings());
  EXPECT_EQ(fused->fused_nodes(), 1);
  int convs = 0;
  for (const PlanStep& step : fused->steps()) {
    EXPECT_NE(step.record.op_type, "Relu");
    convs += step.record.op_type == "Conv";
  }
  EXPECT_EQ(convs, 1);
}

}  // namespace
}  // namespace kiln
