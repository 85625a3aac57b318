// The Winograd backend: F(2x2,3x3) and F(4x4,3x3) against the plain-loop reference conv (sums in
// double) over fixed shapes (tiles overhanging the edges, pads 0 and 1, batch 1 and 4, channel
// counts off the vector width, each post-op, 1 and 2 threads) and resnet18's 3x3 layers; the
// isa_avx2.* and isa_baseline.* runs repeat them with the ISA tier capped (tests/CMakeLists.txt).
// Then the backend as selection sees it: what it refuses and why, conv_algorithm, the probe error
// auto bounds, and plans. The full grid runs in the slow tier (KILN_SLOW=1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <tuple>
#include <vector>

#include "backend_test_util.h"
#include "backends/backends.h"
#include "backends/choice_cache.h"
#include "backends/native/ref/reference.h"
#include "backends/selection.h"
#include "backends/winograd/accuracy.h"
#include "backends/winograd/cost_model.h"
#include "backends/winograd/winograd_backend.h"
#include "backends/winograd/winograd_conv.h"
#include "graph/plan.h"
#include "graph/session.h"
#include "graph_builder.h"
#include "runtime/cpu_info.h"
#include "runtime/threads.h"

namespace kiln {
namespace {

using winograd::ConvShape;
using winograd::OutputStep;
using winograd::TransformedFilters;
using winograd::WinogradConv;

// |winograd - exact| <= tolerance * (sum of |terms| + 1): the transforms amplify rounding by their
// coefficients, F(4)'s more than F(2)'s. Measured worst cases over the fixed shapes are 1.1e-7
// (F(2)) and 3.0e-7 (F(4); 1.2e-6 on the usual points 0, ±1, ±2); the bounds leave about 10x room.
double tolerance(int tile) {
  return tile == 4 ? 3e-6 : 1e-6;
}

struct Case {
  int tile;
  int64_t batch, in_channels, out_channels, height, width, pad;
  int64_t dilation = 1;
};

std::string describe(const Case& c) {
  return str_cat("F(", c.tile, ") N", c.batch, " C", c.in_channels, " K", c.out_channels, " ", c.height, "x",
                 c.width, " pad ", c.pad, " dilation ", c.dilation);
}

// Weights He-initialized (uniform with variance 2 / fan-in), inputs like a ReLU's outputs.
Tensor he_weights(int64_t out_channels, int64_t in_channels, uint32_t seed) {
  const float bound = std::sqrt(3.0f * 2.0f / static_cast<float>(in_channels * 9));
  return testing::random_tensor({out_channels, in_channels, 3, 3}, seed, -bound, bound);
}

std::vector<float> to_nhwc(const Tensor& x) {
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  std::vector<float> out(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t xx = 0; xx < w; ++xx)
          out[static_cast<size_t>(((i * h + y) * w + xx) * c + ch)] =
              x.data<float>()[((i * c + ch) * h + y) * w + xx];
  return out;
}

ConvParams params_of(const Case& c) {
  ConvParams p;
  p.batch = c.batch;
  p.in_channels = c.in_channels;
  p.out_channels = c.out_channels;
  p.input_spatial = {c.height, c.width};
  p.window.kernel = {3, 3};
  p.window.strides = {1, 1};
  p.window.dilations = {c.dilation, c.dilation};
  p.window.pads_begin = {c.pad, c.pad};
  p.window.pads_end = {c.pad, c.pad};
  p.window.output = {c.height + 2 * c.pad - 2 * c.dilation, c.width + 2 * c.pad - 2 * c.dilation};
  return p;
}

ConvShape shape_of(const Case& c) {
  ConvShape s;
  s.batch = c.batch;
  s.in_channels = c.in_channels;
  s.out_channels = c.out_channels;
  s.in_h = c.height;
  s.in_w = c.width;
  s.out_h = c.height + 2 * c.pad - 2 * c.dilation;
  s.out_w = c.width + 2 * c.pad - 2 * c.dilation;
  s.pad_top = s.pad_left = c.pad;
  s.dilation_h = s.dilation_w = c.dilation;
  return s;
}

// The steps in double, as the output transform applies them.
double apply(double value, const std::vector<OutputStep>& steps, double residual) {
  for (const OutputStep& step : steps) {
    switch (step.kind) {
      case PostOp::Kind::relu:
        value = std::max(value, 0.0);
        break;
      case PostOp::Kind::leaky_relu:
        value = value < 0 ? value * step.alpha : value;
        break;
      case PostOp::Kind::clip:
        value = std::min(std::max(value, static_cast<double>(step.alpha)), static_cast<double>(step.beta));
        break;
      case PostOp::Kind::sum:
        value += residual;
        break;
      default:
        break;
    }
  }
  return value;
}

// Runs one case on `threads` threads and checks every output against the reference; returns the
// output (NHWC) and the worst |error| / (magnitude + 1) seen.
std::vector<float> check_case(const Case& c, const std::vector<OutputStep>& steps, bool with_bias,
                              bool in_place, int threads, double* worst = nullptr) {
  SCOPED_TRACE(describe(c));
  const ScopedThreads scoped(threads);
  const Tensor x = testing::random_tensor({c.batch, c.in_channels, c.height, c.width}, 3, 0.0f, 1.0f);
  const Tensor w = he_weights(c.out_channels, c.in_channels, 5);
  const Tensor bias = with_bias ? testing::random_tensor({c.out_channels}, 7, -0.5f, 0.5f) : Tensor();
  const ConvShape shape = shape_of(c);
  const int64_t outputs = shape.batch * shape.out_h * shape.out_w * shape.out_channels;
  std::vector<float> residual(static_cast<size_t>(outputs));
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float& value : residual) value = dist(rng);

