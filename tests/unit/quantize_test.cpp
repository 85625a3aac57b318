// The quantization ops. QuantizeLinear's rounding (half to even), saturation and per-axis scales;
// DequantizeLinear; DynamicQuantizeLinear's range. The integer products against the plain loops of
// backends/native/ref/, bit for bit: ConvInteger's and MatMulInteger's int32 accumulators (u8 and s8
// operands, per-tensor and per-channel zero points, groups, pads, strides, dilations, sums that wrap),
// and QLinearConv / QLinearMatMul / com.microsoft QGemm as those accumulators requantized. The
// NativeQuantized* tests also run with KILN_ISA capped (tests/CMakeLists.txt), so every compiled dot-product
// variant is checked.
#include "ops/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/native/ref/reference.h"
#include "core/tensor.h"
#include "graph_builder.h"
#include "op_test_util.h"
#include "ops/op_schema.h"
#include "ops/quantize_math.h"
#include "runtime/cpu_info.h"
#include "runtime/threads.h"

#if KILN_WITH_ONEDNN
#include "backends/onednn/onednn_backend.h"
#endif

namespace kiln {
namespace {

using testing::conv_attrs;
using testing::error_of;
using testing::int_attr;
using testing::OpRun;
using testing::run_op;
using testing::sample_values;

constexpr int kThreadCounts[] = {1, 2};

template <typename T>
std::vector<T> values_of(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// Deterministic int8 or uint8 values spanning the type's whole range.
Tensor int8_tensor(DType dtype, const Shape& shape, uint32_t seed) {
  const std::vector<float> samples = sample_values(checked_numel(shape), 0, 255.99f, seed);
  if (dtype == DType::u8) {
    std::vector<uint8_t> values;
    for (float v : samples) values.push_back(static_cast<uint8_t>(v));
    return Tensor::from_vector(values, shape);
  }
  std::vector<int8_t> values;
  for (float v : samples) values.push_back(static_cast<int8_t>(static_cast<int>(v) - 128));
  return Tensor::from_vector(values, shape);
}

// A zero point tensor of `dtype` holding `values` (shape [] for one value, else [count]).
Tensor zero_points(DType dtype, const std::vector<int32_t>& values) {
  const Shape shape = values.size() == 1 ? Shape{} : Shape{static_cast<int64_t>(values.size())};
  if (dtype == DType::u8)
    return Tensor::from_vector(std::vector<uint8_t>(values.begin(), values.end()), shape);
  return Tensor::from_vector(std::vector<int8_t>(values.begin(), values.end()), shape);
}

std::vector<int32_t> zero_point_values(DType dtype, int64_t count, uint32_t seed) {
  std::vector<int32_t> values;
  for (float v : sample_values(count, 0, 255.99f, seed)) {
    values.push_back(dtype == DType::u8 ? static_cast<int32_t>(v) : static_cast<int32_t>(v) - 128);
  }
  return values;
}

// ---- QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear --------------------------------------

TEST(QuantizeOps, QuantizeLinearRoundsHalfToEvenAndSaturates) {
  const Tensor x = Tensor::from_vector(
      std::vector<float>{0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 1000.f, -1000.f, std::nanf("")}, {9});
  OpRun run{"QuantizeLinear", {}, {x, Tensor::scalar(1.0f), Tensor::scalar(int8_t{0})}};
  EXPECT_EQ(values_of<int8_t>(run_op(run)[0]), (std::vector<int8_t>{0, 2, 2, 0, -2, -2, 127, -128, 0}));
  // No zero point: uint8 with zero point 0.
  run.inputs = {x, Tensor::scalar(2.0f), Tensor{}};
  const Tensor y = run_op(run)[0];
  ASSERT_EQ(y.dtype(), DType::u8);
  EXPECT_EQ(values_of<uint8_t>(y), (std::vector<uint8_t>{0, 1, 1, 0, 0, 0, 255, 0, 0}));
}

TEST(QuantizeOps, QuantizeAndDequantizePerAxis) {
  // [2, 3, 2]: one scale and zero point per index of axis 1.
  std::vector<float> values;
  for (int i = 0; i < 12; ++i) values.push_back(static_cast<float>(i) - 5.0f);
  const Tensor x = Tensor::from_vector(values, {2, 3, 2});
  const Tensor scale = Tensor::from_vector(std::vector<float>{1.0f, 0.5f, 2.0f}, {3});
  const Tensor zero_point = Tensor::from_vector(std::vector<uint8_t>{10, 128, 0}, {3});
  OpRun run{"QuantizeLinear", {}, {x, scale, zero_point}, 13};
  run.attributes.set("axis", int_attr(1));
  const Tensor q = run_op(run)[0];
  // x = -5 -4 | -3 -2 | -1 0 || 1 2 | 3 4 | 5 6
  EXPECT_EQ(values_of<uint8_t>(q), (std::vector<uint8_t>{5, 6, 122, 124, 0, 0, 11, 12, 134, 136, 2, 3}));
  OpRun back{"DequantizeLinear", {}, {q, scale, zero_point}, 13};
  back.attributes.set("axis", int_attr(-2));
  EXPECT_EQ(values_of<float>(run_op(back)[0]), (std::vector<float>{-5, -4, -3, -2, 0, 0, 1, 2, 3, 4, 4, 6}));
}

TEST(QuantizeOps, DynamicQuantizeLinearCoversZeroAndTheRange) {
  const Tensor x = Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 3.0f, 5.1f}, {4});
  OpRun run{"DynamicQuantizeLinear", {}, {x}, 11, 3};
  const std::vector<Tensor> y = run_op(run);
  // The range is [0, 5.1]: scale 0.02, zero point 0.
  const float scale = y[1].data<float>()[0];
  EXPECT_FLOAT_EQ(scale, 5.1f / 255.0f);
  EXPECT_EQ(y[2].data<uint8_t>()[0], 0);
  EXPECT_EQ(values_of<uint8_t>(y[0]), (std::vector<uint8_t>{50, 100, 150, 255}));
  // All zeros: scale 0, every value the zero point.
  run.inputs = {Tensor::zeros(DType::f32, {3})};
  const std::vector<Tensor> zeros = run_op(run);
  EXPECT_EQ(zeros[1].data<float>()[0], 0.0f);
  EXPECT_EQ(values_of<uint8_t>(zeros[0]), (std::vector<uint8_t>{0, 0, 0}));
}

TEST(QuantizeOps, BadScalesAndZeroPointsAreNamed) {
  const Tensor x = Tensor::zeros(DType::f32, {2, 3});
  OpRun run{"QuantizeLinear", {}, {x, Tensor::from_vector(std::vector<float>{1, 2}, {2}), Tensor{}}, 13};
  EXPECT_NE(error_of([&] { run_op(run); }).find("scale has 2 values, the input's dim 1 is 3"),
            std::string::npos);
  run.inputs = {x, Tensor::scalar(1.0f), Tensor::scalar(int32_t{0})};
  EXPECT_NE(error_of([&] { run_op(run); }).find("QuantizeLinear to int32"), std::string::npos);
  OpRun dequantize{"DequantizeLinear",
                   {},
                   {Tensor::zeros(DType::u8, {2}), Tensor::scalar(1.0f), Tensor::scalar(int8_t{0})}};
  EXPECT_NE(
      error_of([&] { run_op(dequantize); }).find("zero point must have its tensor's type uint8, got int8"),
      std::string::npos);
  OpRun per_axis_at_opset_10{
      "DequantizeLinear",
      {},
      {Tensor::zeros(DType::u8, {2}), Tensor::from_vector(std::vector<float>{1, 2}, {2}), Tensor{}},
      10};
  EXPECT_NE(error_of([&] { run_op(per_axis_at_opset_10); }).find("expected one value (opset 10)"),
            std::string::npos);
}

// ---- ConvInteger, QLinearConv ---------------------------------------------------------------------

struct IntegerConvCase {
  DType x_type, w_type;
  int64_t batch, channels, out_channels, size, kernel, stride, pad, group, dilation;
  bool per_channel;
};

std::string describe(const IntegerConvCase& c) {
  return str_cat(dtype_name(c.x_type), "x", dtype_name(c.w_type), " n", c.batch, " c", c.channels, " m",
                 c.out_channels, " ", c.size, "x", c.size, " k", c.kernel, " s", c.stride, " p", c.pad, " g",
                 c.group, " d", c.dilation, c.per_channel ? " per-channel" : "");
}

std::vector<IntegerConvCase> integer_conv_cases() {
  std::vector<IntegerConvCase> cases;
  for (DType x : {DType::u8, DType::i8}) {
    for (DType w : {DType::u8, DType::i8}) {
      cases.push_back({x, w, 2, 5, 7, 9, 3, 1, 1, 1, 1, true});    // 3x3, pads
      cases.push_back({x, w, 1, 6, 4, 8, 1, 2, 0, 2, 1, false});   // pointwise, strided, grouped
      cases.push_back({x, w, 1, 8, 8, 7, 3, 2, 2, 8, 2, true});    // depthwise, dilated
      cases.push_back({x, w, 1, 3, 5, 11, 7, 2, 3, 1, 1, false});  // a 7x7 stem with 40 positions per row
    }
  }
  return cases;
}

struct IntegerConvInputs {
  Tensor x, w;
  std::vector<int32_t> x_zero_point, w_zero_points;
  Attributes attributes;
  ConvParams params;
};

IntegerConvInputs integer_conv_inputs(const IntegerConvCase& c) {
  IntegerConvInputs in;
  in.x = int8_tensor(c.x_type, {c.batch, c.channels, c.size, c.size}, 3);
  in.w = int8_tensor(c.w_type, {c.out_channels, c.channels / c.group, c.kernel, c.kernel}, 5);
  in.x_zero_point = zero_point_values(c.x_type, 1, 7);
  in.w_zero_points = zero_point_values(c.w_type, c.per_channel ? c.out_channels : 1, 9);
  in.attributes = conv_attrs({c.kernel, c.kernel}, {c.stride, c.stride}, {c.pad, c.pad, c.pad, c.pad},
                             c.group, {c.dilation, c.dilation});
  OpSpec spec;
  spec.op_type = "ConvInteger";
  spec.opset = 10;
  spec.attributes = &in.attributes;
  spec.inputs = {TensorInfo{c.x_type, in.x.shape(), {}}, TensorInfo{c.w_type, in.w.shape(), {}}};
  in.params = integer_conv_params(spec);
  return in;
}

TEST(NativeQuantizedVsReference, ConvIntegerAccumulatorsBitForBit) {
  for (int threads : kThreadCounts) {
    const ScopedIntraOpThreads scoped(threads);
    for (const IntegerConvCase& c : integer_conv_cases()) {
      const IntegerConvInputs in = integer_conv_inputs(c);
      const OpRun run{
          "ConvInteger",
          in.attributes,
          {in.x, in.w, zero_points(c.x_type, in.x_zero_point), zero_points(c.w_type, in.w_zero_points)},
          10};
      const Tensor y = run_op(run)[0];
      ASSERT_EQ(y.dtype(), DType::i32);
      EXPECT_EQ(values_of<int32_t>(y),
                native::ref::conv_integer(in.x, in.w, in.x_zero_point[0], in.w_zero_points, in.params))
          << describe(c) << ", " << threads << " threads";
    }
  }
}

TEST(NativeQuantizedVsReference, QLinearConvRequantizesTheAccumulators) {
  for (const IntegerConvCase& c : integer_conv_cases()) {
    const IntegerConvInputs in = integer_conv_inputs(c);
    const std::vector<int32_t> acc =
        native::ref::conv_integer(in.x, in.w, in.x_zero_point[0], in.w_zero_points, in.params);
    std::vector<float> w_scales;
    for (float s : sample_values(static_cast<int64_t>(in.w_zero_points.size()), 0.001f, 0.02f, 11)) {
      w_scales.push_back(s);
    }
    std::vector<int32_t> bias;
    for (float b : sample_values(c.out_channels, -5000, 5000, 13)) bias.push_back(static_cast<int32_t>(b));
    const float x_scale = 0.05f;
    const float y_scale = 0.3f;
    for (DType y_type : {DType::u8, DType::i8}) {
      const int32_t y_zero_point = y_type == DType::u8 ? 100 : -20;
      const Shape scale_shape = w_scales.size() == 1 ? Shape{} : Shape{c.out_channels};
      const OpRun run{"QLinearConv",
                      in.attributes,
                      {in.x, Tensor::scalar(x_scale), zero_points(c.x_type, in.x_zero_point), in.w,
                       Tensor::from_vector(w_scales, scale_shape), zero_points(c.w_type, in.w_zero_points),
                       Tensor::scalar(y_scale), zero_points(y_type, {y_zero_point}),
                       Tensor::from_vector(bias, {c.out_channels})},
                      10};
      const Tensor y = run_op(run)[0];
      ASSERT_EQ(y.dtype(), y_type);
      const int64_t positions = static_cast<int64_t>(acc.size()) / (c.batch * c.out_channels);
      for (size_t i = 0; i < acc.size(); ++i) {
        const int64_t m = static_cast<int64_t>(i) / positions % c.out_channels;
        const float multiplier =
            requantize_multiplier(x_scale, w_scales[w_scales.size() == 1 ? 0 : m], y_scale);
        const int32_t b = bias[static_cast<size_t>(m)];
        const int32_t want = y_type == DType::u8 ? requantize<uint8_t>(acc[i], b, multiplier, y_zero_point)
                                                 : requantize<int8_t>(acc[i], b, multiplier, y_zero_point);
        const int32_t got = y_type == DType::u8 ? y.data<uint8_t>()[i] : y.data<int8_t>()[i];
        ASSERT_EQ(got, want) << describe(c) << ", element " << i;
      }
    }
  }
}

// oneDNN's int8 convolutions, on the tiers where they are exact (VNNI): int32 accumulators bit for bit,
// requantized outputs within one step of native's (oneDNN requantizes in float32, native in double).
// Below those tiers oneDNN must refuse, leaving native's exact kernels.
#if KILN_WITH_ONEDNN
TEST(OnednnQuantized, ExactWithVnniAndRefusedWithout) {
  using testing::run_op_on;
  for (const IntegerConvCase& c : integer_conv_cases()) {
    if (c.w_type != DType::i8) continue;  // oneDNN takes int8 weights
    IntegerConvInputs in = integer_conv_inputs(c);
    const std::vector<int32_t> zero_weights_zero_point = {0};
    const OpRun accumulate{
        "ConvInteger", in.attributes, {in.x, in.w, zero_points(c.x_type, in.x_zero_point)}, 10};
    if (isa_in_effect() < Isa::avx512_bf16) {
      EXPECT_NE(error_of([&] { run_op_on(onednn_backend(), accumulate); }).find("exact only with VNNI"),
                std::string::npos);
      continue;
    }
    const std::vector<int32_t> acc =
        native::ref::conv_integer(in.x, in.w, in.x_zero_point[0], zero_weights_zero_point, in.params);
    EXPECT_EQ(values_of<int32_t>(run_op_on(onednn_backend(), accumulate)[0]), acc) << describe(c);
    const std::vector<float> w_scales = sample_values(c.out_channels, 0.001f, 0.02f, 11);
    const OpRun requantized{"QLinearConv",
                            in.attributes,
                            {in.x, Tensor::scalar(0.05f), zero_points(c.x_type, in.x_zero_point), in.w,
                             Tensor::from_vector(w_scales, {c.out_channels}), Tensor{}, Tensor::scalar(0.3f),
                             Tensor::scalar(int8_t{-20})},
                            10};
    const Tensor onednn = run_op_on(onednn_backend(), requantized)[0];
    const Tensor native = run_op(requantized)[0];
    ASSERT_EQ(onednn.numel(), native.numel());
    for (int64_t i = 0; i < native.numel(); ++i) {
      ASSERT_LE(std::abs(onednn.data<int8_t>()[i] - native.data<int8_t>()[i]), 1)
          << describe(c) << ", element " << i;
    }
  }
}
#endif

// ---- MatMulInteger, QLinearMatMul -----------------------------------------------------------------

TEST(NativeQuantizedVsReference, MatMulIntegerAccumulatorsBitForBit) {
  for (int threads : kThreadCounts) {
    const ScopedIntraOpThreads scoped(threads);
    for (DType a_type : {DType::u8, DType::i8}) {
      for (DType b_type : {DType::u8, DType::i8}) {
        for (bool per_row : {false, true}) {
          const int64_t m = 13, k = 70, n = 9;
          const Tensor a = int8_tensor(a_type, {m, k}, 17);
          const Tensor b = int8_tensor(b_type, {k, n}, 19);
          const std::vector<int32_t> a_zero = zero_point_values(a_type, per_row ? m : 1, 21);
          const std::vector<int32_t> b_zero = zero_point_values(b_type, per_row ? n : 1, 23);
          const OpRun run{
              "MatMulInteger", {}, {a, b, zero_points(a_type, a_zero), zero_points(b_type, b_zero)}, 10};
          EXPECT_EQ(values_of<int32_t>(run_op(run)[0]), native::ref::matmul_integer(a, b, a_zero, b_zero))
              << dtype_name(a_type) << "x" << dtype_name(b_type) << (per_row ? " per row/column" : "") << ", "
              << threads << " threads";
        }
      }
    }
  }
}

TEST(NativeQuantizedVsReference, MatMulIntegerBroadcastsBatchesAndWrapsLongSums) {
  // A [2, 1, 3, 4] x B [3, 4, 5]: the batch dims broadcast to [2, 3].
  const Tensor a = int8_tensor(DType::u8, {2, 1, 3, 4}, 25);
  const Tensor b = int8_tensor(DType::i8, {3, 4, 5}, 27);
  const Tensor y = run_op({"MatMulInteger", {}, {a, b}, 10})[0];
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3, 5}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      const Tensor a_matrix = Tensor::from_vector(
          std::vector<uint8_t>(a.data<uint8_t>() + i * 12, a.data<uint8_t>() + i * 12 + 12), {3, 4});
      const Tensor b_matrix = Tensor::from_vector(
          std::vector<int8_t>(b.data<int8_t>() + j * 20, b.data<int8_t>() + j * 20 + 20), {4, 5});
      const std::vector<int32_t> want = native::ref::matmul_integer(a_matrix, b_matrix, {{0}}, {{0}});
      const int32_t* got = y.data<int32_t>() + (i * 3 + j) * 15;
      EXPECT_EQ(std::vector<int32_t>(got, got + 15), want) << "batch " << i << ", " << j;
    }
  }
  // 40000 terms of 255 * -255 overflow int32: the accumulator wraps, as ONNX's int32 sum does.
  const int64_t k = 40000;
  const Tensor ones = Tensor::from_vector(std::vector<uint8_t>(k, 255), {1, k});
  const Tensor zeros = Tensor::from_vector(std::vector<uint8_t>(k, 0), {k, 1});
  const Tensor wrapped = run_op(
      {"MatMulInteger", {}, {ones, zeros, Tensor::scalar(uint8_t{0}), Tensor::scalar(uint8_t{255})}, 10})[0];
  EXPECT_EQ(wrapped.data<int32_t>()[0], static_cast<int32_t>(static_cast<uint32_t>(int64_t{-65025} * k)));
}

