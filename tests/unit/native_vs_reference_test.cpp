// The tuned native kernels against the plain loops of backends/native/ref/, swept over the shapes
// that reach every path: GEMM's small-M kernel, register blocks cut at the edges (m, n not multiples
// of mr, nr), K just past a cache block, transposes, alpha/beta, a row bias and prepacked A; Conv's
// depthwise, grouped, pointwise and im2col paths with pads, strides and dilations, with constant and
// run-time weights; max and average pooling with pads, ceil_mode, count_include_pad and dilations.
// The channels-last grouped kernel (four and eight channels per group, 3x3) with its fused
// activations, and the convolutions it refuses. Each runs at 1 and 2 threads. The isa_avx2.* and
// isa_baseline.* runs (tests/CMakeLists.txt) repeat them with KILN_ISA set, so every compiled variant
// is checked on a CPU that has the widest. Shapes stay small (at most 256 channels, 16x16) so the
// sweep is quick under the sanitizers too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/native/gemm.h"
#include "backends/native/grouped_conv.h"
#include "backends/native/ref/reference.h"
#include "core/tensor.h"
#include "graph_builder.h"
#include "op_test_util.h"
#include "runtime/cpu_info.h"
#include "runtime/threads.h"

namespace kiln {
namespace {

using testing::conv_attrs;
using testing::int_attr;
using testing::ints_attr;
using testing::OpRun;
using testing::run_op;
using testing::sample_values;

// A float32 result may differ from the double reference by a few ulps of the sum of |terms|.
constexpr double kRelativeTolerance = 1e-5;
constexpr int kThreadCounts[] = {1, 2};

void expect_close(std::span<const float> actual, const native::ref::Values& expected,
                  const std::string& where) {
  ASSERT_EQ(actual.size(), expected.value.size()) << where;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected.value[i], kRelativeTolerance * (expected.magnitude[i] + 1))
        << where << ", element " << i;
  }
}

// ---- GEMM ------------------------------------------------------------------------------------

struct GemmCase {
  int64_t m, n, k;
  bool transpose_a, transpose_b;
  float alpha, beta;
};

std::string describe(const GemmCase& c) {
  return str_cat(c.m, "x", c.n, "x", c.k, c.transpose_a ? " A'" : "", c.transpose_b ? " B'" : "", " alpha ",
                 c.alpha, " beta ", c.beta);
}

// Edges of every micro-kernel's register block (mr 14/6/4 rows, nr 32/16/8 columns for AVX-512,
// AVX2, baseline), the small-M path (m <= 4 untransposed), and K across the 256-deep cache block.
std::vector<GemmCase> gemm_cases() {
  std::vector<GemmCase> cases;
  for (int64_t m : {1, 4, 5, 7, 14, 15, 29})
    for (int64_t n : {1, 9, 16, 17, 33, 47})
      for (int64_t k : {1, 19, 257})
        for (int transposes = 0; transposes < 4; ++transposes) {
          const bool beta = (m + n + k + transposes) % 2 == 0;
          cases.push_back({m, n, k, (transposes & 1) != 0, (transposes & 2) != 0, beta ? 0.5f : 1.0f,
                           beta ? 1.5f : 0.0f});
        }
  return cases;
}

TEST(NativeGemmVsReference, EveryEdgeTileTransposeAndKBlock) {
  const std::vector<float> values = sample_values(29 * 257 + 47 * 257 + 29 * 47, -1, 1, 3);
  for (int threads : kThreadCounts) {
    const ScopedIntraOpThreads scoped(threads);
    for (const GemmCase& c : gemm_cases()) {
      const float* a = values.data();
      const float* b = a + 29 * 257;
      const std::vector<float> c0(values.end() - c.m * c.n, values.end());
      const int64_t lda = c.transpose_a ? c.m : c.k;
      const int64_t ldb = c.transpose_b ? c.k : c.n;
      std::vector<float> actual = c0;
      native::sgemm(c.transpose_a, c.transpose_b, {c.m, c.n, c.k}, c.alpha, a, lda, b, ldb, c.beta,
                    actual.data(), c.n);
      expect_close(actual,
                   native::ref::gemm(c.transpose_a, c.transpose_b, c.m, c.n, c.k, c.alpha, a, lda, b, ldb,
                                     c.beta, c0.data(), c.n),
                   str_cat(describe(c), ", ", threads, " threads"));
    }
  }
}