  auto filters =
      std::make_shared<const TransformedFilters>(c.tile, c.in_channels, c.out_channels, w.data<float>());
  std::vector<float> bias_values;
  if (with_bias) bias_values.assign(bias.data<float>(), bias.data<float>() + c.out_channels);
  const WinogradConv conv(filters, shape, bias_values, steps);
  const std::vector<float> x_nhwc = to_nhwc(x);
  std::vector<float> y(static_cast<size_t>(outputs), NAN);
  const bool has_sum = std::any_of(steps.begin(), steps.end(),
                                   [](const OutputStep& s) { return s.kind == PostOp::Kind::sum; });
  if (in_place) {
    y = residual;  // the residual's storage becomes the output
    conv.run(x_nhwc.data(), y.data(), y.data());
  } else {
    conv.run(x_nhwc.data(), has_sum ? residual.data() : nullptr, y.data());
  }

  const native::ref::Values expected = native::ref::conv(x, w, bias, params_of(c));
  double worst_seen = 0;
  for (int64_t n = 0; n < shape.batch; ++n) {
    for (int64_t k = 0; k < shape.out_channels; ++k) {
      for (int64_t oh = 0; oh < shape.out_h; ++oh) {
        for (int64_t ow = 0; ow < shape.out_w; ++ow) {
          const size_t ref =
              static_cast<size_t>(((n * shape.out_channels + k) * shape.out_h + oh) * shape.out_w + ow);
          const size_t got =
              static_cast<size_t>(((n * shape.out_h + oh) * shape.out_w + ow) * shape.out_channels + k);
          const double want = apply(expected.value[ref], steps, residual[got]);
          const double allowed = tolerance(c.tile) * (expected.magnitude[ref] + 1);
          const double error = std::abs(y[got] - want);
          worst_seen = std::max(worst_seen, error / (expected.magnitude[ref] + 1));
          if (!(error <= allowed)) {
            ADD_FAILURE() << "output (" << n << ", " << k << ", " << oh << ", " << ow << "): " << y[got]
                          << " vs " << want << " (allowed " << allowed << ")";
            return y;
          }
        }
      }
    }
  }
  if (worst != nullptr) *worst = std::max(*worst, worst_seen);
  return y;
}

// ~40 fixed shapes: both tiles over sizes m does and does not divide (tiles overhang the bottom
// and right edges), one-tile images, pads 0 and 1, batch 1 and 4, channels off the vector width.
std::vector<Case> fixed_cases() {
  const struct {
    int64_t batch, in_channels, out_channels, height, width, pad;
  } shapes[] = {
      {1, 16, 16, 8, 8, 1},   {1, 16, 16, 6, 6, 0},   {1, 17, 33, 9, 7, 1},   {4, 16, 24, 5, 5, 1},
      {1, 32, 32, 30, 30, 1}, {1, 64, 64, 14, 14, 1}, {4, 19, 16, 11, 13, 0}, {1, 48, 20, 3, 3, 1},
      {1, 24, 40, 4, 17, 1},  {4, 64, 48, 7, 7, 1},   {1, 33, 17, 10, 10, 0}, {1, 16, 64, 16, 16, 1},
      {1, 64, 16, 12, 9, 1},  {4, 32, 32, 2, 2, 1},   {1, 40, 56, 23, 29, 1}, {1, 16, 16, 3, 3, 0},
      {1, 20, 30, 18, 5, 0},  {4, 64, 64, 8, 8, 1},   {1, 56, 40, 28, 28, 1}, {1, 31, 63, 13, 6, 1},
  };
  std::vector<Case> cases;
  for (int tile : {2, 4}) {
    for (const auto& s : shapes)
      cases.push_back({tile, s.batch, s.in_channels, s.out_channels, s.height, s.width, s.pad});
  }
  return cases;
}

TEST(WinogradConv, MatchesTheReferenceOverFixedShapes) {
  double worst[2] = {0, 0};
  for (const Case& c : fixed_cases()) {
    for (int threads : {1, 2}) check_case(c, {}, true, false, threads, &worst[c.tile == 4 ? 1 : 0]);
  }
  std::printf("worst |error| / (sum |terms| + 1): F(2) %.2e, F(4) %.2e\n", worst[0], worst[1]);
}

// Dilated kernels: tiles over each phase, with dilations that do and do not divide the output,
// pads that are and are not multiples of the dilation, and dilations wider than the output (most
// phases hold one output; fcn_resnet50's 2 and 4 on 28x28, deeplab's 12 on 14x14).
TEST(WinogradConv, MatchesTheReferenceWithDilation) {
  for (int tile : {2, 4}) {
    for (const Case& c : {Case{tile, 1, 16, 16, 12, 12, 2, 2}, Case{tile, 2, 17, 24, 13, 11, 2, 2},
                          Case{tile, 1, 32, 16, 28, 28, 4, 4}, Case{tile, 1, 16, 32, 9, 10, 1, 3},
                          Case{tile, 1, 16, 16, 14, 14, 12, 12}, Case{tile, 2, 24, 16, 10, 7, 0, 2}}) {
      for (int threads : {1, 2}) check_case(c, {{PostOp::Kind::relu}}, true, false, threads);
    }
    check_case({tile, 1, 16, 24, 10, 9, 2, 2}, {{PostOp::Kind::sum}, {PostOp::Kind::relu}}, true, true, 2);
  }
}

TEST(WinogradConv, AppliesEachPostOpInTheOutputTransform) {
  const std::vector<std::vector<OutputStep>> step_lists = {
      {{PostOp::Kind::relu}},
      {{PostOp::Kind::leaky_relu, 0.1f}},
      {{PostOp::Kind::clip, 0.0f, 0.25f}},
      {{PostOp::Kind::sum}},
      {{PostOp::Kind::sum}, {PostOp::Kind::relu}},  // resnet's Add then Relu
  };
  for (int tile : {2, 4}) {
    for (const Case& c : {Case{tile, 1, 32, 24, 10, 9, 1}, Case{tile, 4, 16, 17, 7, 7, 0}}) {
      for (const auto& steps : step_lists) {
        for (bool with_bias : {false, true}) check_case(c, steps, with_bias, false, 2);
      }
      // The residual's storage as the output (the planner's in-place sum).
      check_case(c, {{PostOp::Kind::sum}, {PostOp::Kind::relu}}, true, true, 2);
    }
  }
}

TEST(WinogradConv, GivesTheSameBitsOnAnyThreadCount) {
  for (const Case& c : {Case{4, 4, 32, 40, 13, 13, 1}, Case{2, 1, 64, 96, 7, 7, 1}}) {
    const std::vector<float> one = check_case(c, {{PostOp::Kind::relu}}, true, false, 1);
    const std::vector<float> two = check_case(c, {{PostOp::Kind::relu}}, true, false, 2);
    EXPECT_EQ(one, two) << describe(c);
  }
}

TEST(WinogradConv, AnEmptyBatchIsNoWork) {
  const Tensor w = he_weights(16, 16, 1);
  auto filters = std::make_shared<const TransformedFilters>(4, 16, 16, w.data<float>());
  ConvShape shape = shape_of({4, 0, 16, 16, 8, 8, 1});
  const WinogradConv conv(filters, shape, {}, {});
  conv.run(nullptr, nullptr, nullptr);
  EXPECT_EQ(conv.tiles_h(), 2);
}

// resnet18's stride-1 3x3 convolutions at batch 1 (its layer1 .. layer4).
TEST(WinogradConv, MatchesTheReferenceOnResnet18Layers) {
  for (const auto& [channels, size] : {std::pair<int64_t, int64_t>{64, 56}, {128, 28}, {256, 14}, {512, 7}}) {
    for (int tile : {2, 4})
      check_case({tile, 1, channels, channels, size, size, 1}, {{PostOp::Kind::relu}}, true, false, 2);
  }
}

// The slow tier's sweep: every combination of tile, batch, pad and a grid of sizes and channels.
TEST(WinogradConv, FullGrid) {
  const char* slow = std::getenv("KILN_SLOW");
  if (slow == nullptr || std::string(slow) != "1") GTEST_SKIP() << "slow tier: KILN_SLOW=1";
  for (int tile : {2, 4}) {
    for (int64_t batch : {1, 3}) {
      for (int64_t pad : {0, 1}) {
        for (int64_t size : {3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33}) {
          for (const auto& [in_channels, out_channels] :
               {std::pair<int64_t, int64_t>{16, 16}, {17, 31}, {32, 64}, {64, 33}, {96, 96}, {128, 16}}) {
            for (int threads : {1, 2})
              check_case({tile, batch, in_channels, out_channels, size, size + 2, pad},
                         {{PostOp::Kind::relu}}, true, false, threads);
          }
        }
      }
    }
  }
}

TEST(WinogradAccuracy, ProbeErrorIsSmallAndGrowsWithTheTile) {
  for (int64_t channels : {16, 64, 256}) {
    const Tensor w = he_weights(channels, channels, 9);
    const double f2 = winograd::probe_error(2, channels, channels, w.data<float>());
    const double f4 = winograd::probe_error(4, channels, channels, w.data<float>());
    SCOPED_TRACE(str_cat(channels, " channels: F(2) ", f2, ", F(4) ", f4));
    // He-initialized filters: F(2) within auto's bound, F(4) several times above (docs/backends.md).
    EXPECT_GT(f2, 0);
    EXPECT_LT(f2, winograd::kAutoErrorBound);
    EXPECT_LT(2 * f2, f4);
    EXPECT_LT(f4, 1e-5);
  }
  // Filters whose products overflow float32, or hold a NaN, have no finite error.
  Tensor huge = Tensor::from_vector(std::vector<float>(32 * 32 * 9, 1e38f), {32, 32, 3, 3});
  Tensor nan = he_weights(32, 32, 13);
  nan.data<float>()[100] = NAN;
  for (int tile : {2, 4}) {
    EXPECT_EQ(winograd::probe_error(tile, 32, 32, huge.data<float>()), INFINITY);
    EXPECT_EQ(winograd::probe_error(tile, 32, 32, nan.data<float>()), INFINITY);
  }
}

// ---- the backend --------------------------------------------------------------------------------

// The options a plan under conv_algorithm `algorithm` gives its requests.
std::shared_ptr<const BackendOptionSet> options_for(ConvAlgorithm algorithm) {
  auto options = std::make_shared<WinogradOptions>();
  options->conv_algorithm = algorithm;
  auto set = std::make_shared<BackendOptionSet>();
  set->add(std::move(options));
  return set;
}

KernelRequest conv_request(int64_t channels, int64_t size, Attributes attributes, const Tensor& weights,
                           ConvAlgorithm algorithm = ConvAlgorithm::winograd) {
  static std::vector<std::unique_ptr<Attributes>> kept;  // OpSpec points at its attributes
  kept.push_back(std::make_unique<Attributes>(std::move(attributes)));
  KernelRequest request;
  request.op.op_type = "Conv";
  request.op.opset = 13;
  request.op.attributes = kept.back().get();
  request.op.inputs = {TensorInfo{DType::f32, {1, channels, size, size}, {}},
                       TensorInfo{DType::f32, weights.shape(), weights}};
  request.input_layouts = {Layout::nhwc};
  request.options = options_for(algorithm);
  return request;
}

std::string refusal(const KernelRequest& request, const Shape& output) {
  const TensorInfo out{DType::f32, output, {}};
  KernelOrReason offer = winograd_backend().create_kernel(request, std::span(&out, 1));
  return offer.kernel ? "" : offer.refusal.detail;
}

TEST(WinogradBackend, SaysWhyItRefuses) {
  KILN_SKIP_UNLESS_BUILT("winograd");
  const Tensor w3 = he_weights(32, 32, 1);
  const Shape out{1, 32, 8, 8};
  EXPECT_EQ(refusal(conv_request(32, 8, testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}), w3), out), "");
  EXPECT_EQ(refusal(conv_request(32, 16, testing::conv_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}), w3), out),
            "stride 2x2, not 1");
  EXPECT_EQ(refusal(conv_request(32, 12, testing::conv_attrs({3, 3}, {1, 1}, {2, 2, 2, 2}, 1, {2, 2}), w3),
                    {1, 32, 12, 12}),
            "");
  const Tensor grouped = he_weights(32, 16, 1);
  EXPECT_EQ(refusal(conv_request(32, 8, testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, 2), grouped), out),
            "grouped convolution (group = 2)");
  const Tensor w5 = testing::random_tensor({32, 32, 5, 5}, 1);
  EXPECT_EQ(refusal(conv_request(32, 12, testing::conv_attrs({5, 5}, {1, 1}, {0, 0, 0, 0}), w5), out),
            "kernel 5x5, not 3x3");
  const Tensor thin = he_weights(32, 8, 1);
  EXPECT_EQ(refusal(conv_request(8, 8, testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}), thin), out),
            "too few channels (8 in, 32 out; Winograd takes at least 16 each)");
  KernelRequest bf16 = conv_request(32, 8, testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}), w3);
  bf16.precision = Precision::bf16;
  EXPECT_EQ(refusal(bf16, out), "Winograd computes float32 only (bf16 precision runs on oneDNN)");
  KernelRequest run_time = conv_request(32, 8, testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}), w3);
  run_time.op.inputs[1].value = Tensor();
  EXPECT_EQ(refusal(run_time, out), "weights are not a plan-time constant");
  KernelRequest sigmoid = conv_request(32, 8, testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}), w3);
  sigmoid.post_ops.push_back({PostOp::Kind::sigmoid, 0, 0, -1, "act", "Sigmoid"});
  EXPECT_EQ(refusal(sigmoid, out),
            "fused sigmoid (act) is not one the output transform applies (relu, leaky_relu, clip, sum)");
  EXPECT_EQ(refusal(conv_request(32, 8, testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}), w3,
                                 ConvAlgorithm::direct),
                    out),
            "conv_algorithm is direct");
}