// oneDNN's int8 matmuls (VNNI tiers): A's leading dims folded into rows, a run-time zero point for A,
// per-column scales; the int32 accumulators and the requantized outputs equal native's bit for bit.
#if KILN_WITH_ONEDNN
TEST(OnednnQuantized, MatMulsEqualNativeBitForBitWithVnni) {
  using testing::run_op_on;
  for (DType a_type : {DType::u8, DType::i8}) {
    const Tensor a = int8_tensor(a_type, {2, 7, 70}, 31);
    const Tensor b = int8_tensor(DType::i8, {70, 19}, 33);
    const Tensor a_zero = zero_points(a_type, {a_type == DType::u8 ? 131 : -9});
    const OpRun accumulate{"MatMulInteger", {}, {a, b, a_zero, zero_points(DType::i8, {0})}, 10};
    if (isa_in_effect() < Isa::avx512_bf16) {
      EXPECT_NE(error_of([&] { run_op_on(onednn_backend(), accumulate); }).find("exact only with VNNI"),
                std::string::npos);
      continue;
    }
    EXPECT_EQ(values_of<int32_t>(run_op_on(onednn_backend(), accumulate)[0]),
              values_of<int32_t>(run_op(accumulate)[0]))
        << dtype_name(a_type);
    for (DType y_type : {DType::u8, DType::i8}) {
      const OpRun requantized{
          "QLinearMatMul",
          {},
          {a, Tensor::scalar(0.05f), a_zero, b,
           Tensor::from_vector(sample_values(19, 0.001f, 0.02f, 11), {19}), zero_points(DType::i8, {0}),
           Tensor::scalar(0.3f), zero_points(y_type, {y_type == DType::u8 ? 100 : -20})},
          10};
      const Tensor onednn = run_op_on(onednn_backend(), requantized)[0];
      const Tensor native = run_op(requantized)[0];
      ASSERT_EQ(onednn.shape(), native.shape());
      EXPECT_EQ(std::memcmp(onednn.raw_data(), native.raw_data(), native.nbytes()), 0)
          << dtype_name(a_type) << " -> " << dtype_name(y_type);
    }
  }
}
#endif