TEST(NativeGemmVsReference, PrepackedAWithRowBias) {
  for (int threads : kThreadCounts) {
    const ScopedIntraOpThreads scoped(threads);
    for (int64_t m : {3, 14, 31}) {
      for (int64_t k : {5, 257}) {
        const int64_t n = 45;
        const std::vector<float> a = sample_values(m * k, -1, 1, 11);
        const std::vector<float> b = sample_values(k * n, -1, 1, 13);
        const std::vector<float> bias = sample_values(m, -1, 1, 17);
        const native::PackedA packed(false, m, k, a.data(), k);
        std::vector<float> actual(static_cast<size_t>(m * n));
        native::sgemm_packed(packed, native::MatrixB(b.data(), n, false), n, actual.data(), n,
                             native::GemmEpilogue{1.0f, 0.0f, bias.data()});
        native::ref::Values expected =
            native::ref::gemm(false, false, m, n, k, 1, a.data(), k, b.data(), n, 0, nullptr, n);
        for (int64_t i = 0; i < m * n; ++i)
          expected.value[static_cast<size_t>(i)] += bias[static_cast<size_t>(i / n)];
        expect_close(actual, expected, str_cat(m, "x", n, "x", k, ", ", threads, " threads"));
      }
    }
  }
}

// A row-major A read in place (rows past k in each row ignored), against a prepacked B slice and a
// matrix B, with alpha, beta and a row bias: rows and columns cut at the register block's edges, K
// across the 256-deep block.
TEST(NativeGemmVsReference, RowMajorAReadInPlace) {
  for (int threads : kThreadCounts) {
    const ScopedIntraOpThreads scoped(threads);
    for (int64_t m : {1, 6, 14, 29}) {
      for (int64_t k : {7, 64, 300}) {
        const int64_t n = 45;
        const int64_t lda = k + 9;
        const std::vector<float> a = sample_values(m * lda, -1, 1, 11);
        const std::vector<float> b = sample_values(k * n, -1, 1, 13);
        const std::vector<float> bias = sample_values(m, -1, 1, 17);
        const std::vector<float> c0 = sample_values(m * n, -1, 1, 19);
        std::vector<float> storage(static_cast<size_t>(native::PackedB::floats(k, n)));
        const native::PackedB packed(false, k, n, b.data(), n, storage.data());
        const std::string where = str_cat(m, "x", n, "x", k, ", ", threads, " threads");
        // Into a prepacked B, plain.
        std::vector<float> actual(static_cast<size_t>(m * n));
        native::sgemm_rows(a.data(), lda, m, k, packed, n, actual.data(), n, native::GemmEpilogue{});
        expect_close(actual,
                     native::ref::gemm(false, false, m, n, k, 1, a.data(), lda, b.data(), n, 0, nullptr, n),
                     where);
        // Into a matrix B, with alpha, beta and a row bias.
        actual = c0;
        native::sgemm_rows(a.data(), lda, m, k, native::MatrixB(b.data(), n, false), n, actual.data(), n,
                           native::GemmEpilogue{0.5f, 2.0f, bias.data()});
        native::ref::Values expected =
            native::ref::gemm(false, false, m, n, k, 0.5f, a.data(), lda, b.data(), n, 2.0f, c0.data(), n);
        for (int64_t i = 0; i < m * n; ++i)
          expected.value[static_cast<size_t>(i)] += bias[static_cast<size_t>(i / n)];
        expect_close(actual, expected, where + ", alpha beta bias");
      }
    }
  }
}

