// The native SGEMM and Conv kernels against straightforward loops in double, over shapes that reach
// every path: the small-M kernel, partial register blocks, K blocks, transposes, alpha/beta and a
// row bias, prepacked A; depthwise 3x3 (stride 1 and 2), generic depthwise, grouped, pointwise and
// im2col convolutions with pads, strides and dilations. The isa_avx2.* and isa_baseline.* runs
// (tests/CMakeLists.txt) repeat them with KILN_ISA set, so every compiled variant is checked on a
// CPU that has the widest one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/native/gemm.h"
#include "core/tensor.h"
#include "graph_builder.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::conv_attrs;
using testing::OpRun;
using testing::run_op;
using testing::sample_values;

// Float32 results may differ from the double reference by a few ulps of the sum of |terms|.
constexpr double kRelativeTolerance = 1e-5;

struct GemmCase {
  int64_t m, n, k;
  bool transpose_a, transpose_b;
  float alpha, beta;
};

void PrintTo(const GemmCase& c, std::ostream* out) {
  *out << c.m << "x" << c.n << "x" << c.k << (c.transpose_a ? " A'" : "") << (c.transpose_b ? " B'" : "")
       << " alpha " << c.alpha << " beta " << c.beta;
}

class NativeGemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(NativeGemm, MatchesTheTripleLoop) {
  const GemmCase& c = GetParam();
  const int64_t lda = c.transpose_a ? c.m : c.k;
  const int64_t ldb = c.transpose_b ? c.k : c.n;
  const std::vector<float> a = sample_values(c.m * c.k, -1, 1, 3);
  const std::vector<float> b = sample_values(c.k * c.n, -1, 1, 5);
  const std::vector<float> c0 = sample_values(c.m * c.n, -1, 1, 7);
  std::vector<float> actual = c0, expected = c0;
  native::sgemm(c.transpose_a, c.transpose_b, {c.m, c.n, c.k}, c.alpha, a.data(), lda, b.data(), ldb, c.beta,
                actual.data(), c.n);
  native::sgemm_reference(c.transpose_a, c.transpose_b, {c.m, c.n, c.k}, c.alpha, a.data(), lda, b.data(),
                          ldb, c.beta, expected.data(), c.n);
  // Every |a| and |b| is at most 1, so each sum of |terms| is at most k.
  const double tolerance = kRelativeTolerance * static_cast<double>(c.k + 1);
  for (int64_t i = 0; i < c.m * c.n; ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, NativeGemm,
    ::testing::Values(GemmCase{1, 1, 1, false, false, 1, 0},
                      GemmCase{3, 37, 21, false, false, 1, 0},  // small M (a Linear at batch 1)
                      GemmCase{4, 50, 300, false, true, 0.5f, 1.5f},
                      GemmCase{5, 31, 19, true, false, 1, 1},   // partial register blocks
                      GemmCase{17, 40, 300, true, true, 2, 0},  // two K blocks
                      GemmCase{64, 64, 64, false, false, 1, 0},
                      GemmCase{100, 290, 513, false, true, 1, -1}));  // several column tasks

TEST(NativeGemm, PrepackedAWithRowBiasMatchesTheTripleLoop) {
  const int64_t m = 37, n = 45, k = 300;
  const std::vector<float> a = sample_values(m * k, -1, 1, 11);
  const std::vector<float> b = sample_values(k * n, -1, 1, 13);
  const std::vector<float> bias = sample_values(m, -1, 1, 17);
  const native::PackedA packed(false, m, k, a.data(), k);
  std::vector<float> actual(static_cast<size_t>(m * n));
  native::sgemm_packed(packed, native::MatrixB(b.data(), n, false), n, actual.data(), n,
                       native::GemmEpilogue{1.0f, 0.0f, bias.data()});
  std::vector<float> expected(actual.size());
  native::sgemm_reference(false, false, {m, n, k}, 1.0f, a.data(), k, b.data(), n, 0.0f, expected.data(), n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_NEAR(actual[i * n + j], expected[i * n + j] + bias[i], kRelativeTolerance * (k + 1))
          << i << ", " << j;
    }
  }
}

struct ConvCase {
  Shape input;  // N, C, H, W
  int64_t out_channels;
  std::vector<int64_t> kernel, strides, pads, dilations;
  int64_t group;
  bool bias;
};

void PrintTo(const ConvCase& c, std::ostream* out) {
  *out << shape_to_compact_string(c.input) << " -> " << c.out_channels << " kernel "
       << shape_to_compact_string(c.kernel) << " strides " << shape_to_compact_string(c.strides) << " pads "
       << shape_to_compact_string(c.pads) << " dilations " << shape_to_compact_string(c.dilations)
       << " group " << c.group;
}