TEST(NativeQuantizedVsReference, QLinearMatMulPerRowAndColumnScales) {
  const int64_t m = 6, k = 33, n = 10;
  const Tensor a = int8_tensor(DType::u8, {m, k}, 29);
  const Tensor b = int8_tensor(DType::i8, {k, n}, 31);
  const std::vector<int32_t> a_zero = zero_point_values(DType::u8, m, 33);
  const std::vector<float> a_scales = sample_values(m, 0.01f, 0.1f, 35);
  const std::vector<float> b_scales = sample_values(n, 0.001f, 0.01f, 37);
  const float y_scale = 0.2f;
  const OpRun run{"QLinearMatMul",
                  {},
                  {a, Tensor::from_vector(a_scales, {m}), zero_points(DType::u8, a_zero), b,
                   Tensor::from_vector(b_scales, {n}), Tensor::scalar(int8_t{0}), Tensor::scalar(y_scale),
                   Tensor::scalar(uint8_t{128})},
                  10};
  const Tensor y = run_op(run)[0];
  const std::vector<int32_t> acc = native::ref::matmul_integer(a, b, a_zero, {{0}});
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float multiplier = requantize_multiplier(a_scales[i], b_scales[j], y_scale);
      ASSERT_EQ(y.data<uint8_t>()[i * n + j], requantize<uint8_t>(acc[i * n + j], 0, multiplier, 128))
          << "row " << i << ", column " << j;
    }
  }
}

