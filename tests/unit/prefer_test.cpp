// Positive backend choice: the prefer_* settings reorder and filter each op family's candidates,
// name what they leave out, and may leave out the native fallback; preferred_linalg_library and
// the blas_threshold setting.
#include "backends/prefer.h"

#include <gtest/gtest.h>

#include "backend_test_util.h"
#include "backends/backends.h"
#include "backends/selection.h"
#include "core/error.h"
#include "graph/plan.h"
#include "graph_builder.h"
#include "ops/attention.h"
#include "runtime/cpu_info.h"

namespace kiln {
namespace {

using testing::conv_attrs;
using testing::GraphBuilder;

constexpr int kOnednn = backend_position("onednn");
constexpr int kBlas = backend_position("blas");
constexpr int kNative = backend_position("native");

KernelRequest request_for(const std::string& op_type, std::vector<TensorInfo> inputs = {}) {
  KernelRequest request;
  request.op.op_type = op_type;
  request.op.inputs = std::move(inputs);
  return request;
}

TensorInfo f32(Shape shape) {
  return TensorInfo{DType::f32, std::move(shape), {}};
}

// (backend, variant, refused?) per candidate, as text: "blas", "flash (native)", "onednn refused".
std::vector<std::string> described(const std::vector<Candidate>& list) {
  std::vector<std::string> text;
  for (const Candidate& candidate : list) {
    Refusal who;
    who.backend = std::string(kBackendRows[candidate.backend].name);
    who.variant = std::string(candidate.variant);
    text.push_back(who.label() + (candidate.refusal ? " refused" : ""));
  }
  return text;
}

Settings with_prefer(std::initializer_list<std::string_view> names,
                     std::initializer_list<std::string_view> families = {}) {
  Settings settings = current_settings();
  settings.overlay(backends::prefer_setting(std::span(names.begin(), names.size()),
                                            std::span(families.begin(), families.size())));
  return settings;
}

TEST(Prefer, OpsBelongToFamiliesAndReorderToNone) {
  EXPECT_EQ(backends::op_families(),
            (std::vector<std::string>{"conv", "matmul", "attention", "quantized", "other"}));
  EXPECT_EQ(op_family("Conv"), 0);
  EXPECT_EQ(op_family("MatMul"), 1);
  EXPECT_EQ(op_family("Gemm"), 1);
  EXPECT_EQ(op_family("Einsum"), 1);
  EXPECT_EQ(op_family(kAttentionOp), 2);
  EXPECT_EQ(op_family("QLinearConv"), 3);
  EXPECT_EQ(op_family("DequantizeLinear"), 3);
  EXPECT_EQ(op_family("Relu"), 4);
  EXPECT_EQ(op_family("Reorder"), -1);
}

TEST(Prefer, WithoutAPreferenceCandidatesKeepTheRegistryOrder) {
  const Settings settings = current_settings();
  EXPECT_EQ(described(candidates(request_for("MatMul"), settings)),
            (std::vector<std::string>{"blas", "onednn", "native"}));
  EXPECT_EQ(described(candidates(request_for(std::string(kAttentionOp)), settings)),
            (std::vector<std::string>{"onednn", "flash (native)", "math (native)"}));
}

TEST(Prefer, ReordersAndFiltersTheFamilysCandidates) {
  const Settings settings = with_prefer({"native", "blas"}, {"matmul"});
  EXPECT_EQ(described(candidates(request_for("MatMul"), settings)),
            (std::vector<std::string>{"native", "blas", "onednn refused"}));
  EXPECT_EQ(described(candidates(request_for("Gemm"), settings)),
            (std::vector<std::string>{"native", "blas", "onednn refused"}));
  // Other families are untouched.
  EXPECT_EQ(described(candidates(request_for("Conv"), settings)),
            (std::vector<std::string>{"winograd", "onednn", "native"}));
  const std::vector<Candidate> list = candidates(request_for("MatMul"), settings);
  ASSERT_TRUE(list.back().refusal.has_value());
  EXPECT_EQ(list.back().refusal->kind, RefusalKind::not_preferred);
  EXPECT_EQ(list.back().refusal->detail, "not in prefer_matmul (native,blas)");
}

TEST(Prefer, TheUnitOfChoiceIsABackendOrANamedKernel) {
  const std::string attention(kAttentionOp);
  // A backend brings every kernel of it, in the sdpa_kernels order.
  EXPECT_EQ(described(candidates(request_for(attention), with_prefer({"native"}, {"attention"}))),
            (std::vector<std::string>{"flash (native)", "math (native)", "onednn refused"}));
  // A named kernel brings only itself.
  EXPECT_EQ(described(candidates(request_for(attention), with_prefer({"math", "onednn"}, {"attention"}))),
            (std::vector<std::string>{"math (native)", "onednn", "flash (native) refused"}));
  // A named kernel of another op family means nothing to a Conv.
  EXPECT_EQ(described(candidates(request_for("Conv"), with_prefer({"flash", "native"}))),
            (std::vector<std::string>{"native", "winograd refused", "onednn refused"}));
}

TEST(Prefer, ANodeNoListedCandidateTakesIsAnErrorListingEveryReason) {
  const TensorInfo output = f32({1, 8, 6, 6});
  KernelRequest conv = request_for("Conv", {f32({1, 3, 8, 8}), f32({8, 3, 3, 3})});
  try {
    select_kernel(conv, std::span(&output, 1), with_prefer({"blas"}, {"conv"}));
    FAIL() << "a Conv with only BLAS preferred was planned";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("onednn: not in prefer_conv (blas)"), std::string::npos) << message;
    EXPECT_NE(message.find("native: not in prefer_conv (blas)"), std::string::npos) << message;
    EXPECT_NE(message.find("blas: has no kernels for Conv"), std::string::npos) << message;
  }
}

TEST(Prefer, LeavingNativeOutPlansWithTheListedBackendOnlyOrFails) {
  GraphBuilder g({4, 64});
  const Model model = g.finish({g.add("Relu", {g.add("MatMul", {"x", g.weights({64, 32})})})});
  const auto native = Plan::build(model, {{4, 64}}, {}, with_prefer({"native"}, {"matmul"}));
  ASSERT_EQ(native->steps().size(), 2u);
  EXPECT_EQ(native->steps()[0].record.backend, "native");
  // MatMul + Relu fuse only where a preferred backend applies post-ops: native does not.
  EXPECT_EQ(native->fused_nodes(), 0);
  EXPECT_EQ(native->steps()[0].record.decision.refusals.size(), 0u);

  const auto blas_first = Plan::build(model, {{4, 64}}, {}, with_prefer({"blas", "native"}, {"matmul"}));
  EXPECT_EQ(blas_first->steps()[0].record.backend, backends::info("blas").built ? "blas" : "native");

  if (!backends::info("onednn").built) return;
  // Only oneDNN for everything: no native step at all, and an op oneDNN has no kernel for fails.
  const auto onednn = Plan::build(model, {{4, 64}}, {}, with_prefer({"onednn"}));
  for (const PlanStep& step : onednn->steps())
    EXPECT_EQ(step.record.backend, "onednn") << step.record.op_type;
  GraphBuilder t({4, 64});
  const Model transpose = t.finish({t.add("Transpose", {"x"})});
  try {
    Plan::build(transpose, {{4, 64}}, {}, with_prefer({"onednn"}));
    FAIL() << "a Transpose was planned with only oneDNN preferred";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("native: not in prefer_other (onednn)"), std::string::npos)
        << error.what();
  }
}