TEST(WinogradBackend, OffersEachAllowedTileToAutotune) {
  KILN_SKIP_UNLESS_BUILT("winograd");
  const Tensor w = he_weights(32, 32, 1);
  const TensorInfo out{DType::f32, {1, 32, 8, 8}, {}};
  // Under winograd both tiles, F(4) first; under auto the tiles within the bound on these filters.
  std::vector<int> within_bound;
  for (int tile : {4, 2}) {
    if (winograd::probe_error(tile, 32, 32, w.data<float>()) <= winograd::kAutoErrorBound)
      within_bound.push_back(tile);
  }
  ASSERT_FALSE(within_bound.empty());  // F(2) on He-initialized filters
  for (ConvAlgorithm algorithm : {ConvAlgorithm::winograd, ConvAlgorithm::automatic}) {
    const std::vector<int> tiles =
        algorithm == ConvAlgorithm::winograd ? std::vector<int>{4, 2} : within_bound;
    KernelRequest request =
        conv_request(32, 8, testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}), w, algorithm);
    request.timed = true;  // autotune asks for every tile; untimed, one is offered
    for (size_t i = 0; i < tiles.size(); ++i) {
      request.alternative = static_cast<int>(i);
      KernelOrReason offer = winograd_backend().create_kernel(request, std::span(&out, 1));
      ASSERT_NE(offer.kernel, nullptr) << offer.refusal.detail;
      const std::string name(offer.kernel->name());
      EXPECT_TRUE(name.starts_with(str_cat("winograd:f", tiles[i], "x", tiles[i], "_3x3:"))) << name;
      EXPECT_EQ(offer.kernel->input_layout(0), Layout::nhwc);
      EXPECT_EQ(offer.kernel->output_layout(0), Layout::nhwc);
      EXPECT_NE(offer.note.find("transformed filters"), std::string::npos);
      const bool automatic = algorithm == ConvAlgorithm::automatic;
      EXPECT_TRUE(offer.cold_caches);
      EXPECT_EQ(offer.note.find("probe error") != std::string::npos, automatic);
    }
    request.alternative = static_cast<int>(tiles.size());
    EXPECT_EQ(winograd_backend().create_kernel(request, std::span(&out, 1)).kernel, nullptr);
  }
  // Under auto, filters no tile computes within the bound are refused, with each tile's error;
  // conv_algorithm winograd still takes them.
  const Tensor huge = Tensor::from_vector(std::vector<float>(32 * 32 * 9, 1e38f), {32, 32, 3, 3});
  KernelRequest request =
      conv_request(32, 8, testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}), huge, ConvAlgorithm::automatic);
  KernelOrReason offer = winograd_backend().create_kernel(request, std::span(&out, 1));
  ASSERT_EQ(offer.kernel, nullptr);
  EXPECT_EQ(
      offer.refusal.detail,
      "conv_algorithm auto: error on this layer's filters above 1.0e-06 of the output scale (F(4x4,3x3) inf, "
      "F(2x2,3x3) inf)");
  request.options = options_for(ConvAlgorithm::winograd);
  EXPECT_NE(winograd_backend().create_kernel(request, std::span(&out, 1)).kernel, nullptr);
}