// The convolution the slow way, in double; also the sum of |terms| of each output, for the tolerance.
void reference_conv(const ConvCase& c, const std::vector<float>& x, const std::vector<float>& w,
                    const std::vector<float>& bias, const Shape& out_shape, std::vector<double>& y,
                    std::vector<double>& magnitude) {
  const int64_t batch = c.input[0], channels = c.input[1], height = c.input[2], width = c.input[3];
  const int64_t out_h = out_shape[2], out_w = out_shape[3];
  const int64_t in_per_group = channels / c.group, out_per_group = c.out_channels / c.group;
  y.assign(static_cast<size_t>(batch * c.out_channels * out_h * out_w), 0.0);
  magnitude = y;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t oc = 0; oc < c.out_channels; ++oc) {
      const int64_t g = oc / out_per_group;
      for (int64_t oh = 0; oh < out_h; ++oh) {
        for (int64_t ow = 0; ow < out_w; ++ow) {
          double sum = c.bias ? bias[oc] : 0.0, size = std::abs(sum);
          for (int64_t ic = 0; ic < in_per_group; ++ic) {
            for (int64_t kh = 0; kh < c.kernel[0]; ++kh) {
              for (int64_t kw = 0; kw < c.kernel[1]; ++kw) {
                const int64_t ih = oh * c.strides[0] - c.pads[0] + kh * c.dilations[0];
                const int64_t iw = ow * c.strides[1] - c.pads[1] + kw * c.dilations[1];
                if (ih < 0 || ih >= height || iw < 0 || iw >= width) continue;
                const double term =
                    static_cast<double>(
                        x[((n * channels + g * in_per_group + ic) * height + ih) * width + iw]) *
                    w[((oc * in_per_group + ic) * c.kernel[0] + kh) * c.kernel[1] + kw];
                sum += term;
                size += std::abs(term);
              }
            }
          }
          const size_t index = static_cast<size_t>(((n * c.out_channels + oc) * out_h + oh) * out_w + ow);
          y[index] = sum;
          magnitude[index] = size;
        }
      }
    }
  }
}

class NativeConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(NativeConv, MatchesTheDirectLoopWithConstantAndRuntimeWeights) {
  const ConvCase& c = GetParam();
  const Shape w_shape{c.out_channels, c.input[1] / c.group, c.kernel[0], c.kernel[1]};
  const std::vector<float> x = sample_values(checked_numel(c.input), -1, 1, 19);
  const std::vector<float> w = sample_values(checked_numel(w_shape), -1, 1, 23);
  const std::vector<float> bias = sample_values(c.out_channels, -1, 1, 29);
  for (bool constant_weights : {true, false}) {  // prepacked weights, and weights packed per run
    OpRun run;
    run.op_type = "Conv";
    run.attributes = conv_attrs(c.kernel, c.strides, c.pads, c.group, c.dilations);
    run.inputs = {Tensor::from_vector(x, c.input), Tensor::from_vector(w, w_shape)};
    if (c.bias) run.inputs.push_back(Tensor::from_vector(bias, {c.out_channels}));
    run.inputs_are_constants = constant_weights;
    const Tensor y = run_op(run).at(0);
    std::vector<double> expected, magnitude;
    reference_conv(c, x, w, bias, y.shape(), expected, magnitude);
    ASSERT_EQ(static_cast<size_t>(y.numel()), expected.size());
    const std::span<const float> actual = y.values<float>();
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_NEAR(actual[i], expected[i], kRelativeTolerance * (magnitude[i] + 1))
          << "element " << i << (constant_weights ? " (constant weights)" : " (runtime weights)");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, NativeConv,
    ::testing::Values(
        ConvCase{{2, 8, 13, 11}, 8, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 8, true},  // depthwise 3x3
        ConvCase{
            {1, 16, 14, 15}, 16, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 16, true},  // depthwise 3x3 stride 2
        ConvCase{{1, 6, 12, 12}, 6, {5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 6, false},  // depthwise 5x5
        ConvCase{{1, 4, 12, 12}, 4, {3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 4, true},   // depthwise dilated
        ConvCase{{2, 8, 9, 10}, 12, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2, true},   // grouped
        ConvCase{{1, 24, 7, 9}, 40, {1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, true},   // pointwise
        ConvCase{
            {2, 3, 17, 15}, 17, {3, 3}, {2, 2}, {0, 1, 1, 0}, {1, 1}, 1, true},  // im2col, asymmetric pads
        ConvCase{
            {1, 5, 16, 16}, 7, {3, 2}, {1, 2}, {2, 1, 2, 1}, {2, 3}, 1, false}));  // dilated, rectangular
}  // namespace
}  // namespace kiln