// oneDNN leaves a node to one of native's kernels by its own rule (grouped 3x3 convolutions of four
// and eight channels per group) only while native may take it: with oneDNN alone preferred it keeps
// the node.
TEST(Prefer, ANodeLeftToNativeStaysOnOnednnWhenNativeIsLeftOut) {
  if (!backends::info("onednn").built) return;
  for (int64_t group_width : {4, 8}) {
    SCOPED_TRACE(str_cat(group_width, " channels per group"));
    GraphBuilder g({1, 16, 8, 8});
    const std::string first = g.add(
        "Relu", {g.add("Conv", {"x", g.weights({16, 16, 1, 1})}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}))});
    const std::string grouped =
        g.add("Relu", {g.add("Conv", {first, g.weights({16, group_width, 3, 3}), g.weights({16})},
                             conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, 16 / group_width))});
    const Model model = g.finish({grouped});
    const auto grouped_step = [](const Plan& plan) -> const StepRecord& {
      for (const PlanStep& step : plan.steps()) {
        if (step.record.node_name == "Conv2") return step.record;
      }
      throw std::runtime_error("no step for Conv2");
    };
    const auto defaults = Plan::build(model, {{1, 16, 8, 8}}, {}, current_settings());
    const StepRecord& chosen = grouped_step(*defaults);
    ASSERT_EQ(chosen.fused.size(), 1u);  // the Relu, whichever backend runs the convolution
    if (isa_in_effect() >= Isa::avx512) {
      EXPECT_EQ(chosen.kernel, str_cat("native:conv_grouped", group_width, "_3x3_nhwc:avx512"));
      bool onednn_left_it = false;
      for (const Refusal& refusal : chosen.decision.refusals) {
        onednn_left_it =
            onednn_left_it ||
            (refusal.backend == "onednn" && refusal.kind == RefusalKind::predicted_slower &&
             refusal.detail.find(str_cat("with ", group_width, " channels per group")) != std::string::npos);
      }
      EXPECT_TRUE(onednn_left_it);
    } else {
      EXPECT_EQ(chosen.backend, "onednn");  // the documented fallback below the AVX-512 tier
    }
    const auto onednn_only = Plan::build(model, {{1, 16, 8, 8}}, {}, with_prefer({"onednn"}, {"conv"}));
    EXPECT_EQ(grouped_step(*onednn_only).backend, "onednn");
  }
}