// A conv + residual + relu block and a stride-2 conv: what each conv_algorithm plans, and outputs.
Model residual_block() {
  testing::GraphBuilder g({1, 32, 12, 12});
  Attributes same = testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1});
  const float scale = std::sqrt(3.0f * 2.0f / (32 * 9));
  const std::string a =
      g.add("Relu", {g.add("Conv", {"x", g.weights({32, 32, 3, 3}, scale), g.weights({32}, 0.1f)}, same)});
  const std::string b = g.add("Conv", {a, g.weights({32, 32, 3, 3}, scale), g.weights({32}, 0.1f)}, same);
  const std::string sum = g.add("Relu", {g.add("Add", {b, "x"})});
  return g.finish({g.add("Conv", {sum, g.weights({16, 32, 3, 3}, scale)},
                         testing::conv_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}))});
}

TEST(WinogradBackend, ConvAlgorithmChoosesWhatPlansRun) {
  KILN_SKIP_UNLESS_BUILT("winograd");
  const Model model = residual_block();
  const Tensor x = testing::random_tensor({1, 32, 12, 12}, 3, 0, 1);
  Tensor direct_out;
  {
    const ScopedSettings direct(
        Settings().set(SettingKey("conv_algorithm"), static_cast<int>(ConvAlgorithm::direct)));
    Session session(model);
    direct_out = session.run({{"x", x}}).begin()->second;
    for (const PlanStep& step : session.plan_for(std::vector<Shape>{x.shape()})->steps())
      EXPECT_NE(step.record.backend, "winograd");
  }
  const ScopedSettings forced(
      Settings().set(SettingKey("conv_algorithm"), static_cast<int>(ConvAlgorithm::winograd)));
  Session session(model);
  const Tensor out = session.run({{"x", x}}).begin()->second;
  int winograd_steps = 0;
  for (const PlanStep& step : session.plan_for(std::vector<Shape>{x.shape()})->steps()) {
    if (step.record.backend != "winograd") continue;
    ++winograd_steps;
    EXPECT_TRUE(has_note(step.record, "transformed filters")) << step.record.node_name;
  }
  EXPECT_EQ(winograd_steps, 2);  // the stride-2 conv stays direct
  double error = 0, scale = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    error =
        std::max(error, static_cast<double>(std::abs(out.data<float>()[i] - direct_out.data<float>()[i])));
    scale = std::max(scale, static_cast<double>(std::abs(direct_out.data<float>()[i])));
  }
  EXPECT_LE(error, 1e-4 * scale);
}

