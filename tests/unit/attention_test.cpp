// Scaled dot-product attention: each kernel (native math and flash, oneDNN, bf16 where the CPU has
// it) against the plain-loop reference in double, on a fixed sample of shapes and masks (the full
// grid is tests/python/test_attention.py's slow tier); the sdpa_kernels setting's selection, its
// guards and reasons; and the planner's fusion of the nodes torch 1.13 exports for attention.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backends/backends.h"
#include "backends/native/bf16_gemm.h"
#include "backends/native/ref/reference.h"
#include "backends/sdpa.h"
#include "backends/selection.h"
#include "core/error.h"
#include "graph/session.h"
#include "graph_builder.h"
#include "op_test_util.h"
#include "runtime/cpu_info.h"
#include "runtime/threads.h"
#include "settings_test_util.h"

namespace kiln {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;
using testing::ScopedGlobalSettings;

enum class MaskCase { none, additive_shared, additive_full, boolean_keys, causal };

struct Case {
  Shape leading;
  int64_t l, s, e, ev;
  MaskCase mask;
};

std::string case_name(const Case& c) {
  const char* masks[] = {"none", "additive[L,S]", "additive[full]", "bool[...,1,S]", "causal"};
  std::string name = "[";
  for (int64_t d : c.leading) name += std::to_string(d) + ",";
  return name + "] L" + std::to_string(c.l) + " S" + std::to_string(c.s) + " E" + std::to_string(c.e) +
         " Ev" + std::to_string(c.ev) + " mask " + masks[static_cast<int>(c.mask)];
}

Shape with_last(const Shape& leading, int64_t a, int64_t b) {
  Shape shape = leading;
  shape.push_back(a);
  shape.push_back(b);
  return shape;
}

// The default tier's sample: head dims 32/64/128, every mask, several batch x heads, L up to 256,
// edges (one query, one key, lengths that are no multiple of any block).
std::vector<Case> sample_cases() {
  return {
      {{1}, 1, 1, 32, 32, MaskCase::none},
      {{4}, 128, 128, 64, 64, MaskCase::none},
      {{2, 3}, 77, 77, 32, 32, MaskCase::causal},
      {{2, 3}, 100, 130, 64, 48, MaskCase::additive_shared},
      {{2, 2}, 64, 200, 128, 128, MaskCase::additive_full},
      {{3, 2}, 61, 61, 64, 64, MaskCase::boolean_keys},
      {{1}, 256, 256, 128, 128, MaskCase::causal},
      {{2}, 5, 300, 32, 32, MaskCase::boolean_keys},
      {{1, 1}, 256, 256, 32, 32, MaskCase::additive_shared},
  };
}

struct Inputs {
  Tensor q, k, v, mask;
  bool causal = false;
};

Inputs make_inputs(const Case& c, uint32_t seed) {
  Inputs in;
  in.q = random_tensor(with_last(c.leading, c.l, c.e), seed, -2, 2);
  in.k = random_tensor(with_last(c.leading, c.s, c.e), seed + 1, -2, 2);
  in.v = random_tensor(with_last(c.leading, c.s, c.ev), seed + 2, -1, 1);
  switch (c.mask) {
    case MaskCase::none:
      break;
    case MaskCase::additive_shared:
      in.mask = random_tensor({c.l, c.s}, seed + 3, -3, 0);
      break;
    case MaskCase::additive_full:
      in.mask = random_tensor(with_last(c.leading, c.l, c.s), seed + 3, -3, 0);
      break;
    case MaskCase::boolean_keys: {
      // Key padding: per batch entry the last keys are padding; the first always takes part.
      Shape shape = c.leading;
      shape.back() = 1;
      shape.push_back(1);
      shape.push_back(c.s);
      in.mask = Tensor::empty(DType::boolean, shape);
      uint8_t* keep = static_cast<uint8_t*>(in.mask.raw_data());
      const int64_t entries = checked_numel(shape) / c.s;
      for (int64_t n = 0; n < entries; ++n) {
        for (int64_t j = 0; j < c.s; ++j) keep[n * c.s + j] = j < c.s - (n + 1) * c.s / (entries + 2) ? 1 : 0;
      }
      break;
    }
    case MaskCase::causal:
      in.causal = true;
      break;
  }
  return in;
}

AttentionParams params_of(const Inputs& in) {
  const Attributes attributes = attention_attributes(
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(in.q.shape().back()))), false, in.causal,
      !in.mask.defined()                  ? AttentionMask::none
      : in.mask.dtype() == DType::boolean ? AttentionMask::keep
                                          : AttentionMask::additive);
  OpSpec spec;
  spec.op_type = std::string(kAttentionOp);
  spec.attributes = &attributes;
  for (const Tensor* t : {&in.q, &in.k, &in.v, &in.mask}) {
    if (t->defined()) spec.inputs.push_back(TensorInfo{t->dtype(), t->shape(), {}});
  }
  return attention_params(spec);
}