// The listed order comes before fusion: a fused form is kept only where a backend listed no later
// than the one taking the node alone runs it.
TEST(Prefer, TheOrderComesBeforeFusion) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  GraphBuilder g({4, 64});
  const Model model = g.finish({g.add("Relu", {g.add("MatMul", {"x", g.weights({64, 32})})})});
  const auto native_first = Plan::build(model, {{4, 64}}, {}, with_prefer({"native", "onednn"}, {"matmul"}));
  ASSERT_EQ(native_first->steps().size(), 2u);
  EXPECT_EQ(native_first->steps()[0].record.backend, "native");
  const auto onednn_first = Plan::build(model, {{4, 64}}, {}, with_prefer({"onednn", "native"}, {"matmul"}));
  ASSERT_EQ(onednn_first->steps().size(), 1u);
  EXPECT_EQ(onednn_first->steps()[0].record.backend, "onednn");
  EXPECT_EQ(onednn_first->fused_nodes(), 1);
}

TEST(Prefer, GuardsRestoreAndErrorsNameTheCulprit) {
  EXPECT_TRUE(backends::preferred("matmul").empty());
  {
    const backends::ScopedPrefer guard({"native", "onednn"}, {"matmul", "conv"});
    EXPECT_EQ(backends::preferred("matmul"), (std::vector<std::string>{"native", "onednn"}));
    EXPECT_EQ(backends::preferred("conv"), (std::vector<std::string>{"native", "onednn"}));
    EXPECT_TRUE(backends::preferred("other").empty());
    {
      const backends::ScopedPrefer every({"native"});
      EXPECT_EQ(backends::preferred("other"), (std::vector<std::string>{"native"}));
      EXPECT_EQ(backends::preferred("matmul"), (std::vector<std::string>{"native"}));
    }
    EXPECT_EQ(backends::preferred("matmul"), (std::vector<std::string>{"native", "onednn"}));
  }
  EXPECT_TRUE(backends::preferred("matmul").empty());
  const auto message = [](auto call) {
    try {
      call();
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { backends::ScopedPrefer guard({"mkl"}); }).find("unknown backend or kernel 'mkl'"),
            std::string::npos);
  EXPECT_NE(message([] {
              backends::ScopedPrefer guard({"native", "native"});
            }).find("'native' is listed twice"),
            std::string::npos);
  EXPECT_NE(message([] {
              backends::ScopedPrefer guard({"native"}, {"pooling"});
            }).find("unknown op family 'pooling' (known: conv, matmul, attention, quantized, other)"),
            std::string::npos);
  EXPECT_NE(message([] { backends::preferred("pooling"); }).find("unknown op family"), std::string::npos);
}