// Under auto, filters whose probe error no tile keeps within the bound (a NaN: no finite error) are
// refused as above it; conv_algorithm winograd takes them.
TEST(WinogradBackend, AutoRefusesFiltersAboveTheErrorBound) {
  KILN_SKIP_UNLESS_BUILT("winograd");
  const Attributes same = testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1});
  Tensor nan = he_weights(32, 32, 13);
  nan.data<float>()[100] = NAN;
  const TensorInfo out{DType::f32, {1, 32, 12, 12}, {}};
  const KernelOrReason automatic =
      winograd_backend().create_kernel(conv_request(32, 12, same, nan, ConvAlgorithm::automatic), std::span(&out, 1));
  ASSERT_EQ(automatic.kernel, nullptr);
  EXPECT_EQ(automatic.refusal.kind, RefusalKind::above_error_bound);
  EXPECT_NE(automatic.refusal.detail.find("above"), std::string::npos) << automatic.refusal.detail;
  EXPECT_NE(winograd_backend().create_kernel(conv_request(32, 12, same, nan), std::span(&out, 1)).kernel, nullptr);
}

// Under auto, untimed: the cost model takes Winograd where it predicts at most kAutoMaxShare of the
// direct kernel's time, says so in the note, and refuses elsewhere with the prediction. A layer with
// many tiles and few filters is Winograd's on every ISA; one with 16 tiles and 512 x 512 filters
// (resnet's last stage) is the direct kernel's.
// Filters larger than L2 are read from memory by every block of tiles: fcn_resnet50's head (2048 to
// 512 channels on 28x28) streams 64 MiB of transformed filters per block, and against the AVX-512
// direct kernel wins or loses by how busy memory is (26 to 55 ms against oneDNN's 37 to 43 ms at 2
// threads); at the avx2 tier the direct kernel is half as fast and Winograd wins (56 vs 75 ms).
TEST(WinogradCostModel, CountsFiltersReadAgainByEveryBlockOfTiles) {
  winograd::ConvShape head;
  head.in_channels = 2048;
  head.out_channels = 512;
  head.in_h = head.in_w = head.out_h = head.out_w = 28;
  head.pad_top = head.pad_left = 1;
  const winograd::TileBlocking blocking = winograd::tile_blocking(head, 2);
  EXPECT_TRUE(blocking.filters_from_memory);
  EXPECT_GT(blocking.blocks, 1);
  EXPECT_GE(blocking.blocks * blocking.tile_block, 14 * 14);
  const double share = winograd::estimate_cost(head, 2).share();
  if (isa_in_effect() >= Isa::avx512) {
    EXPECT_GT(share, winograd::kAutoMaxShare);
  } else {
    EXPECT_LT(share, winograd::kAutoMaxShare);
  }
  // A smaller output reads them fewer times.
  winograd::ConvShape small = head;
  small.in_h = small.in_w = small.out_h = small.out_w = 7;
  EXPECT_LT(winograd::tile_blocking(small, 2).blocks, blocking.blocks);
}