// Up to kGemmSmallRows rows of A against a prepacked B (a recurrent step), alone or after full
// register blocks: every row count, columns
// cut inside a sliver and across tiles of slivers, K across the 256-deep block, alpha, beta, a bias.
TEST(NativeGemmVsReference, FewRowsAgainstAPrepackedB) {
  for (int threads : kThreadCounts) {
    const ScopedIntraOpThreads scoped(threads);
    // 16 and 31: a register block of 14 (AVX-512) or 6 rows and a few more.
    for (int64_t m : {1, 2, 3, 4, 16, 31}) {
      for (int64_t k : {5, 256, 300}) {
        for (int64_t n : {7, 40, 300}) {
          const int64_t lda = k + 3;
          const std::vector<float> a = sample_values(m * lda, -1, 1, 23);
          const std::vector<float> b = sample_values(k * n, -1, 1, 29);  // B^T: n x k
          const std::vector<float> bias = sample_values(m, -1, 1, 31);
          const std::vector<float> c0 = sample_values(m * n, -1, 1, 37);
          std::vector<float> storage(static_cast<size_t>(native::PackedB::floats(k, n)));
          const native::PackedB packed(true, k, n, b.data(), k, storage.data());
          std::vector<float> actual = c0;
          native::sgemm(false, m, a.data(), lda, packed, actual.data(), n,
                        native::GemmEpilogue{0.5f, 2.0f, bias.data()});
          native::ref::Values expected =
              native::ref::gemm(false, true, m, n, k, 0.5f, a.data(), lda, b.data(), k, 2.0f, c0.data(), n);
          for (int64_t i = 0; i < m * n; ++i)
            expected.value[static_cast<size_t>(i)] += bias[static_cast<size_t>(i / n)];
          expect_close(actual, expected, str_cat(m, "x", n, "x", k, ", ", threads, " threads"));
        }
      }
    }
  }
}

// ---- Conv ------------------------------------------------------------------------------------

struct ConvCase {
  Shape input;  // N, C, H, W
  int64_t out_channels;
  std::vector<int64_t> kernel, strides, pads, dilations;
  int64_t group;
  bool bias;
};

std::string describe(const ConvCase& c) {
  return str_cat(shape_to_compact_string(c.input), " -> ", c.out_channels, " kernel ",
                 shape_to_compact_string(c.kernel), " strides ", shape_to_compact_string(c.strides), " pads ",
                 shape_to_compact_string(c.pads), " dilations ", shape_to_compact_string(c.dilations),
                 " group ", c.group);
}

// Depthwise (the 3x3 fast paths at stride 1 and 2, and the generic one), grouped, pointwise and
// im2col convolutions, each with and without pads, strides and dilations.
std::vector<ConvCase> conv_cases() {
  std::vector<ConvCase> cases;
  struct Grouping {
    int64_t channels, out_channels, group;
  };
  const Grouping groupings[] = {{8, 8, 8}, {8, 12, 2}, {5, 7, 1}, {24, 32, 1}};
  const std::vector<int64_t> kernels[] = {{1, 1}, {3, 3}, {5, 3}};
  for (const Grouping& g : groupings)
    for (const std::vector<int64_t>& kernel : kernels)
      for (int64_t stride : {1, 2})
        for (int64_t dilation : {1, 2})
          for (bool padded : {false, true}) {
            const std::vector<int64_t> pads =
                padded ? std::vector<int64_t>{1, 2, 2, 1} : std::vector<int64_t>{0, 0, 0, 0};
            const int64_t height = 13 + stride, width = 11;
            cases.push_back({{stride == 1 ? 2 : 1, g.channels, height, width},
                             g.out_channels,
                             kernel,
                             {stride, stride},
                             pads,
                             {dilation, dilation},
                             g.group,
                             (stride + dilation) % 2 == 0});
          }
  cases.push_back(
      {{1, 16, 16, 16}, 16, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 16, true});  // depthwise 3x3 stride 2
  cases.push_back({{1, 32, 8, 8}, 32, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 32, true});  // depthwise 3x3
  // Taps mostly in the padding (ops/conv.h's live share at most 1/2), which constant weights run
  // tap by tap over the live positions: DeepLab's dilation 12 on 14x14, a stride, a 5x3 kernel
  // whose middle taps cover every output, batch 2.
  cases.push_back({{1, 24, 14, 14}, 16, {3, 3}, {1, 1}, {12, 12, 12, 12}, {12, 12}, 1, true});
  cases.push_back({{2, 5, 6, 7}, 7, {3, 3}, {1, 1}, {6, 6, 6, 6}, {6, 6}, 1, false});
  cases.push_back({{1, 8, 9, 9}, 12, {3, 3}, {2, 2}, {6, 6, 6, 6}, {6, 6}, 1, true});
  cases.push_back({{2, 6, 10, 8}, 9, {5, 3}, {1, 1}, {6, 4, 6, 4}, {3, 4}, 1, true});
  return cases;
}

ConvParams conv_params_of(const ConvCase& c, const Shape& w_shape, const Attributes& attributes) {
  OpSpec spec;
  spec.op_type = "Conv";
  spec.opset = 17;
  spec.attributes = &attributes;
  spec.inputs = {TensorInfo{DType::f32, c.input, {}}, TensorInfo{DType::f32, w_shape, {}}};
  return conv_params(spec);
}