Tensor run_kernel(std::string_view kernel, const Inputs& in, std::string* name = nullptr) {
  const backends::sdpa::ScopedKernels only({kernel});
  return backends::sdpa::attention(in.q, in.k, in.v, in.mask, in.causal, std::nullopt, name);
}

// max |got - want| / max |want| over the output.
double relative_error(const Tensor& got, const std::vector<double>& want) {
  double error = 0;
  double scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    error = std::max(error, std::abs(got.data<float>()[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return error / std::max(scale, 1e-30);
}

std::vector<double> values_of(const Tensor& t) {
  return std::vector<double>(t.data<float>(), t.data<float>() + t.numel());
}

// oneDNN is configured out of the native-only build: its kernel then refuses with "not built".
bool onednn_built() {
  return backends::info("onednn").built;
}
std::string onednn_reason(const std::string& built_reason) {
  return onednn_built() ? built_reason : "not built";
}

backends::sdpa::Params small_params() {
  return {.query = {2, 16, 32}, .key = {2, 16, 32}, .value = {2, 16, 32}};
}

TEST(Attention, MathMatchesTheReference) {
  uint32_t seed = 1;
  for (const Case& c : sample_cases()) {
    SCOPED_TRACE(case_name(c));
    const Inputs in = make_inputs(c, seed += 10);
    const native::ref::Values want = native::ref::attention(in.q, in.k, in.v, in.mask, params_of(in));
    EXPECT_LE(relative_error(run_kernel("math", in), want.value), 1e-5);
  }
}

TEST(Attention, FlashAndOnednnMatchMath) {
  uint32_t seed = 2;
  for (const Case& c : sample_cases()) {
    SCOPED_TRACE(case_name(c));
    const Inputs in = make_inputs(c, seed += 10);
    const std::vector<double> math = values_of(run_kernel("math", in));
    EXPECT_LE(relative_error(run_kernel("flash", in), math), 1e-5);
    const std::vector<std::string> refusals = backends::sdpa::why_not(
        "onednn", {.query = in.q.shape(),
                   .key = in.k.shape(),
                   .value = in.v.shape(),
                   .mask = in.mask.defined() ? std::optional(in.mask.shape()) : std::nullopt,
                   .mask_dtype = in.mask.defined() ? in.mask.dtype() : DType::f32,
                   .is_causal = in.causal});
    if (!onednn_built()) {
      ASSERT_EQ(refusals.size(), 1u);
      EXPECT_NE(refusals[0].find("not built"), std::string::npos) << refusals[0];
    } else if (c.mask == MaskCase::causal || c.mask == MaskCase::boolean_keys) {
      // The documented refusals: oneDNN 2.6's matmul has neither.
      ASSERT_EQ(refusals.size(), 1u);
      EXPECT_NE(refusals[0].find(c.mask == MaskCase::causal ? "is_causal" : "boolean masks"),
                std::string::npos)
          << refusals[0];
    } else if (refusals.empty()) {
      EXPECT_LE(relative_error(run_kernel("onednn", in), math), 1e-5);
    } else {
      ADD_FAILURE() << "onednn refused: " << refusals[0];
    }
  }
}

TEST(Attention, OneKeyLengthOf2048) {
  const Case c{{1}, 2048, 2048, 64, 64, MaskCase::none};
  const Inputs in = make_inputs(c, 5);
  const std::vector<double> math = values_of(run_kernel("math", in));
  EXPECT_LE(relative_error(run_kernel("flash", in), math), 1e-5);
  if (onednn_built()) {
    EXPECT_LE(relative_error(run_kernel("onednn", in), math), 1e-5);
  }
}

TEST(Attention, Bf16WhereTheCpuHasItFloat32Elsewhere) {
  for (const Case& c : {Case{{2, 2}, 96, 96, 64, 64, MaskCase::additive_shared},
                        Case{{1, 3}, 300, 300, 32, 32, MaskCase::causal}}) {
    SCOPED_TRACE(case_name(c));
    const Inputs in = make_inputs(c, 6);
    const std::vector<double> math = values_of(run_kernel("math", in));
    const ScopedSettings bf16(
        Settings().set(SettingKey("matmul_precision"), static_cast<int>(Precision::bf16)));
    for (std::string_view kernel : {"flash", "onednn"}) {
      if (kernel == "onednn" && (c.mask == MaskCase::causal || !onednn_built())) continue;  // refused
      std::string name;
      const Tensor out = run_kernel(kernel, in, &name);
      if (isa_in_effect() >= Isa::avx512_bf16) {
        EXPECT_NE(name.find("bf16"), std::string::npos) << name;
        EXPECT_LE(relative_error(out, math), 1e-2) << name;
      } else {
        // No bf16 dot products: float32, as for every product (docs/backends.md, reduced precision).
        EXPECT_EQ(name.find("bf16"), std::string::npos) << name;
        EXPECT_LE(relative_error(out, math), 1e-5) << name;
      }
    }
  }
}

TEST(Bf16Gemm, MatchesTheReferenceWithinBf16Rounding) {
  if (!native::bf16_gemm_available()) GTEST_SKIP() << "the ISA tier in effect has no AVX512_BF16";
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{1, 1, 1}, {9, 33, 7}, {17, 48, 64}, {56, 256, 128}}) {
    SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
    const Tensor a = random_tensor({m, k}, 21);
    const Tensor b = random_tensor({k, n}, 22);
    std::vector<uint32_t> a_pairs(static_cast<size_t>(m * ((k + 1) / 2)));
    std::vector<uint32_t> b_pairs(static_cast<size_t>(native::bf16_pairs_b_size(k, n)));
    native::pack_bf16_pairs_a(m, k, a.data<float>(), k, a_pairs.data());
    native::pack_bf16_pairs_b(false, k, n, b.data<float>(), n, b_pairs.data());
    std::vector<float> c(static_cast<size_t>(m * n), 1.0f);
    native::bf16_gemm(m, n, k, a_pairs.data(), b_pairs.data(), native::bf16_pairs_b_size(2, n), c.data(), n,
                      0.5f, 1.0f);
    std::vector<float> ones(c.size(), 1.0f);
    const native::ref::Values want = native::ref::gemm(false, false, m, n, k, 0.5f, a.data<float>(), k,
                                                       b.data<float>(), n, 1.0f, ones.data(), n);
    for (size_t i = 0; i < c.size(); ++i) {
      // Each operand rounded to 8 bits of mantissa: 2 x 2^-9 of the sum of |terms|, and a little.
      EXPECT_NEAR(c[i], want.value[i], 2.0 / 512 * want.magnitude[i] + 1e-6) << i;
    }
  }
}

TEST(Attention, NativeKernelsGiveTheSameBitsOnAnyThreadCount) {
  const Case c{{2, 3}, 130, 130, 64, 64, MaskCase::additive_shared};
  const Inputs in = make_inputs(c, 7);
  for (std::string_view kernel : {"math", "flash"}) {
    Tensor one, two;
    {
      const ScopedThreads threads(1);
      one = run_kernel(kernel, in);
    }
    {
      const ScopedThreads threads(2);
      two = run_kernel(kernel, in);
    }
    EXPECT_EQ(std::memcmp(one.raw_data(), two.raw_data(), one.numel() * sizeof(float)), 0) << kernel;
  }
}

TEST(Attention, NoKeysGiveZerosAsTheExportedMatMulDoes) {
  Inputs in = make_inputs({{2}, 3, 1, 32, 16, MaskCase::none}, 10);
  in.k = Tensor::zeros(DType::f32, {2, 0, 32});
  in.v = Tensor::zeros(DType::f32, {2, 0, 16});
  for (std::string_view kernel : {"math", "flash"}) {
    const Tensor out = run_kernel(kernel, in);
    ASSERT_EQ(out.shape(), (Shape{2, 3, 16}));
    for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out.data<float>()[i], 0.0f) << kernel;
  }
}