TEST(WinogradBackend, AutoDecidesByThePredictedCostWithoutTiming) {
  KILN_SKIP_UNLESS_BUILT("winograd");
  const Attributes same = testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1});
  const Tensor small_filters = he_weights(64, 64, 1);
  const TensorInfo wide_out{DType::f32, {1, 64, 56, 56}, {}};
  KernelRequest wide_request = conv_request(64, 56, same, small_filters, ConvAlgorithm::automatic);
  wide_request.optimized_candidate_follows = true;  // oneDNN's direct kernel would run it instead
  KernelOrReason wide = winograd_backend().create_kernel(wide_request, std::span(&wide_out, 1));
  ASSERT_NE(wide.kernel, nullptr) << wide.refusal.detail;
  // The tile predicted faster among those within the error bound.
  ConvShape wide_shape;
  wide_shape.in_channels = wide_shape.out_channels = 64;
  wide_shape.in_h = wide_shape.in_w = wide_shape.out_h = wide_shape.out_w = 56;
  wide_shape.pad_top = wide_shape.pad_left = 1;
  const bool f4_within =
      winograd::probe_error(4, 64, 64, small_filters.data<float>()) <= winograd::kAutoErrorBound;
  const bool f4_faster =
      winograd::estimate_cost(wide_shape, 4).winograd < winograd::estimate_cost(wide_shape, 2).winograd;
  const char* expected_tile = f4_within && f4_faster ? "winograd:f4x4_3x3:" : "winograd:f2x2_3x3:";
  EXPECT_TRUE(std::string(wide.kernel->name()).starts_with(expected_tile)) << wide.kernel->name();
  EXPECT_NE(wide.note.find("predicted at "), std::string::npos) << wide.note;

  const Tensor large_filters = he_weights(512, 512, 2);
  const TensorInfo deep_out{DType::f32, {1, 512, 7, 7}, {}};
  KernelRequest deep_request = conv_request(512, 7, same, large_filters, ConvAlgorithm::automatic);
  deep_request.optimized_candidate_follows = true;
  KernelOrReason deep = winograd_backend().create_kernel(deep_request, std::span(&deep_out, 1));
  ASSERT_EQ(deep.kernel, nullptr);
  EXPECT_EQ(deep.refusal.kind, RefusalKind::predicted_slower);
  EXPECT_NE(deep.refusal.detail.find("of a direct convolution's time on this layer"), std::string::npos)
      << deep.refusal.detail;
  // Against the reference convolution alone (oneDNN disabled, or refused in deterministic mode) it
  // takes the layer.
  deep_request.optimized_candidate_follows = false;
  EXPECT_NE(winograd_backend().create_kernel(deep_request, std::span(&deep_out, 1)).kernel, nullptr);

  // Dilated: fcn_resnet50's dilation 2 on 28x28 tiles its 4 phases with no more tiles than an
  // undilated layer; deeplab's dilation 12 on 14x14 needs 144 mostly empty tiles for 196 outputs.
  const Tensor dilated_filters = he_weights(64, 64, 3);
  for (const auto& [dilation, size, taken] :
       {std::tuple<int64_t, int64_t, bool>{2, 28, true}, {12, 14, false}}) {
    const Attributes dilated = testing::conv_attrs({3, 3}, {1, 1}, {dilation, dilation, dilation, dilation},
                                                   1, {dilation, dilation});
    const TensorInfo dilated_out{DType::f32, {1, 64, size, size}, {}};
    KernelRequest request = conv_request(64, size, dilated, dilated_filters, ConvAlgorithm::automatic);
    request.optimized_candidate_follows = true;
    KernelOrReason offer = winograd_backend().create_kernel(request, std::span(&dilated_out, 1));
    EXPECT_EQ(offer.kernel != nullptr, taken) << "dilation " << dilation << ": " << offer.refusal.detail;
    if (offer.kernel) {
      EXPECT_NE(offer.note.find("dilation 2: "), std::string::npos) << offer.note;
    } else {
      EXPECT_EQ(offer.refusal.kind, RefusalKind::predicted_slower);
    }
  }

  // Planning times nothing and names its rule.
  const auto plan = Plan::build(residual_block(), {{1, 32, 12, 12}});
  for (const PlanStep& step : plan->steps()) {
    EXPECT_TRUE(step.record.decision.timed.empty()) << step.record.node_name;
    EXPECT_EQ(step.record.decision.rule, DecisionRule::first_offer);
  }
}