TEST(NativeConvVsReference, DepthwiseGroupedPointwiseAndIm2colWithPadsStridesDilations) {
  for (const ConvCase& c : conv_cases()) {
    const Shape w_shape{c.out_channels, c.input[1] / c.group, c.kernel[0], c.kernel[1]};
    const Tensor x = Tensor::from_vector(sample_values(checked_numel(c.input), -1, 1, 19), c.input);
    const Tensor w = Tensor::from_vector(sample_values(checked_numel(w_shape), -1, 1, 23), w_shape);
    const Tensor bias =
        c.bias ? Tensor::from_vector(sample_values(c.out_channels, -1, 1, 29), {c.out_channels}) : Tensor{};
    const Attributes attributes = conv_attrs(c.kernel, c.strides, c.pads, c.group, c.dilations);
    const native::ref::Values expected =
        native::ref::conv(x, w, bias, conv_params_of(c, w_shape, attributes));
    for (int threads : kThreadCounts) {
      const ScopedIntraOpThreads scoped(threads);
      for (bool constant_weights : {true, false}) {  // prepacked weights, and weights packed per run
        OpRun run;
        run.op_type = "Conv";
        run.attributes = attributes;
        run.inputs = {x, w};
        if (c.bias) run.inputs.push_back(bias);
        run.inputs_are_constants = constant_weights;
        expect_close(run_op(run).at(0).values<float>(), expected,
                     str_cat(describe(c), constant_weights ? ", constant" : ", run-time", " weights, ",
                             threads, " threads"));
      }
    }
  }
}

// ---- Channels-last grouped Conv -----------------------------------------------------------------

// [N, C, H, W] values stored as [N, H, W, C], and back.
std::vector<float> to_channels_last(const std::vector<float>& plain, const Shape& shape) {
  const int64_t n = shape[0], c = shape[1], hw = shape[2] * shape[3];
  std::vector<float> stored(plain.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t p = 0; p < hw; ++p) stored[(i * hw + p) * c + k] = plain[(i * c + k) * hw + p];
  return stored;
}

// The request the planner makes for a grouped Conv reading a channels-last value.
KernelRequest grouped_request(const Shape& input, const Tensor& w, const Tensor& bias,
                              const Attributes& attributes) {
  KernelRequest request;
  request.op.op_type = "Conv";
  request.op.opset = 17;
  request.op.attributes = &attributes;
  request.op.inputs = {TensorInfo{DType::f32, input, {}}, TensorInfo{DType::f32, w.shape(), w}};
  if (bias.defined()) request.op.inputs.push_back(TensorInfo{DType::f32, bias.shape(), bias});
  request.input_layouts = {Layout::nhwc};
  return request;
}