TEST(QuantizeOps, IntegerProductsNameBadOperands) {
  const Tensor x = int8_tensor(DType::u8, {1, 2, 4, 4}, 1);
  const Tensor w = int8_tensor(DType::i8, {3, 2, 3, 3}, 2);
  EXPECT_NE(error_of([&] {
              run_op({"ConvInteger", {}, {Tensor::zeros(DType::f32, {1, 2, 4, 4}), w}, 10});
            }).find("ConvInteger input must be int8 or uint8, got float32"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] {
        run_op(
            {"ConvInteger", {}, {x, w, Tensor{}, Tensor::from_vector(std::vector<int8_t>{0, 0}, {2})}, 10});
      }).find("w_zero_point has shape [2], expected one value or [3] (one per output channel)"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              run_op({"MatMulInteger",
                      {},
                      {int8_tensor(DType::u8, {2, 3}, 1), int8_tensor(DType::u8, {4, 2}, 1)},
                      10});
            }).find("MatMulInteger inner dims differ"),
            std::string::npos);
}

// ---- QGemm (com.microsoft) ------------------------------------------------------------------------

// A [rows, columns] matrix stored transposed.
template <typename T>
Tensor transposed(const Tensor& t) {
  const int64_t rows = t.dim(0), columns = t.dim(1);
  std::vector<T> values;
  for (int64_t j = 0; j < columns; ++j) {
    for (int64_t i = 0; i < rows; ++i) values.push_back(t.data<T>()[i * columns + j]);
  }
  return Tensor::from_vector(values, {columns, rows});
}