TEST(Attention, TheCallApiWorksWithAutotuneOn) {
  const ScopedSettings autotune(Settings().set(SettingKey("autotune"), 1));
  const Inputs in = make_inputs({{2}, 16, 16, 32, 32, MaskCase::none}, 11);
  EXPECT_EQ(backends::sdpa::why_not("flash", small_params()), std::vector<std::string>{});
  std::string name;
  backends::sdpa::attention(in.q, in.k, in.v, {}, false, std::nullopt, &name);
  // The list's first that takes it, not timed.
  EXPECT_NE(name.find(onednn_built() ? "onednn" : "flash"), std::string::npos) << name;
}

TEST(Attention, FullyMaskedRowsAreNaNAsInTheUnfusedGraph) {
  Inputs in = make_inputs({{1}, 4, 4, 32, 32, MaskCase::none}, 8);
  in.mask = Tensor::zeros(DType::boolean, {4, 4});  // nothing takes part
  for (std::string_view kernel : {"math", "flash"}) {
    const Tensor out = run_kernel(kernel, in);
    EXPECT_TRUE(std::isnan(out.data<float>()[0])) << kernel;
  }
}

TEST(SdpaKernels, PriorityOrderFilterAndGuards) {
  const ScopedGlobalSettings restore;
  EXPECT_EQ(backends::sdpa::kernels(), (std::vector<std::string>{"onednn", "flash", "math"}));
  {
    const backends::sdpa::ScopedKernels chosen({"math", "flash"});  // default order
    EXPECT_EQ(backends::sdpa::kernels(), (std::vector<std::string>{"flash", "math"}));
    const backends::sdpa::ScopedKernels ordered({"math", "flash"}, true);
    EXPECT_EQ(backends::sdpa::kernels(), (std::vector<std::string>{"math", "flash"}));
  }
  EXPECT_EQ(backends::sdpa::kernels(), (std::vector<std::string>{"onednn", "flash", "math"}));
  backends::sdpa::set_enabled("flash", false);
  EXPECT_FALSE(backends::sdpa::enabled("flash"));
  EXPECT_EQ(backends::sdpa::kernels(), (std::vector<std::string>{"onednn", "math"}));
  backends::sdpa::set_enabled("flash", true);  // back at its default place
  EXPECT_EQ(backends::sdpa::kernels(), (std::vector<std::string>{"onednn", "flash", "math"}));
  EXPECT_THROW(backends::sdpa::ScopedKernels({"fast"}), Error);
  EXPECT_THROW(backends::sdpa::ScopedKernels({"math", "math"}), Error);
}