TEST(NativeGroupedConvVsReference, FourAndEightChannelsPerGroupWithEdgesBiasAndActivations) {
  if (isa_in_effect() < Isa::avx512) {
    // The documented fallback: refused as unavailable, so oneDNN (or the reference) runs the node.
    const Attributes attributes = conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, 4);
    const Tensor w = Tensor::from_vector(sample_values(16 * 4 * 9, -1, 1, 3), {16, 4, 3, 3});
    const std::optional<Refusal> refusal =
        native::grouped_conv_refusal(grouped_request({1, 16, 5, 5}, w, {}, attributes));
    ASSERT_TRUE(refusal.has_value());
    EXPECT_EQ(refusal->kind, RefusalKind::unavailable);
    GTEST_SKIP() << "the channels-last grouped kernel needs the avx512 tier";
  }
  struct Case {
    int64_t group_width;
    Shape input;
    bool bias;
    std::vector<PostOp> post_ops;
  };
  PostOp relu;
  PostOp clip;
  clip.kind = PostOp::Kind::clip;
  clip.alpha = -0.5f;
  clip.beta = 0.25f;
  // Rows shorter than a block, rows of whole blocks and of every remainder, one-pixel maps; 2 to 32
  // groups of eight, odd counts among them.
  const std::vector<Case> cases = {
      {4, {1, 16, 1, 1}, false, {}},
      {4, {1, 16, 1, 5}, true, {relu}},
      {4, {2, 32, 7, 7}, true, {}},
      {4, {1, 48, 9, 13}, true, {clip}},
      {4, {1, 16, 16, 3}, false, {relu, clip}},
      {4, {2, 16, 3, 6}, true, {clip, relu}},
      {4, {1, 128, 12, 10}, true, {relu}},
      {8, {1, 16, 1, 1}, false, {}},
      {8, {1, 24, 1, 5}, true, {relu}},
      {8, {2, 24, 7, 7}, true, {}},
      {8, {1, 16, 9, 13}, true, {clip}},
      {8, {1, 40, 16, 3}, false, {relu, clip}},
      {8, {2, 16, 3, 6}, true, {clip, relu}},
      {8, {1, 256, 6, 10}, true, {relu}},
  };
  for (const Case& c : cases) {
    const int64_t channels = c.input[1];
    const int64_t groups = channels / c.group_width;
    const Shape w_shape{channels, c.group_width, 3, 3};
    const Attributes attributes = conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, groups);
    const Tensor x = Tensor::from_vector(sample_values(checked_numel(c.input), -1, 1, 37), c.input);
    const Tensor w = Tensor::from_vector(sample_values(checked_numel(w_shape), -1, 1, 41), w_shape);
    const Tensor bias =
        c.bias ? Tensor::from_vector(sample_values(channels, -1, 1, 43), {channels}) : Tensor{};
    native::ref::Values expected = native::ref::conv(
        x, w, bias,
        conv_params_of({c.input, channels, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, groups, c.bias}, w_shape,
                       attributes));
    for (const PostOp& op : c.post_ops) {
      for (double& v : expected.value) {
        v = op.kind == PostOp::Kind::relu ? std::max(v, 0.0)
                                          : std::min(std::max(v, double{op.alpha}), double{op.beta});
      }
    }
    KernelRequest request = grouped_request(c.input, w, bias, attributes);
    request.post_ops = c.post_ops;
    const std::string where =
        str_cat(describe({c.input, channels, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, groups, c.bias}), ", ",
                c.post_ops.size(), " post-ops");
    ASSERT_FALSE(native::grouped_conv_refusal(request).has_value()) << where;
    const TensorInfo output{DType::f32, c.input, {}};
    KernelOrReason made = native::make_channels_last_grouped_conv(request, {&output, 1});
    ASSERT_NE(made.kernel, nullptr) << where;
    EXPECT_EQ(made.kernel->input_layout(0), Layout::nhwc);
    EXPECT_EQ(made.kernel->output_layout(0), Layout::nhwc);
    const Shape stored{c.input[0], c.input[2], c.input[3], c.input[1]};
    const Tensor input = Tensor::from_vector(
        to_channels_last(std::vector<float>(x.values<float>().begin(), x.values<float>().end()), c.input),
        stored);
    native::ref::Values expected_stored = expected;
    {
      std::vector<float> plain(expected.value.begin(), expected.value.end());
      const std::vector<float> moved = to_channels_last(plain, c.input);
      std::vector<float> magnitude(expected.magnitude.begin(), expected.magnitude.end());
      const std::vector<float> moved_magnitude = to_channels_last(magnitude, c.input);
      expected_stored.value.assign(moved.begin(), moved.end());
      expected_stored.magnitude.assign(moved_magnitude.begin(), moved_magnitude.end());
    }
    for (int threads : kThreadCounts) {
      const ScopedIntraOpThreads scoped(threads);
      Tensor result = Tensor::empty(DType::f32, stored);
      std::vector<Tensor> inputs = {input, w};
      if (c.bias) inputs.push_back(bias);
      made.kernel->run(inputs, {&result, 1});
      expect_close(result.values<float>(), expected_stored, str_cat(where, ", ", threads, " threads"));
    }
  }
}