TEST(NativeQuantizedVsReference, QGemmTransposesAddsCAndRequantizes) {
  // 3 x 70 times 70 x 130: the columns span three blocks of the kernel's work split.
  const int64_t m = 3, k = 70, n = 130;
  const Tensor a = int8_tensor(DType::u8, {m, k}, 41);
  const Tensor b = int8_tensor(DType::i8, {k, n}, 43);
  const std::vector<int32_t> b_zero = zero_point_values(DType::i8, n, 45);
  const std::vector<float> b_scales = sample_values(n, 0.001f, 0.01f, 47);
  const std::vector<int32_t> acc = native::ref::matmul_integer(a, b, {{7}}, b_zero);
  std::vector<int32_t> c_values;
  for (float v : sample_values(m * n, -5000, 5000, 49)) c_values.push_back(static_cast<int32_t>(v));
  const float a_scale = 0.05f, alpha = 0.5f, y_scale = 0.3f;
  for (const Shape& c_shape : {Shape{n}, Shape{m, n}, Shape{m, 1}, Shape{}}) {
    const int64_t c_count = checked_numel(c_shape);
    const Tensor c =
        Tensor::from_vector(std::vector<int32_t>(c_values.begin(), c_values.begin() + c_count), c_shape);
    const auto c_at = [&](int64_t i, int64_t j) {
      if (c_shape.empty()) return c_values[0];
      if (c_shape.size() == 1) return c_values[j];
      return c_shape[1] == 1 ? c_values[i] : c_values[i * n + j];
    };
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        Attributes attributes;
        attributes.set("transA", int_attr(trans_a));
        attributes.set("transB", int_attr(trans_b));
        attributes.set("alpha", testing::float_attr(alpha));
        std::vector<Tensor> inputs = {trans_a ? transposed<uint8_t>(a) : a,
                                      Tensor::scalar(a_scale),
                                      Tensor::scalar(uint8_t{7}),
                                      trans_b ? transposed<int8_t>(b) : b,
                                      Tensor::from_vector(b_scales, {n}),
                                      zero_points(DType::i8, b_zero),
                                      c};
        const std::string what = "C " + shape_to_string(c_shape) + (trans_a ? ", A transposed" : "") +
                                 (trans_b ? ", B transposed" : "");
        // Float output: (accumulator + C) * alpha * a_scale * b_scale.
        OpRun run{"QGemm", attributes, inputs, 1};
        run.domain = "com.microsoft";
        const Tensor y_float = run_op(run)[0];
        ASSERT_EQ(y_float.dtype(), DType::f32);
        // Requantized to int8.
        run.inputs.push_back(Tensor::scalar(y_scale));
        run.inputs.push_back(Tensor::scalar(int8_t{-4}));
        const Tensor y = run_op(run)[0];
        ASSERT_EQ(y.shape(), (Shape{m, n}));
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const float scale = alpha * a_scale * b_scales[j];
            const int32_t sum = acc[i * n + j];
            ASSERT_EQ(y_float.data<float>()[i * n + j],
                      (static_cast<float>(sum) + static_cast<float>(c_at(i, j))) * scale)
                << what << ", row " << i << ", column " << j;
            ASSERT_EQ(y.data<int8_t>()[i * n + j],
                      requantize<int8_t>(sum, c_at(i, j),
                                         requantize_multiplier(alpha * a_scale, b_scales[j], y_scale), -4))
                << what << ", row " << i << ", column " << j;
          }
        }
      }
    }
  }
}