// set_enabled reads the global list and writes it back: threads switching different kernels at
// once must not undo each other's change.
TEST(SdpaKernels, ConcurrentSwitchesOfDifferentKernelsAllTakeEffect) {
  const ScopedGlobalSettings restore;
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::atomic<int> ready{0};
    const auto switch_off = [&](std::string_view kernel) {
      ++ready;
      while (ready.load() < 2) {
      }
      backends::sdpa::set_enabled(kernel, false);
    };
    std::thread flash(switch_off, "flash");
    std::thread math(switch_off, "math");
    flash.join();
    math.join();
    ASSERT_EQ(backends::sdpa::kernels(), (std::vector<std::string>{"onednn"})) << "attempt " << attempt;
    backends::sdpa::set_enabled("flash", true);
    backends::sdpa::set_enabled("math", true);
  }
}

TEST(SdpaKernels, TheFirstListedKernelThatTakesItRunsIt) {
  const Inputs causal = make_inputs({{2}, 16, 16, 32, 32, MaskCase::causal}, 9);
  std::string name;
  {
    // oneDNN refuses is_causal: flash, next in the list, runs it.
    const backends::sdpa::ScopedKernels list({"onednn", "flash"}, true);
    backends::sdpa::attention(causal.q, causal.k, causal.v, {}, true, std::nullopt, &name);
    EXPECT_NE(name.find("flash"), std::string::npos) << name;
  }
  {
    const backends::sdpa::ScopedKernels only({"onednn"});
    try {
      backends::sdpa::attention(causal.q, causal.k, causal.v, {}, true);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("onednn: " + onednn_reason("is_causal is not supported")),
                std::string::npos)
          << error.what();
    }
  }
  {
    // Deterministic mode keeps oneDNN's attention away and says why.
    const ScopedSettings deterministic(Settings().set(SettingKey("deterministic"), 1));
    const std::vector<std::string> reasons = backends::sdpa::why_not("onednn", small_params());
    ASSERT_EQ(reasons.size(), 1u);
    EXPECT_NE(reasons[0].find(onednn_reason("deterministic mode")), std::string::npos) << reasons[0];
    EXPECT_TRUE(backends::sdpa::can_use("flash", small_params()));
  }
  // Shapes that do not fit are one reason for every kernel.
  const std::vector<std::string> reasons =
      backends::sdpa::why_not("flash", {.query = {2, 16, 32}, .key = {2, 16, 8}, .value = {2, 16, 32}});
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("has width 8"), std::string::npos) << reasons[0];
}