TEST(NativeGroupedConvVsReference, RefusesWhatItDoesNotRun) {
  const Tensor w4 = Tensor::from_vector(sample_values(16 * 4 * 9, -1, 1, 3), {16, 4, 3, 3});
  const Tensor w8 = Tensor::from_vector(sample_values(16 * 8 * 9, -1, 1, 3), {16, 8, 3, 3});
  const Tensor w2 = Tensor::from_vector(sample_values(16 * 2 * 9, -1, 1, 3), {16, 2, 3, 3});
  const Tensor w4_of_8 = Tensor::from_vector(sample_values(8 * 4 * 9, -1, 1, 3), {8, 4, 3, 3});
  const Tensor w8_of_8 = Tensor::from_vector(sample_values(8 * 8 * 9, -1, 1, 3), {8, 8, 3, 3});
  const Tensor w8_of_24 = Tensor::from_vector(sample_values(24 * 8 * 9, -1, 1, 3), {24, 8, 3, 3});
  const Attributes grouped = conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, 4);
  const Attributes strided = conv_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}, 4);
  const Attributes unpadded = conv_attrs({3, 3}, {1, 1}, {0, 0, 0, 0}, 4);
  const Attributes dilated = conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, 4, {2, 2});
  const Attributes eight = conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, 2);
  const Attributes two = conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, 8);
  const Shape input{1, 16, 8, 8};
  // Below the AVX-512 tier every request is refused as unavailable (the test above checks it).
  if (isa_in_effect() < Isa::avx512) GTEST_SKIP() << "the channels-last grouped kernel needs the avx512 tier";
  const auto kind = [](const KernelRequest& request) {
    const std::optional<Refusal> refusal = native::grouped_conv_refusal(request);
    return refusal ? std::optional<RefusalKind>(refusal->kind) : std::nullopt;
  };
  EXPECT_EQ(kind(grouped_request(input, w4, {}, grouped)), std::nullopt);
  for (const Attributes* attributes : {&strided, &unpadded, &dilated}) {
    EXPECT_EQ(kind(grouped_request(input, w4, {}, *attributes)), RefusalKind::unsupported_attribute);
  }
  EXPECT_EQ(kind(grouped_request(input, w8, {}, eight)), std::nullopt);
  EXPECT_EQ(kind(grouped_request(input, w2, {}, two)), RefusalKind::unsupported_attribute);
  // Groups of four need channels in 16s; groups of eight do not (three of them: 24 channels).
  EXPECT_EQ(kind(grouped_request({1, 8, 8, 8}, w4_of_8, {}, eight)), RefusalKind::unsupported_shape);
  EXPECT_EQ(kind(grouped_request({1, 24, 8, 8}, w8_of_24, {}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, 3))),
            std::nullopt);
  // One group is an ordinary convolution, not this kernel's.
  EXPECT_EQ(kind(grouped_request({1, 8, 8, 8}, w8_of_8, {}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, 1))),
            RefusalKind::unsupported_attribute);
  KernelRequest plain = grouped_request(input, w4, {}, grouped);
  plain.input_layouts = {Layout::plain};
  EXPECT_EQ(kind(plain), RefusalKind::unsupported_layout);
  KernelRequest bf16 = grouped_request(input, w4, {}, grouped);
  bf16.precision = Precision::bf16;
  EXPECT_EQ(kind(bf16), RefusalKind::unsupported_dtype);
  KernelRequest summed = grouped_request(input, w4, {}, grouped);
  PostOp sum;
  sum.kind = PostOp::Kind::sum;
  summed.post_ops = {sum};
  EXPECT_EQ(kind(summed), RefusalKind::unsupported_fusion);
  KernelRequest varying = grouped_request(input, w4, {}, grouped);
  varying.op.inputs[1].value = Tensor{};
  EXPECT_EQ(kind(varying), RefusalKind::not_constant);
}