// ---- QLinearAdd, QLinearMul (com.microsoft) -------------------------------------------------------

// The chain the op stands for, op by op on the native reference kernels: DequantizeLinear on each
// input, the float op, QuantizeLinear.
Tensor dequantize_combine_quantize(const std::string& op, const Tensor& a, float a_scale,
                                   const Tensor& a_zero, const Tensor& b, float b_scale, const Tensor& b_zero,
                                   float y_scale, const Tensor& y_zero) {
  const Tensor x = run_op({"DequantizeLinear", {}, {a, Tensor::scalar(a_scale), a_zero}, 13})[0];
  const Tensor z = run_op({"DequantizeLinear", {}, {b, Tensor::scalar(b_scale), b_zero}, 13})[0];
  const Tensor sum = run_op({op, {}, {x, z}, 13})[0];
  return run_op({"QuantizeLinear", {}, {sum, Tensor::scalar(y_scale), y_zero}, 13})[0];
}

TEST(NativeQuantizedVsReference, QLinearAddAndMulEqualTheirDequantizeQuantizeChains) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 17, 19}, {2, 3, 17, 19}},  // a residual sum
      {{2, 3, 17, 19}, {3, 1, 1}},       // per channel
      {{1}, {4, 600}},                   // a scalar, over more than one chunk
      {{4, 1}, {1, 300}},                // both broadcast
  };
  for (int threads : kThreadCounts) {
    const ScopedIntraOpThreads scoped(threads);
    for (DType dtype : {DType::u8, DType::i8}) {
      for (const auto& [a_shape, b_shape] : shapes) {
        for (const char* op : {"Add", "Mul"}) {
          const Tensor a = int8_tensor(dtype, a_shape, 51);
          const Tensor b = int8_tensor(dtype, b_shape, 53);
          const std::vector<int32_t> zeros = zero_point_values(dtype, 3, 55);
          const Tensor a_zero = zero_points(dtype, {zeros[0]});
          const Tensor b_zero = zero_points(dtype, {zeros[1]});
          const Tensor y_zero = zero_points(dtype, {zeros[2]});
          const float a_scale = 0.031f, b_scale = 0.017f, y_scale = std::string(op) == "Add" ? 0.043f : 0.6f;
          OpRun run{std::string("QLinear") + op,
                    {},
                    {a, Tensor::scalar(a_scale), a_zero, b, Tensor::scalar(b_scale), b_zero,
                     Tensor::scalar(y_scale), y_zero},
                    1};
          run.domain = "com.microsoft";
          const Tensor y = run_op(run)[0];
          const Tensor want =
              dequantize_combine_quantize(op, a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero);
          ASSERT_EQ(y.shape(), want.shape());
          ASSERT_EQ(y.dtype(), dtype);
          ASSERT_EQ(0, std::memcmp(y.raw_data(), want.raw_data(), static_cast<size_t>(y.numel())))
              << op << " " << dtype_name(dtype) << " " << shape_to_string(a_shape) << " and "
              << shape_to_string(b_shape) << ", " << threads << " threads";
        }
      }
    }
  }
  OpRun mixed{
      "QLinearAdd",
      {},
      {int8_tensor(DType::u8, {2}, 1), Tensor::scalar(0.1f), Tensor::scalar(uint8_t{0}),
       int8_tensor(DType::i8, {2}, 1), Tensor::scalar(0.1f), Tensor::scalar(int8_t{0}), Tensor::scalar(0.1f)},
      1};
  mixed.domain = "com.microsoft";
  EXPECT_NE(error_of([&] { run_op(mixed); }).find("QLinearAdd B must have A's type uint8, got int8"),
            std::string::npos);
}