// Attention as torch 1.13 exports nn.MultiheadAttention (batch x heads folded, K already
// transposed): Div(Q, sqrt E) -> MatMul(., K^T) -> Mul(., 1) -> Add(., mask) -> Softmax -> MatMul(., V),
// with K^T's Transpose after the Div in file order. x is [N, L, E]; Q, K and V are projections of it.
Model exported_attention(int64_t n, int64_t l, int64_t e, bool with_mask) {
  GraphBuilder g({n, l, e});
  const std::string q = g.add("MatMul", {"x", g.weights({e, e})});
  const std::string k = g.add("MatMul", {"x", g.weights({e, e})});
  const std::string v = g.add("MatMul", {"x", g.weights({e, e})});
  const std::string scaled =
      g.add("Div", {q, g.constant(Tensor::scalar<float>(std::sqrt(static_cast<float>(e))))});
  Attributes perm;
  perm.set("perm", testing::ints_attr({0, 2, 1}));
  const std::string kt = g.add("Transpose", {k}, perm);
  std::string scores = g.add("MatMul", {scaled, kt});
  if (with_mask) {
    scores = g.add("Mul", {scores, g.constant(Tensor::scalar<float>(1.0f))});
    scores = g.add("Add", {scores, g.weights({l, l}, 2.0f)});
  }
  Attributes axis;
  axis.set("axis", testing::int_attr(-1));
  const std::string probabilities = g.add("Softmax", {scores}, axis);
  return g.finish({g.add("MatMul", {probabilities, v})});
}

int attention_steps(const Plan& plan) {
  int count = 0;
  for (const PlanStep& step : plan.steps()) count += step.record.op_type == kAttentionOp ? 1 : 0;
  return count;
}