// A NaN in the input reaches every output it touches, with and without a fused Relu or Clip, as
// native's own Relu and Clip pass it.
TEST(NativeGroupedConvVsReference, NanPassesThrough) {
  if (isa_in_effect() < Isa::avx512) GTEST_SKIP() << "the channels-last grouped kernel needs the avx512 tier";
  const Shape input{1, 16, 1, 3};
  PostOp relu;
  PostOp clip;
  clip.kind = PostOp::Kind::clip;
  clip.alpha = -0.5f;
  clip.beta = 0.25f;
  std::vector<float> stored(48, 0.5f);
  stored[0] = std::numeric_limits<float>::quiet_NaN();  // pixel 0, channel 0: group 0's input
  const Tensor x = Tensor::from_vector(stored, {1, 1, 3, 16});
  for (int64_t group_width : {4, 8}) {
    const Attributes attributes = conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, 16 / group_width);
    const Tensor w =
        Tensor::from_vector(sample_values(16 * group_width * 9, -1, 1, 3), {16, group_width, 3, 3});
    for (const std::vector<PostOp>& post_ops :
         {std::vector<PostOp>{}, std::vector<PostOp>{relu}, std::vector<PostOp>{clip}}) {
      KernelRequest request = grouped_request(input, w, {}, attributes);
      request.post_ops = post_ops;
      const TensorInfo output{DType::f32, input, {}};
      KernelOrReason made = native::make_channels_last_grouped_conv(request, {&output, 1});
      ASSERT_NE(made.kernel, nullptr);
      Tensor result = Tensor::empty(DType::f32, {1, 1, 3, 16});
      std::vector<Tensor> inputs = {x, w};
      made.kernel->run(inputs, {&result, 1});
      const std::span<const float> values = result.values<float>();
      const std::string where = str_cat(group_width, " channels per group, ", post_ops.size(), " post-ops");
      for (int64_t pixel : {0, 1}) {  // the pixels whose window holds pixel 0
        for (int64_t channel = 0; channel < 16; ++channel) {
          const float value = values[static_cast<size_t>(pixel * 16 + channel)];
          EXPECT_EQ(std::isnan(value), channel < group_width)
              << "pixel " << pixel << ", channel " << channel << ", " << where;
        }
      }
      EXPECT_FALSE(std::isnan(values[2 * 16])) << where;  // pixel 2's window misses pixel 0
    }
  }
}

// ---- Pooling ---------------------------------------------------------------------------------

struct PoolCase {
  bool is_max;
  std::vector<int64_t> kernel, strides, pads, dilations;
  bool ceil_mode;
  bool count_include_pad;
};

std::string describe(const PoolCase& c) {
  return str_cat(c.is_max ? "MaxPool" : "AveragePool", " kernel ", shape_to_compact_string(c.kernel),
                 " strides ", shape_to_compact_string(c.strides), " pads ", shape_to_compact_string(c.pads),
                 " dilations ", shape_to_compact_string(c.dilations), c.ceil_mode ? " ceil" : "",
                 c.count_include_pad ? " count_include_pad" : "");
}

std::vector<PoolCase> pool_cases() {
  std::vector<PoolCase> cases;
  const std::vector<int64_t> kernels[] = {{2, 2}, {3, 3}, {3, 2}};
  for (bool is_max : {true, false})
    for (const std::vector<int64_t>& kernel : kernels)
      for (int64_t stride : {1, 2})
        for (bool padded : {false, true})
          for (bool ceil_mode : {false, true}) {
            const std::vector<int64_t> pads =
                padded ? std::vector<int64_t>{1, 0, 1, 1} : std::vector<int64_t>{0, 0, 0, 0};
            // Dilation is MaxPool's; count_include_pad AveragePool's.
            const int64_t dilation = is_max && stride == 1 ? 2 : 1;
            const bool include = !is_max && padded && stride == 2;
            cases.push_back(
                {is_max, kernel, {stride, stride}, pads, {dilation, dilation}, ceil_mode, include});
          }
  return cases;
}

TEST(NativePoolVsReference, MaxAndAverageWithPadsCeilModeAndDilations) {
  const Shape input{2, 3, 11, 10};
  const Tensor x = Tensor::from_vector(sample_values(checked_numel(input), -1, 1, 31), input);
  for (const PoolCase& c : pool_cases()) {
    OpRun run;
    run.op_type = c.is_max ? "MaxPool" : "AveragePool";
    run.attributes.set("kernel_shape", ints_attr(c.kernel));
    run.attributes.set("strides", ints_attr(c.strides));
    run.attributes.set("pads", ints_attr(c.pads));
    run.attributes.set("ceil_mode", int_attr(c.ceil_mode));
    if (c.is_max) run.attributes.set("dilations", ints_attr(c.dilations));
    if (!c.is_max) run.attributes.set("count_include_pad", int_attr(c.count_include_pad));
    run.inputs = {x};
    OpSpec spec;
    spec.op_type = run.op_type;
    spec.opset = 17;
    spec.attributes = &run.attributes;
    spec.inputs = {TensorInfo{DType::f32, input, {}}};
    const native::ref::Values expected = native::ref::pool(x, pool_params(spec), c.is_max);
    for (int threads : kThreadCounts) {
      const ScopedIntraOpThreads scoped(threads);
      expect_close(run_op(run).at(0).values<float>(), expected,
                   str_cat(describe(c), ", ", threads, " threads"));
    }
  }
}

}  // namespace
}  // namespace kiln