// What explain records of a quantized step: each operand's constants and what they are per.
TEST(QuantizeOps, QuantizationSummaryNamesEachOperandsConstants) {
  const auto constant = [](const Tensor& value) { return TensorInfo{value.dtype(), value.shape(), value}; };
  const Attributes attributes = conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1});
  OpSpec spec;
  spec.op_type = "ConvInteger";
  spec.attributes = &attributes;
  spec.inputs = {TensorInfo{DType::u8, {1, 2, 4, 4}, {}}, constant(int8_tensor(DType::i8, {3, 2, 3, 3}, 1)),
                 constant(Tensor::scalar(uint8_t{3})), constant(zero_points(DType::i8, {1, 2, 3}))};
  const std::optional<QuantizationSummary> integer = quantization_summary(spec);
  ASSERT_TRUE(integer.has_value());
  ASSERT_EQ(integer->operands.size(), 2u);  // no y: int32 accumulators
  EXPECT_EQ(integer->operands[0].name, "x");
  EXPECT_TRUE(integer->operands[0].scales.empty());
  EXPECT_EQ(integer->operands[0].zero_points, std::vector<double>{3});
  EXPECT_EQ(integer->operands[1].zero_points, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(integer->operands[1].per, "output channel");
  EXPECT_EQ(integer->accumulation, "int32, exact");
  EXPECT_EQ(integer->output, "int32 accumulators");

  spec.op_type = "QLinearConv";
  spec.inputs = {TensorInfo{DType::u8, {1, 2, 4, 4}, {}},
                 constant(Tensor::scalar(0.5f)),
                 constant(Tensor::scalar(uint8_t{3})),
                 constant(int8_tensor(DType::i8, {3, 2, 3, 3}, 1)),
                 constant(Tensor::from_vector(std::vector<float>{0.25f, 0.125f, 2}, {3})),
                 constant(Tensor::scalar(int8_t{0})),
                 TensorInfo{DType::f32, {}, {}},  // y_scale known only at run time
                 constant(Tensor::scalar(int8_t{-1}))};
  const std::optional<QuantizationSummary> requantized = quantization_summary(spec);
  ASSERT_TRUE(requantized.has_value());
  ASSERT_EQ(requantized->operands.size(), 3u);
  EXPECT_EQ(requantized->operands[1].scales, (std::vector<double>{0.25, 0.125, 2}));
  EXPECT_EQ(requantized->operands[2].dtype, DType::i8);
  EXPECT_TRUE(requantized->operands[2].scales.empty());
  EXPECT_EQ(requantized->operands[2].zero_points, std::vector<double>{-1});
  EXPECT_TRUE(requantized->bias.empty());

  spec.op_type = "Relu";
  EXPECT_FALSE(quantization_summary(spec).has_value());
}