TEST(AttentionFusion, ExportedNodesBecomeOneStepWithTheUnfusedResult) {
  for (bool with_mask : {false, true}) {
    SCOPED_TRACE(with_mask ? "mask" : "no mask");
    const Tensor x = random_tensor({4, 24, 32}, 11);
    Session session(exported_attention(4, 24, 32, with_mask));
    const Tensor fused = session.run({{"x", x}}).begin()->second;
    EXPECT_EQ(attention_steps(*session.plan_for(std::vector<Shape>{x.shape()})), 1);
    const backends::sdpa::ScopedKernels none(std::span<const std::string_view>{});
    Session unfused_session(exported_attention(4, 24, 32, with_mask));
    EXPECT_EQ(attention_steps(*unfused_session.plan_for(std::vector<Shape>{x.shape()})), 0);
    const Tensor unfused = unfused_session.run({{"x", x}}).begin()->second;
    EXPECT_LE(relative_error(fused, values_of(unfused)), 1e-5);
  }
}

TEST(AttentionFusion, AOneByOneZeroMaskIsNotCausality) {
  // A [1, 1] constant 0 passes a causality check made on its own shape; over 24 keys it masks nothing.
  const Tensor x = random_tensor({4, 24, 32}, 13);
  GraphBuilder g({4, 24, 32});
  Attributes perm;
  perm.set("perm", testing::ints_attr({0, 2, 1}));
  std::string scores = g.add("MatMul", {"x", g.add("Transpose", {"x"}, perm)});
  scores = g.add("Add", {scores, g.constant(Tensor::zeros(DType::f32, {1, 1}))});
  const std::string probabilities = g.add("Softmax", {scores});
  const Model model = g.finish({g.add("MatMul", {probabilities, "x"})});
  Session fused(model);
  const Tensor out = fused.run({{"x", x}}).begin()->second;
  EXPECT_EQ(attention_steps(*fused.plan_for(std::vector<Shape>{x.shape()})), 1);
  const backends::sdpa::ScopedKernels none(std::span<const std::string_view>{});
  Session unfused(model);
  EXPECT_LE(relative_error(out, values_of(unfused.run({{"x", x}}).begin()->second)), 1e-5);
}

TEST(AttentionFusion, AFactorAfterTheMaskIsNotAttention) {
  // softmax(0.5 * (s + mask)) scales the mask too: no step computes that, so the nodes stay.
  GraphBuilder g({2, 8, 16});
  const std::string kt = g.add("Transpose", {"x"}, [] {
    Attributes perm;
    perm.set("perm", testing::ints_attr({0, 2, 1}));
    return perm;
  }());
  std::string scores = g.add("MatMul", {"x", kt});
  scores = g.add("Add", {scores, g.weights({8, 8}, 2.0f)});
  scores = g.add("Mul", {scores, g.constant(Tensor::scalar<float>(0.5f))});
  const std::string probabilities = g.add("Softmax", {scores});
  Session session(g.finish({g.add("MatMul", {probabilities, "x"})}));
  EXPECT_EQ(attention_steps(*session.plan_for(std::vector<Shape>{{2, 8, 16}})), 0);
}

TEST(AttentionFusion, EachKernelRunsTheFusedStepAndReasonsAreRecorded) {
  const Tensor x = random_tensor({4, 24, 32}, 12);
  for (std::string_view kernel : {"math", "flash", "onednn"}) {
    if (kernel == "onednn" && !onednn_built()) continue;
    const backends::sdpa::ScopedKernels only({kernel});
    Session session(exported_attention(4, 24, 32, true));
    const std::shared_ptr<const Plan> plan = session.plan_for(std::vector<Shape>{x.shape()});
    for (const PlanStep& step : plan->steps()) {
      if (step.record.op_type != kAttentionOp) continue;
      EXPECT_NE(step.record.kernel.find(kernel), std::string::npos) << step.record.kernel;
    }
  }
  // A list where nothing takes the step: planning names each kernel's reason.
  const ScopedSettings deterministic(Settings().set(SettingKey("deterministic"), 1));
  const backends::sdpa::ScopedKernels only({"onednn"});
  Session session(exported_attention(4, 24, 32, true));
  try {
    session.plan_for(std::vector<Shape>{x.shape()});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("no attention kernel of sdpa_kernels (onednn)"), std::string::npos) << message;
    EXPECT_NE(message.find("onednn: " + onednn_reason("deterministic mode")), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace kiln