TEST(Prefer, PreferredLinalgLibraryPutsOneBackendFirstForProducts) {
  EXPECT_EQ(backends::preferred_linalg_library(), "default");
  backends::set_preferred_linalg_library("native");
  EXPECT_EQ(backends::preferred_linalg_library(), "native");
  EXPECT_EQ(backends::preferred("matmul"), (std::vector<std::string>{"native", "blas", "onednn"}));
  EXPECT_TRUE(backends::preferred("conv").empty());
  EXPECT_EQ(described(candidates(request_for("MatMul"), current_settings())),
            (std::vector<std::string>{"native", "blas", "onednn"}));
  backends::set_preferred_linalg_library("default");
  EXPECT_EQ(backends::preferred_linalg_library(), "default");
  EXPECT_TRUE(backends::preferred("matmul").empty());
  EXPECT_THROW(backends::set_preferred_linalg_library("cusolver"), Error);
}

TEST(Prefer, TheBlasThresholdIsASetting) {
  KILN_SKIP_UNLESS_BUILT("blas");
  GraphBuilder g({64, 64});
  const Model model = g.finish({g.add("MatMul", {"x", g.weights({64, 64})})});
  Settings settings = with_prefer({"blas", "native"}, {"matmul"});
  // 64 x 64 x 64 = 262144 multiply-adds: above the default.
  const auto by_default = Plan::build(model, {{64, 64}}, {}, settings);
  EXPECT_EQ(by_default->steps()[0].record.backend, "native");
  ASSERT_FALSE(by_default->steps()[0].record.decision.refusals.empty());
  EXPECT_EQ(by_default->steps()[0].record.decision.refusals[0].kind, RefusalKind::above_threshold);
  EXPECT_EQ(by_default->steps()[0].record.decision.refusals[0].detail,
            "M x N x K = 64 x 64 x 64 is above blas_threshold 32768 (oneDNN is faster on larger products)");
  settings.set(SettingKey("blas_threshold"), 64 * 64 * 64);
  EXPECT_EQ(Plan::build(model, {{64, 64}}, {}, settings)->steps()[0].record.backend, "blas");
  settings.set(SettingKey("blas_threshold"), 0);
  EXPECT_EQ(Plan::build(model, {{64, 64}}, {}, settings)->steps()[0].record.backend, "native");
  EXPECT_THROW(settings.set(SettingKey("blas_threshold"), -1), Error);
}

TEST(Prefer, FusionFollowsThePreference) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  EXPECT_NE(fusion_offered("MatMul", current_settings()).post_ops, 0u);
  EXPECT_EQ(fusion_offered("MatMul", with_prefer({"native", "blas"}, {"matmul"})).post_ops, 0u);
  EXPECT_NE(fusion_offered("MatMul", with_prefer({"native", "onednn"}, {"matmul"})).post_ops, 0u);
  EXPECT_NE(fusion_offered("Conv", with_prefer({"native"}, {"matmul"})).post_ops, 0u);
  EXPECT_TRUE(backend_preferred(kOnednn, 0, current_settings()));
  EXPECT_FALSE(backend_preferred(kOnednn, 1, with_prefer({"blas"}, {"matmul"})));
  EXPECT_TRUE(backend_preferred(kBlas, 1, with_prefer({"blas"}, {"matmul"})));
  EXPECT_TRUE(backend_preferred(kNative, 2, with_prefer({"flash"}, {"attention"})));
}

}  // namespace
}  // namespace kiln