TEST(QuantizeOps, QGemmIsAComMicrosoftOpAndNamesBadOperands) {
  EXPECT_EQ(find_op_schema("QGemm", ""), nullptr);
  EXPECT_NE(find_op_schema("QGemm", "com.microsoft"), nullptr);
  const auto qgemm_error = [](std::vector<Tensor> inputs) {
    OpRun run{"QGemm", {}, std::move(inputs), 1};
    run.domain = "com.microsoft";
    return error_of([&] { run_op(run); });
  };
  const Tensor a = int8_tensor(DType::u8, {2, 3}, 1);
  const Tensor b = int8_tensor(DType::i8, {3, 4}, 2);
  const Tensor scale = Tensor::scalar(0.1f);
  EXPECT_NE(qgemm_error({a, scale, Tensor::scalar(uint8_t{0}), int8_tensor(DType::i8, {4, 4}, 2), scale,
                         Tensor::scalar(int8_t{0})})
                .find("QGemm inner dims differ"),
            std::string::npos);
  EXPECT_NE(qgemm_error({a, scale, Tensor::scalar(uint8_t{0}), b, scale, Tensor::scalar(int8_t{0}),
                         Tensor::zeros(DType::i32, {3})})
                .find("QGemm C of shape [3] does not broadcast to [2, 4]"),
            std::string::npos);
  EXPECT_NE(qgemm_error({a, scale, Tensor::scalar(uint8_t{0}), b, scale, Tensor::scalar(int8_t{0}),
                         Tensor::zeros(DType::f32, {4})})
                .find("int32"),
            std::string::npos);
  EXPECT_NE(qgemm_error({a, scale, Tensor::scalar(uint8_t{0}), b,
                         Tensor::from_vector(std::vector<float>{1, 2}, {2}), Tensor::scalar(int8_t{0})})
                .find("one per column of B"),
            std::string::npos);
  EXPECT_NE(qgemm_error({a, scale, Tensor::scalar(uint8_t{0}), b, scale, Tensor::scalar(int8_t{0}), Tensor{},
                         Tensor{}, Tensor::scalar(int8_t{0})})
                .find("y_zero_point but no y_scale"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