// Under autotune Winograd's tiles are timed with the direct kernels, from cold caches, and the
// slower ones say so; deterministic mode takes no choice by timing.
TEST(WinogradBackend, AutotuneTimesWinogradAgainstTheDirectKernel) {
  KILN_SKIP_UNLESS_BUILT("winograd");
  // A Conv alone: every build has a direct kernel for it (native's at least), so Winograd's offer is
  // timed against one. (Fused with a Relu, a native-only build's Winograd would be the only offer.)
  testing::GraphBuilder g({1, 32, 12, 12});
  const std::string conv = g.add("Conv", {"x", g.weights({32, 32, 3, 3}, std::sqrt(3.0f * 2.0f / (32 * 9)))},
                                 testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
  const Model model = g.finish({conv});
  choice_cache().clear();
  Settings autotune = current_settings();
  autotune.set_by_name("autotune", 1).set_by_name("autotune_limit", 0);
  const auto plan = Plan::build(model, {{1, 32, 12, 12}}, {}, autotune);
  const auto is_conv = [](const PlanStep& step) { return step.record.op_type == "Conv"; };
  const auto found = std::find_if(plan->steps().begin(), plan->steps().end(), is_conv);
  ASSERT_NE(found, plan->steps().end());
  const PlanStep& first = *found;
  EXPECT_EQ(first.record.decision.rule, DecisionRule::autotune);
  bool winograd_timed = false;
  for (const TimedCandidate& timed : first.record.decision.timed)
    winograd_timed = winograd_timed || timed.kernel.starts_with("winograd:");
  EXPECT_TRUE(winograd_timed);
  bool slower = false;
  for (const Refusal& refusal : first.record.decision.refusals)
    slower = slower || refusal.kind == RefusalKind::autotune_slower;
  EXPECT_TRUE(slower);
  const auto deterministic =
      Plan::build(model, {{1, 32, 12, 12}}, {}, Settings(autotune).set(SettingKey("deterministic"), 1));
  for (const PlanStep& step : deterministic->steps())
    EXPECT_TRUE(step.record.decision.timed.empty()) << step.record.node_name;
  choice_cache().clear();
}

}  // namespace
}  // namespace kiln
