// The ops added with opsets 18-21 and the data-dependent ops, through shape inference, kernel
// selection and the native kernels: Gelu, the Bitwise ops, GroupNormalization (18 and 21), LRN,
// LpNormalization, MeanVarianceNormalization, CenterCropPad, LpPool, GlobalLpPool, MaxUnpool and Det
// against plain loops written from the ONNX spec; NonZero, Compress, Unique and NonMaxSuppression
// (whose kernels size their outputs as they run) against the spec's examples and small references;
// RoiAlign and GridSample against values worked out by hand. Plus the errors, and how a session
// handles an output sized at run time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numbers>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "graph/session.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::float_attr;
using testing::int_attr;
using testing::ints_attr;
using testing::OpRun;
using testing::ravel;
using testing::run_op;
using testing::sample_tensor;
using testing::sample_values;
using testing::string_attr;
using testing::unravel;

Tensor f32s(std::vector<float> values, Shape shape) {
  return Tensor::from_vector(values, std::move(shape));
}

Tensor i64s(std::vector<int64_t> values, Shape shape) {
  return Tensor::from_vector(values, std::move(shape));
}

Tensor i64s(std::vector<int64_t> values) {
  const auto count = static_cast<int64_t>(values.size());
  return Tensor::from_vector(values, {count});
}

template <typename T>
std::vector<T> values_of(const Tensor& tensor) {
  const auto span = tensor.values<T>();
  return {span.begin(), span.end()};
}

// `actual` (float32 or float64) against `expected`, within `tolerance` x max(1, |expected|).
void expect_close(const Tensor& actual, const std::vector<double>& expected, const std::string& what,
                  double tolerance = 1e-5) {
  ASSERT_EQ(static_cast<size_t>(actual.numel()), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual.double_at(static_cast<int64_t>(i)), expected[i],
                tolerance * std::max(1.0, std::fabs(expected[i])))
        << what << " [" << i << "]";
  }
}

void expect_error(const OpRun& run, ErrorKind kind, const std::string& mentions) {
  try {
    run_op(run);
    FAIL() << run.op_type << " accepted a bad node (expected an error mentioning '" << mentions << "')";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), kind) << error.what();
    EXPECT_NE(std::string(error.what()).find(mentions), std::string::npos) << error.what();
  }
}

OpRun op(std::string type, int64_t opset, std::vector<Tensor> inputs, Attributes attributes = {}) {
  OpRun run;
  run.op_type = std::move(type);
  run.opset = opset;
  run.inputs = std::move(inputs);
  run.attributes = std::move(attributes);
  return run;
}

// ---- Gelu ----------------------------------------------------------------------------------------

double gelu(double x, bool tanh_form) {
  if (tanh_form) {
    const double inner = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + std::tanh(inner));
  }
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

TEST(NewOps, GeluExactAndTanh) {
  const Tensor x = sample_tensor({3, 41}, -6, 6, 7);
  for (const std::string approximate : {"", "none", "tanh"}) {
    Attributes attributes;
    if (!approximate.empty()) attributes.set("approximate", string_attr(approximate));
    const Tensor y = run_op(op("Gelu", 20, {x}, attributes)).at(0);
    ASSERT_EQ(y.dtype(), DType::f32);
    ASSERT_EQ(y.shape(), x.shape());
    std::vector<double> expected;
    for (int64_t i = 0; i < x.numel(); ++i) expected.push_back(gelu(x.double_at(i), approximate == "tanh"));
    expect_close(y, expected, "approximate '" + approximate + "'", 1e-5);
    // float64 is computed in double.
    std::vector<double> wide;
    for (int64_t i = 0; i < x.numel(); ++i) wide.push_back(x.double_at(i));
    const Tensor y64 = run_op(op("Gelu", 20, {Tensor::from_vector(wide, x.shape())}, attributes)).at(0);
    ASSERT_EQ(y64.dtype(), DType::f64);
    expect_close(y64, expected, "float64 approximate '" + approximate + "'", 1e-12);
  }
  // The exact form at a few points: 0, and far out where it is x or 0.
  const Tensor y = run_op(op("Gelu", 20, {f32s({0.0f, 10.0f, -10.0f, 1.0f}, {4})})).at(0);
  EXPECT_EQ(y.data<float>()[0], 0.0f);
  EXPECT_FLOAT_EQ(y.data<float>()[1], 10.0f);
  EXPECT_NEAR(y.data<float>()[2], 0.0f, 1e-6);
  EXPECT_NEAR(y.data<float>()[3], 0.8413447460685429, 1e-6);
}

TEST(NewOps, GeluErrors) {
  Attributes fast;
  fast.set("approximate", string_attr("fast"));
  expect_error(op("Gelu", 20, {sample_tensor({4})}, fast), ErrorKind::invalid_model,
               "Gelu attribute 'approximate' must be none or tanh, got 'fast'");
  expect_error(op("Gelu", 20, {i64s({1, 2})}), ErrorKind::type_mismatch, "int64");
}

// ---- Bitwise ops ---------------------------------------------------------------------------------

// a [2, 3] with b [3] broadcast over its rows, against the same operator applied in a loop.
template <typename T>
void check_bitwise(const std::vector<T>& a, const std::vector<T>& b) {
  const Tensor ta = Tensor::from_vector(a, {2, 3});
  const Tensor tb = Tensor::from_vector(b, {3});
  const std::string type(dtype_name(dtype_of<T>()));
  struct Binary {
    const char* name;
    T (*apply)(T, T);
  };
  const Binary ops[] = {
      {"BitwiseAnd", [](T x, T y) { return static_cast<T>(x & y); }},
      {"BitwiseOr", [](T x, T y) { return static_cast<T>(x | y); }},
      {"BitwiseXor", [](T x, T y) { return static_cast<T>(x ^ y); }},
  };
  for (const Binary& binary : ops) {
    const Tensor y = run_op(op(binary.name, 18, {ta, tb})).at(0);
    ASSERT_EQ(y.dtype(), dtype_of<T>()) << binary.name;
    ASSERT_EQ(y.shape(), (Shape{2, 3})) << binary.name;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(y.data<T>()[i], binary.apply(a[i], b[i % 3]))
          << binary.name << " " << type << " [" << i << "]";
    }
  }
  const Tensor y = run_op(op("BitwiseNot", 18, {ta})).at(0);
  ASSERT_EQ(y.dtype(), dtype_of<T>());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(y.data<T>()[i], static_cast<T>(~a[i])) << "BitwiseNot " << type << " [" << i << "]";
  }
}

TEST(NewOps, BitwiseOpsOnSignedAndUnsignedIntegers) {
  check_bitwise<int32_t>({0, -1, std::numeric_limits<int32_t>::min(), 0x0F0F0F0F, -123456, 77},
                         {-1, 0x00FF00FF, std::numeric_limits<int32_t>::max()});
  check_bitwise<uint8_t>({0, 255, 0x0F, 0xF0, 0xAA, 1}, {0x55, 0xFF, 0x81});
  check_bitwise<int64_t>({-1, std::numeric_limits<int64_t>::min(), int64_t{1} << 40, -9876543210, 3, 0},
                         {std::numeric_limits<int64_t>::max(), -2, int64_t{0x123456789}});
}

TEST(NewOps, BitwiseErrors) {
  expect_error(op("BitwiseAnd", 18, {sample_tensor({3}), sample_tensor({3})}), ErrorKind::type_mismatch,
               "BitwiseAnd inputs must be integers, got float32");
  expect_error(op("BitwiseNot", 18, {Tensor::from_vector<bool>({true, false}, {2})}),
               ErrorKind::type_mismatch, "BitwiseNot inputs must be integers, got bool");
  expect_error(op("BitwiseXor", 18, {i64s({1, 2}), Tensor::from_vector<int32_t>({1, 2}, {2})}),
               ErrorKind::type_mismatch, "BitwiseXor input 1 is int32 but input 0 is int64");
}

// ---- GroupNormalization --------------------------------------------------------------------------

OpRun group_norm(const Tensor& x, int64_t groups, int64_t opset, float epsilon) {
  const int64_t parameters = opset >= 21 ? x.dim(1) : groups;
  Attributes attributes;
  attributes.set("num_groups", int_attr(groups));
  attributes.set("epsilon", float_attr(epsilon));
  return op("GroupNormalization", opset,
            {x, sample_tensor({parameters}, 0.5f, 2.0f, 2), sample_tensor({parameters}, -1.0f, 1.0f, 3)},
            attributes);
}

// Each (n, group) block of channels by its own mean and variance; scale and bias per group (opset
// 18) or per channel (21).
std::vector<double> reference_group_norm(const OpRun& run, int64_t groups, double epsilon) {
  const Tensor& x = run.inputs[0];
  const int64_t channels = x.dim(1);
  const int64_t plane = x.numel() / (x.dim(0) * channels);
  const int64_t per_group = channels / groups;
  const int64_t size = per_group * plane;
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t block = 0; block < x.dim(0) * groups; ++block) {
    double mean = 0;
    for (int64_t i = 0; i < size; ++i) mean += x.double_at(block * size + i);
    mean /= static_cast<double>(size);
    double variance = 0;
    for (int64_t i = 0; i < size; ++i) variance += std::pow(x.double_at(block * size + i) - mean, 2);
    variance /= static_cast<double>(size);
    for (int64_t i = 0; i < size; ++i) {
      const int64_t group = block % groups;
      const int64_t channel = group * per_group + i / plane;
      const int64_t p = run.opset >= 21 ? channel : group;
      const int64_t at = block * size + i;
      y[static_cast<size_t>(at)] =
          (x.double_at(at) - mean) / std::sqrt(variance + epsilon) * run.inputs[1].double_at(p) +
          run.inputs[2].double_at(p);
    }
  }
  return y;
}

TEST(NewOps, GroupNormalizationPerGroupAndPerChannel) {
  const Shape shapes[] = {{2, 6, 3, 2}, {3, 4}, {1, 4, 2, 2, 3}};
  for (const Shape& shape : shapes) {
    const Tensor x = sample_tensor(shape, -3, 3, 5);
    for (int64_t groups : {int64_t{1}, int64_t{2}, shape[1]}) {
      for (int64_t opset : {18, 21}) {
        const OpRun run = group_norm(x, groups, opset, 1e-3f);
        expect_close(
            run_op(run).at(0), reference_group_norm(run, groups, 1e-3f),
            shape_to_string(shape) + " groups " + std::to_string(groups) + " opset " + std::to_string(opset));
      }
    }
  }
}

TEST(NewOps, GroupNormalizationErrors) {
  const Tensor x = sample_tensor({2, 6, 3});
  expect_error(group_norm(x, 4, 18, 1e-5f), ErrorKind::invalid_model,
               "GroupNormalization num_groups 4 must divide the input's 6 channels");
  OpRun per_channel_at_18 = group_norm(x, 3, 18, 1e-5f);
  per_channel_at_18.inputs[1] = sample_tensor({6});
  expect_error(per_channel_at_18, ErrorKind::invalid_argument,
               "GroupNormalization scale must have shape [3], got [6]");
  OpRun per_group_at_21 = group_norm(x, 3, 21, 1e-5f);
  per_group_at_21.inputs[2] = sample_tensor({3});
  expect_error(per_group_at_21, ErrorKind::invalid_argument,
               "GroupNormalization bias must have shape [6], got [3]");
  OpRun no_groups = group_norm(x, 3, 18, 1e-5f);
  no_groups.attributes = Attributes{};
  expect_error(no_groups, ErrorKind::invalid_model, "'num_groups' is missing");
}

// ---- LRN -----------------------------------------------------------------------------------------

// square_sum over channels [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] clipped to the input;
// y = x / (bias + alpha / size * square_sum)^beta.
std::vector<double> reference_lrn(const Tensor& x, int64_t size, double alpha, double beta, double bias) {
  const int64_t channels = x.dim(1);
  const int64_t plane = x.numel() / (x.dim(0) * channels);
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t n = 0; n < x.dim(0); ++n) {
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t first = std::max<int64_t>(0, c - (size - 1) / 2);
      const int64_t last = std::min<int64_t>(channels - 1, c + size / 2);  // ceil((size - 1) / 2)
      for (int64_t i = 0; i < plane; ++i) {
        double squares = 0;
        for (int64_t k = first; k <= last; ++k)
          squares += std::pow(x.double_at((n * channels + k) * plane + i), 2);
        const int64_t at = (n * channels + c) * plane + i;
        y[static_cast<size_t>(at)] =
            x.double_at(at) / std::pow(bias + alpha / static_cast<double>(size) * squares, beta);
      }
    }
  }
  return y;
}

TEST(NewOps, LrnOddAndEvenSizes) {
  const Tensor x = sample_tensor({2, 5, 2, 3}, -3, 3, 9);
  for (int64_t size : {1, 2, 3, 4, 7}) {
    Attributes attributes;
    attributes.set("size", int_attr(size));
    attributes.set("alpha", float_attr(0.5f));
    attributes.set("beta", float_attr(0.75f));
    attributes.set("bias", float_attr(1.5f));
    expect_close(run_op(op("LRN", 13, {x}, attributes)).at(0), reference_lrn(x, size, 0.5f, 0.75f, 1.5f),
                 "size " + std::to_string(size));
  }
  // The defaults: alpha 1e-4, beta 0.75, bias 1.
  Attributes defaults;
  defaults.set("size", int_attr(3));
  expect_close(run_op(op("LRN", 13, {x}, defaults)).at(0), reference_lrn(x, 3, 1e-4f, 0.75f, 1.0f),
               "defaults");
}

TEST(NewOps, LrnErrors) {
  Attributes zero;
  zero.set("size", int_attr(0));
  expect_error(op("LRN", 13, {sample_tensor({1, 3, 2})}, zero), ErrorKind::invalid_model,
               "LRN size must be >= 1");
  expect_error(op("LRN", 13, {sample_tensor({1, 3, 2})}), ErrorKind::invalid_model, "'size' is missing");
  Attributes three;
  three.set("size", int_attr(3));
  expect_error(op("LRN", 13, {sample_tensor({2, 3})}, three), ErrorKind::invalid_argument,
               "LRN input must have rank >= 3");
}

// ---- LpNormalization -----------------------------------------------------------------------------

// Each line along `axis` divided by its L1 or L2 norm; a line of zeros stays zero.
std::vector<double> reference_lp_norm(const Tensor& x, int64_t axis, int64_t p) {
  const Shape& shape = x.shape();
  const auto a = static_cast<size_t>(axis < 0 ? axis + x.rank() : axis);
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> index = unravel(i, shape);
    double norm = 0;
    for (int64_t j = 0; j < shape[a]; ++j) {
      index[a] = j;
      const double v = x.double_at(ravel(index, shape));
      norm += p == 1 ? std::fabs(v) : v * v;
    }
    if (p == 2) norm = std::sqrt(norm);
    y[static_cast<size_t>(i)] = norm == 0 ? 0.0 : x.double_at(i) / norm;
  }
  return y;
}

TEST(NewOps, LpNormalizationL1AndL2AlongAnyAxis) {
  // Row 1 and column 2 are zeros.
  Tensor x = sample_tensor({3, 4}, -3, 3, 11);
  for (int64_t j = 0; j < 4; ++j) x.data<float>()[4 + j] = 0.0f;
  for (int64_t i = 0; i < 3; ++i) x.data<float>()[i * 4 + 2] = 0.0f;
  const Tensor cube = sample_tensor({2, 3, 4}, -3, 3, 12);
  for (int64_t p : {1, 2}) {
    for (int64_t axis : {0, 1, -1}) {
      Attributes attributes;
      attributes.set("p", int_attr(p));
      attributes.set("axis", int_attr(axis));
      const std::string what = "p " + std::to_string(p) + " axis " + std::to_string(axis);
      const Tensor y = run_op(op("LpNormalization", 1, {x}, attributes)).at(0);
      expect_close(y, reference_lp_norm(x, axis, p), what);
      expect_close(run_op(op("LpNormalization", 1, {cube}, attributes)).at(0),
                   reference_lp_norm(cube, axis, p), "[2, 3, 4] " + what);
      // The zero row (axis 1 or -1) or zero column (axis 0) stays zero, not NaN.
      for (int64_t k = 0; k < (axis == 0 ? 3 : 4); ++k) {
        EXPECT_EQ(y.data<float>()[axis == 0 ? k * 4 + 2 : 4 + k], 0.0f) << what;
      }
    }
  }
  // The default: p 2 along the last axis.
  expect_close(run_op(op("LpNormalization", 1, {cube})).at(0), reference_lp_norm(cube, -1, 2), "defaults");
}

TEST(NewOps, LpNormalizationErrors) {
  Attributes three;
  three.set("p", int_attr(3));
  expect_error(op("LpNormalization", 1, {sample_tensor({2, 3})}, three), ErrorKind::invalid_model,
               "LpNormalization p must be 1 or 2, got 3");
  Attributes axis;
  axis.set("axis", int_attr(2));
  expect_error(op("LpNormalization", 1, {sample_tensor({2, 3})}, axis), ErrorKind::invalid_model,
               "LpNormalization axis 2 is out of range for rank 2");
}

// ---- MeanVarianceNormalization -------------------------------------------------------------------

// (x - mean) / (sqrt(variance) + 1e-9), the statistics over the dims in `axes`.
std::vector<double> reference_mvn(const Tensor& x, const std::vector<int64_t>& axes) {
  const Shape& shape = x.shape();
  std::vector<bool> reduced(shape.size(), false);
  for (int64_t axis : axes) reduced[static_cast<size_t>(axis < 0 ? axis + x.rank() : axis)] = true;
  auto key = [&](int64_t i) {
    std::vector<int64_t> index = unravel(i, shape);
    for (size_t d = 0; d < shape.size(); ++d) {
      if (reduced[d]) index[d] = 0;
    }
    return ravel(index, shape);
  };
  std::map<int64_t, std::pair<double, double>> sums;  // key -> (sum, count)
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto& [sum, count] = sums[key(i)];
    sum += x.double_at(i);
    count += 1;
  }
  std::map<int64_t, double> squares;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const auto& [sum, count] = sums[key(i)];
    squares[key(i)] += std::pow(x.double_at(i) - sum / count, 2);
  }
  std::vector<double> y;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const auto& [sum, count] = sums[key(i)];
    y.push_back((x.double_at(i) - sum / count) / (std::sqrt(squares[key(i)] / count) + 1e-9));
  }
  return y;
}

TEST(NewOps, MeanVarianceNormalization) {
  const Tensor x = sample_tensor({2, 3, 2, 4}, -3, 5, 13);
  // The default axes [0, 2, 3]: one mean and variance per channel.
  expect_close(run_op(op("MeanVarianceNormalization", 13, {x})).at(0), reference_mvn(x, {0, 2, 3}),
               "default axes");
  for (const std::vector<int64_t>& axes : {std::vector<int64_t>{1}, std::vector<int64_t>{2, 3},
                                           std::vector<int64_t>{-1}, std::vector<int64_t>{0, 1, 2, 3}}) {
    Attributes attributes;
    attributes.set("axes", ints_attr(axes));
    expect_close(run_op(op("MeanVarianceNormalization", 13, {x}, attributes)).at(0), reference_mvn(x, axes),
                 "axes " + shape_to_string(axes));
  }
  Attributes bad;
  bad.set("axes", ints_attr({4}));
  expect_error(op("MeanVarianceNormalization", 13, {x}, bad), ErrorKind::invalid_model,
               "MeanVarianceNormalization axis 4 is out of range for rank 4");
}

// ---- CenterCropPad -------------------------------------------------------------------------------

// Per dim, the output starts `begin` before the input (negative: inside it); an odd difference
// leaves the extra element (cropped or padded) at the end.
template <typename T>
std::vector<T> reference_center_crop_pad(const Tensor& x, const Shape& out) {
  const Shape& in = x.shape();
  std::vector<int64_t> begin;
  for (size_t d = 0; d < in.size(); ++d) {
    const int64_t difference = out[d] - in[d];
    begin.push_back(difference >= 0 ? difference / 2 : -((-difference) / 2));
  }
  std::vector<T> y;
  for (int64_t o = 0; o < checked_numel(out); ++o) {
    std::vector<int64_t> index = unravel(o, out);
    bool inside = true;
    for (size_t d = 0; d < in.size(); ++d) {
      index[d] -= begin[d];
      inside = inside && index[d] >= 0 && index[d] < in[d];
    }
    y.push_back(inside ? x.data<T>()[ravel(index, in)] : T(0));
  }
  return y;
}

TEST(NewOps, CenterCropPadCropsPadsAndMixes) {
  Tensor x = Tensor::empty(DType::f32, {3, 4});
  for (int64_t i = 0; i < 12; ++i) x.data<float>()[i] = static_cast<float>(i + 1);
  struct Case {
    std::vector<int64_t> shape, axes;
    Shape out;
  };
  const Case cases[] = {
      {{2, 2}, {}, {2, 2}},      // crop both: rows 0-1 (the odd one off the end), columns 1-2
      {{5, 5}, {}, {5, 5}},      // pad both: a row each side; no column before, one after
      {{1, 6}, {}, {1, 6}},      // crop rows to the middle one, pad a column each side
      {{3, 4}, {}, {3, 4}},      // unchanged
      {{2}, {-1}, {3, 2}},       // only the last axis
      {{7}, {0}, {7, 4}},        // only the first
      {{6, 1}, {1, 0}, {1, 6}},  // axes in any order
  };
  for (const Case& c : cases) {
    Attributes attributes;
    if (!c.axes.empty()) attributes.set("axes", ints_attr(c.axes));
    const Tensor y = run_op(op("CenterCropPad", 18, {x, i64s(c.shape)}, attributes)).at(0);
    ASSERT_EQ(y.shape(), c.out) << shape_to_string(c.shape);
    EXPECT_EQ(values_of<float>(y), reference_center_crop_pad<float>(x, c.out)) << shape_to_string(c.shape);
  }
  // Spot values: the crop to [2, 2] is [[2, 3], [6, 7]].
  EXPECT_EQ(values_of<float>(run_op(op("CenterCropPad", 18, {x, i64s({2, 2})})).at(0)),
            (std::vector<float>{2, 3, 6, 7}));
  // Integers and rank 3.
  Tensor ints = Tensor::empty(DType::i64, {2, 3, 5});
  for (int64_t i = 0; i < 30; ++i) ints.data<int64_t>()[i] = i - 7;
  const Tensor y = run_op(op("CenterCropPad", 18, {ints, i64s({4, 2, 6})})).at(0);
  ASSERT_EQ(y.shape(), (Shape{4, 2, 6}));
  EXPECT_EQ(values_of<int64_t>(y), reference_center_crop_pad<int64_t>(ints, {4, 2, 6}));
}

TEST(NewOps, CenterCropPadErrors) {
  const Tensor x = sample_tensor({3, 4});
  Attributes two_axes;
  two_axes.set("axes", ints_attr({0, 1}));
  expect_error(op("CenterCropPad", 18, {x, i64s({2})}, two_axes), ErrorKind::invalid_argument,
               "CenterCropPad shape has 1 entries for 2 axes");
  Attributes twice;
  twice.set("axes", ints_attr({1, -1}));
  expect_error(op("CenterCropPad", 18, {x, i64s({2, 2})}, twice), ErrorKind::invalid_model,
               "CenterCropPad axes name dim 1 twice");
  expect_error(op("CenterCropPad", 18, {x, i64s({2, -1})}), ErrorKind::invalid_argument,
               "CenterCropPad size -1 for dim 1 must be >= 0");
  expect_error(op("CenterCropPad", 18, {x, sample_tensor({2})}), ErrorKind::invalid_model,
               "CenterCropPad shape must be a 1-D integer tensor");
}

// ---- LpPool and GlobalLpPool ---------------------------------------------------------------------

struct LpPoolCase {
  Shape x;
  double p;
  std::vector<int64_t> kernel, strides, pads, dilations;
};

// (sum over the window's taps inside the input of |x|^p)^(1/p); padding adds nothing.
std::vector<double> reference_lp_pool(const Tensor& x, const LpPoolCase& c, Shape& out) {
  const size_t rank = c.kernel.size();
  const Shape in(c.x.begin() + 2, c.x.end());
  const std::vector<int64_t> strides = c.strides.empty() ? std::vector<int64_t>(rank, 1) : c.strides;
  const std::vector<int64_t> pads = c.pads.empty() ? std::vector<int64_t>(2 * rank, 0) : c.pads;
  const std::vector<int64_t> dilations = c.dilations.empty() ? std::vector<int64_t>(rank, 1) : c.dilations;
  Shape spatial;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t extent = (c.kernel[d] - 1) * dilations[d] + 1;
    spatial.push_back((in[d] + pads[d] + pads[d + rank] - extent) / strides[d] + 1);
  }
  out = {c.x[0], c.x[1]};
  out.insert(out.end(), spatial.begin(), spatial.end());
  const int64_t planes = c.x[0] * c.x[1];
  std::vector<double> y;
  for (int64_t plane = 0; plane < planes; ++plane) {
    for (int64_t o = 0; o < checked_numel(spatial); ++o) {
      const std::vector<int64_t> position = unravel(o, spatial);
      double sum = 0;
      for (int64_t t = 0; t < checked_numel(c.kernel); ++t) {
        const std::vector<int64_t> k = unravel(t, c.kernel);
        std::vector<int64_t> at(rank);
        bool inside = true;
        for (size_t d = 0; d < rank; ++d) {
          at[d] = position[d] * strides[d] + k[d] * dilations[d] - pads[d];
          inside = inside && at[d] >= 0 && at[d] < in[d];
        }
        if (inside) sum += std::pow(std::fabs(x.double_at(plane * checked_numel(in) + ravel(at, in))), c.p);
      }
      y.push_back(std::pow(sum, 1 / c.p));
    }
  }
  return y;
}

TEST(NewOps, LpPoolWithPadsAndStrides) {
  const LpPoolCase cases[] = {
      {{1, 2, 5, 6}, 1, {2, 2}, {}, {}, {}},
      {{2, 2, 5, 6}, 2, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}},
      {{1, 3, 6, 5}, 3, {2, 3}, {2, 1}, {0, 1, 1, 0}, {}},
      {{1, 2, 9}, 3, {3}, {2}, {1, 1}, {}},                                // 1-D
      {{1, 1, 3, 4, 5}, 2, {2, 2, 3}, {1, 2, 2}, {0, 1, 1, 1, 0, 0}, {}},  // 3-D
      {{1, 2, 7, 6}, 2, {2, 2}, {1, 2}, {}, {2, 1}},                       // dilations (opset 18)
  };
  for (const LpPoolCase& c : cases) {
    const Tensor x = sample_tensor(c.x, -3, 3, 17);
    Attributes attributes;
    attributes.set("p", int_attr(static_cast<int64_t>(c.p)));
    attributes.set("kernel_shape", ints_attr(c.kernel));
    if (!c.strides.empty()) attributes.set("strides", ints_attr(c.strides));
    if (!c.pads.empty()) attributes.set("pads", ints_attr(c.pads));
    if (!c.dilations.empty()) attributes.set("dilations", ints_attr(c.dilations));
    Shape out;
    const std::vector<double> expected = reference_lp_pool(x, c, out);
    const std::string what =
        "x " + shape_to_string(c.x) + " p " + std::to_string(c.p) + " kernel " + shape_to_string(c.kernel);
    const Tensor y = run_op(op("LpPool", 18, {x}, attributes)).at(0);
    ASSERT_EQ(y.shape(), out) << what;
    expect_close(y, expected, what);
  }
}

TEST(NewOps, GlobalLpPool) {
  const Tensor x = sample_tensor({2, 3, 4, 5}, -3, 3, 19);
  for (int64_t p : {1, 2, 3}) {
    Attributes attributes;
    attributes.set("p", int_attr(p));
    const Tensor y = run_op(op("GlobalLpPool", 2, {x}, attributes)).at(0);
    ASSERT_EQ(y.shape(), (Shape{2, 3, 1, 1}));
    std::vector<double> expected;
    for (int64_t plane = 0; plane < 6; ++plane) {
      double sum = 0;
      for (int64_t i = 0; i < 20; ++i)
        sum += std::pow(std::fabs(x.double_at(plane * 20 + i)), static_cast<double>(p));
      expected.push_back(std::pow(sum, 1.0 / static_cast<double>(p)));
    }
    expect_close(y, expected, "p " + std::to_string(p));
  }
  // p defaults to 2.
  const Tensor y = run_op(op("GlobalLpPool", 2, {f32s({3, -4}, {1, 1, 2})})).at(0);
  EXPECT_FLOAT_EQ(y.data<float>()[0], 5.0f);
  Attributes zero;
  zero.set("p", int_attr(0));
  expect_error(op("GlobalLpPool", 2, {x}, zero), ErrorKind::invalid_model, "attribute 'p' must be positive");
}

// ---- MaxUnpool -----------------------------------------------------------------------------------

Attributes unpool_attrs(std::vector<int64_t> kernel, std::vector<int64_t> strides) {
  Attributes attributes;
  attributes.set("kernel_shape", ints_attr(std::move(kernel)));
  attributes.set("strides", ints_attr(std::move(strides)));
  return attributes;
}

TEST(NewOps, MaxUnpoolSpecExamples) {
  // ONNX's test_maxunpool_export_without_output_shape and _with_output_shape: the indices are
  // positions in the unpooled tensor [1, 1, 4, 4]; with output_shape [1, 1, 5, 5] each value keeps
  // its (row, column).
  const Tensor x = f32s({5, 6, 7, 8}, {1, 1, 2, 2});
  const Tensor indices = i64s({5, 7, 13, 15}, {1, 1, 2, 2});
  const Tensor y = run_op(op("MaxUnpool", 11, {x, indices}, unpool_attrs({2, 2}, {2, 2}))).at(0);
  ASSERT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 7, 0, 8}));
  const Tensor wide =
      run_op(op("MaxUnpool", 11, {x, indices, i64s({1, 1, 5, 5})}, unpool_attrs({2, 2}, {2, 2}))).at(0);
  ASSERT_EQ(wide.shape(), (Shape{1, 1, 5, 5}));
  EXPECT_EQ(values_of<float>(wide),
            (std::vector<float>{0, 0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 0, 0, 7, 0, 8, 0, 0, 0, 0, 0, 0}));
}

TEST(NewOps, MaxUnpoolUndoesMaxPool) {
  // MaxPool's Indices (flat over the whole input) put every maximum back; the rest is zero. With
  // output_shape, each lands at the same coordinates of the larger output.
  const Tensor x = sample_tensor({2, 3, 4, 6}, -3, 3, 23);
  Attributes pool = unpool_attrs({2, 2}, {2, 2});
  OpRun max_pool = op("MaxPool", 12, {x}, pool);
  max_pool.num_outputs = 2;
  const std::vector<Tensor> pooled = run_op(max_pool);
  ASSERT_EQ(pooled.at(1).shape(), (Shape{2, 3, 2, 3}));
  for (const Shape& output : {Shape{2, 3, 4, 6}, Shape{2, 3, 5, 7}, Shape{3, 4, 4, 6}}) {
    std::vector<Tensor> inputs = {pooled[0], pooled[1]};
    if (output != x.shape()) inputs.push_back(i64s(std::vector<int64_t>(output.begin(), output.end())));
    const Tensor y = run_op(op("MaxUnpool", 11, inputs, pool)).at(0);
    ASSERT_EQ(y.shape(), output);
    std::vector<float> expected(static_cast<size_t>(checked_numel(output)), 0.0f);
    for (int64_t i = 0; i < pooled[0].numel(); ++i) {
      const int64_t index = pooled[1].data<int64_t>()[i];
      expected[static_cast<size_t>(ravel(unravel(index, x.shape()), output))] = pooled[0].data<float>()[i];
      EXPECT_EQ(x.data<float>()[index], pooled[0].data<float>()[i]);
    }
    EXPECT_EQ(values_of<float>(y), expected) << shape_to_string(output);
  }
}

TEST(NewOps, MaxUnpoolErrors) {
  const Tensor x = f32s({5, 6, 7, 8}, {1, 1, 2, 2});
  const Attributes attributes = unpool_attrs({2, 2}, {2, 2});
  expect_error(op("MaxUnpool", 11, {x, i64s({5, 7, 13, 16}, {1, 1, 2, 2})}, attributes),
               ErrorKind::invalid_argument,
               "MaxUnpool index 16 (element 3 of I) is outside the unpooled tensor of shape [1, 1, 4, 4]");
  expect_error(op("MaxUnpool", 11, {x, i64s({0, 1, 2, 3}, {1, 1, 2, 2}), i64s({1, 1, 3, 5})}, attributes),
               ErrorKind::invalid_argument, "is smaller than the unpooled shape [1, 1, 4, 4] in dim 2");
  expect_error(op("MaxUnpool", 11, {x, i64s({0, 1, 2, 3}, {1, 1, 4})}, attributes),
               ErrorKind::invalid_argument, "MaxUnpool indices I have shape [1, 1, 4]");
  expect_error(op("MaxUnpool", 11, {x, i64s({0, 1, 2, 3}, {1, 1, 2, 2})}), ErrorKind::invalid_model,
               "MaxUnpool needs attribute 'kernel_shape'");
}

// ---- Det -----------------------------------------------------------------------------------------

// Laplace expansion along the first row.
double laplace_det(const std::vector<double>& a, int64_t m) {
  if (m == 1) return a[0];
  double det = 0;
  for (int64_t j = 0; j < m; ++j) {
    std::vector<double> minor;
    for (int64_t r = 1; r < m; ++r) {
      for (int64_t c = 0; c < m; ++c) {
        if (c != j) minor.push_back(a[static_cast<size_t>(r * m + c)]);
      }
    }
    det += (j % 2 == 0 ? 1 : -1) * a[static_cast<size_t>(j)] * laplace_det(minor, m - 1);
  }
  return det;
}

TEST(NewOps, DetOfSingleAndBatchedMatrices) {
  // 2x2, a scalar out.
  const Tensor single = run_op(op("Det", 11, {f32s({1, 2, 3, 4}, {2, 2})})).at(0);
  EXPECT_EQ(single.shape(), Shape{});
  EXPECT_FLOAT_EQ(single.data<float>()[0], -2.0f);
  // ONNX's test_det_nd.
  const Tensor nd = run_op(op("Det", 11, {f32s({1, 2, 3, 4, 1, 2, 2, 1, 1, 3, 3, 1}, {3, 2, 2})})).at(0);
  ASSERT_EQ(nd.shape(), (Shape{3}));
  expect_close(nd, {-2, -3, -8}, "det_nd", 1e-6);
  // Batches of 3x3 and 4x4 against Laplace expansion, float32 and float64.
  for (const Shape& shape : {Shape{2, 3, 3, 3}, Shape{3, 4, 4}, Shape{1, 1}}) {
    const Tensor x = sample_tensor(shape, -2, 2, 29);
    const int64_t m = shape.back();
    std::vector<double> expected;
    for (int64_t k = 0; k < x.numel() / (m * m); ++k) {
      std::vector<double> a;
      for (int64_t i = 0; i < m * m; ++i) a.push_back(x.double_at(k * m * m + i));
      expected.push_back(laplace_det(a, m));
    }
    const Tensor y = run_op(op("Det", 11, {x})).at(0);
    ASSERT_EQ(y.shape(), Shape(shape.begin(), shape.end() - 2));
    expect_close(y, expected, shape_to_string(shape), 1e-5);
    std::vector<double> wide;
    for (int64_t i = 0; i < x.numel(); ++i) wide.push_back(x.double_at(i));
    expect_close(run_op(op("Det", 11, {Tensor::from_vector(wide, shape)})).at(0), expected,
                 "float64 " + shape_to_string(shape), 1e-12);
  }
  // A zero leading pivot needs a row swap (each swap flips the sign).
  EXPECT_FLOAT_EQ(run_op(op("Det", 11, {f32s({0, 1, 1, 0}, {2, 2})})).at(0).data<float>()[0], -1.0f);
  EXPECT_FLOAT_EQ(run_op(op("Det", 11, {f32s({0, 2, 0, 3, 0, 0, 0, 0, 4}, {3, 3})})).at(0).data<float>()[0],
                  -24.0f);
}

TEST(NewOps, DetOfSingularMatricesIsZero) {
  // Dependent rows or a zero column: elimination meets a zero pivot, and the determinant is exactly 0.
  const Tensor two = run_op(op("Det", 11, {f32s({1, 2, 2, 4, 0, 3, 0, 5}, {2, 2, 2})})).at(0);
  EXPECT_EQ(values_of<float>(two), (std::vector<float>{0, 0}));
  // A zero column, then rows 1 2 3 / 4 5 6 / 7 8 9 (zero up to rounding).
  const Tensor three =
      run_op(op("Det", 11, {f32s({1, 0, 5, 2, 0, 7, 3, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 3, 3})})).at(0);
  ASSERT_EQ(three.shape(), (Shape{2}));
  EXPECT_EQ(three.data<float>()[0], 0.0f);
  EXPECT_NEAR(three.data<float>()[1], 0.0f, 1e-5);
}

TEST(NewOps, DetErrors) {
  expect_error(op("Det", 11, {sample_tensor({2, 3})}), ErrorKind::invalid_argument,
               "Det input must have shape [*, M, M], got [2, 3]");
  expect_error(op("Det", 11, {sample_tensor({4})}), ErrorKind::invalid_argument, "Det input must have shape");
  expect_error(op("Det", 11, {i64s({1, 0, 0, 1}, {2, 2})}), ErrorKind::type_mismatch, "int64");
}

// ---- NonZero -------------------------------------------------------------------------------------

// Shape inference bounds the output by one column per element; the kernel sizes it as it runs.
TEST(NewOps, NonZeroHasTheRealShape) {
  const Tensor floats = run_op(op("NonZero", 13, {f32s({1, 0, 2, 0, -3, 0}, {2, 3})})).at(0);
  ASSERT_EQ(floats.dtype(), DType::i64);
  ASSERT_EQ(floats.shape(), (Shape{2, 3}));
  EXPECT_EQ(values_of<int64_t>(floats), (std::vector<int64_t>{0, 0, 1, 0, 2, 1}));
  // ONNX's test_nonzero_example.
  const Tensor bools =
      run_op(op("NonZero", 13, {Tensor::from_vector<bool>({true, false, true, true}, {2, 2})})).at(0);
  ASSERT_EQ(bools.shape(), (Shape{2, 3}));
  EXPECT_EQ(values_of<int64_t>(bools), (std::vector<int64_t>{0, 1, 1, 0, 0, 1}));
  // A scalar reads as a one-element 1-D tensor.
  const Tensor scalar = run_op(op("NonZero", 13, {Tensor::scalar(5.0f)})).at(0);
  ASSERT_EQ(scalar.shape(), (Shape{1, 1}));
  EXPECT_EQ(scalar.data<int64_t>()[0], 0);
  EXPECT_EQ(run_op(op("NonZero", 13, {Tensor::scalar(0.0f)})).at(0).shape(), (Shape{1, 0}));
  // Nothing nonzero, and integers in 3-D against a loop.
  EXPECT_EQ(run_op(op("NonZero", 13, {Tensor::zeros(DType::f32, {2, 2, 2})})).at(0).shape(), (Shape{3, 0}));
  Tensor ints = Tensor::empty(DType::i32, {2, 3, 4});
  for (int64_t i = 0; i < 24; ++i)
    ints.data<int32_t>()[i] = (i * 7) % 5 == 0 ? 0 : static_cast<int32_t>(i - 12);
  const Tensor y = run_op(op("NonZero", 13, {ints})).at(0);
  std::vector<std::vector<int64_t>> expected(3);
  for (int64_t i = 0; i < 24; ++i) {
    if (ints.data<int32_t>()[i] == 0) continue;
    const std::vector<int64_t> index = unravel(i, {2, 3, 4});
    for (size_t d = 0; d < 3; ++d) expected[d].push_back(index[d]);
  }
  const auto found = static_cast<int64_t>(expected[0].size());
  ASSERT_EQ(y.shape(), (Shape{3, found}));
  for (int64_t d = 0; d < 3; ++d) {
    for (int64_t j = 0; j < found; ++j) {
      EXPECT_EQ(y.data<int64_t>()[d * found + j], expected[static_cast<size_t>(d)][static_cast<size_t>(j)]);
    }
  }
}

// ---- Compress ------------------------------------------------------------------------------------

Tensor bools(std::vector<bool> values) {
  const auto count = static_cast<int64_t>(values.size());
  return Tensor::from_vector(values, {count});
}

OpRun compress(const Tensor& x, const Tensor& condition, std::optional<int64_t> axis, bool constant) {
  Attributes attributes;
  if (axis) attributes.set("axis", int_attr(*axis));
  OpRun run = op("Compress", 11, {x, condition}, attributes);
  run.inputs_are_constants = constant;
  return run;
}

TEST(NewOps, CompressAlongAnAxisAndFlattened) {
  // ONNX's Compress examples on [[1, 2], [3, 4], [5, 6]].
  const Tensor x = f32s({1, 2, 3, 4, 5, 6}, {3, 2});
  struct Case {
    std::vector<bool> condition;
    std::optional<int64_t> axis;
    Shape shape;
    std::vector<float> values;
  };
  const Case cases[] = {
      {{false, true, true}, 0, {2, 2}, {3, 4, 5, 6}},
      {{false, true}, 1, {3, 1}, {2, 4, 6}},
      {{false, true}, -1, {3, 1}, {2, 4, 6}},
      {{true, true}, 1, {3, 2}, {1, 2, 3, 4, 5, 6}},
      {{false, true, false, false, true}, std::nullopt, {2}, {2, 5}},  // shorter than the 6 elements
      {{false, true}, 0, {1, 2}, {3, 4}},                              // shorter than the 3 rows
      {{false, false, false}, 0, {0, 2}, {}},
  };
  // The condition as a plan-time constant (the exact shape is inferred) and only known when running
  // (the kernel sizes the output).
  for (const bool constant : {true, false}) {
    for (const Case& c : cases) {
      const std::string what = std::string(constant ? "constant" : "run-time") + " condition, axis " +
                               (c.axis ? std::to_string(*c.axis) : "none") + ", " +
                               std::to_string(c.condition.size()) + " entries";
      const Tensor y = run_op(compress(x, bools(c.condition), c.axis, constant)).at(0);
      ASSERT_EQ(y.shape(), c.shape) << what;
      EXPECT_EQ(values_of<float>(y), c.values) << what;
    }
  }
  // A middle axis of an int64 tensor against a loop.
  Tensor ints = Tensor::empty(DType::i64, {2, 4, 3});
  for (int64_t i = 0; i < 24; ++i) ints.data<int64_t>()[i] = 100 + i;
  const Tensor y = run_op(compress(ints, bools({true, false, false, true}), 1, false)).at(0);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 3}));
  std::vector<int64_t> expected;
  for (int64_t a = 0; a < 2; ++a) {
    for (int64_t b : {0, 3}) {
      for (int64_t c = 0; c < 3; ++c) expected.push_back(100 + (a * 4 + b) * 3 + c);
    }
  }
  EXPECT_EQ(values_of<int64_t>(y), expected);
}

TEST(NewOps, CompressErrors) {
  const Tensor x = f32s({1, 2, 3, 4, 5, 6}, {3, 2});
  expect_error(compress(x, bools({true, false, true, true}), 0, true), ErrorKind::invalid_argument,
               "Compress condition has 4 entries, more than the 3 slices along the axis");
  expect_error(compress(x, bools({true, false, true, true, true, true, true}), std::nullopt, true),
               ErrorKind::invalid_argument, "more than the 6 elements of the input");
  expect_error(compress(x, i64s({1, 0}), 0, true), ErrorKind::type_mismatch,
               "Compress input 1 must be bool, got int64");
  expect_error(compress(x, Tensor::from_vector<bool>({true, false}, {1, 2}), 0, true),
               ErrorKind::invalid_argument, "Compress condition must be 1-D");
  expect_error(compress(x, bools({true}), 2, true), ErrorKind::invalid_model,
               "Compress axis 2 is out of range");
}

// ---- Unique --------------------------------------------------------------------------------------

struct UniqueOutputs {
  Shape y_shape;
  std::vector<float> y;
  std::vector<int64_t> indices, inverse, counts;
};

OpRun unique(const Tensor& x, std::optional<int64_t> sorted, std::optional<int64_t> axis) {
  Attributes attributes;
  if (sorted) attributes.set("sorted", int_attr(*sorted));
  if (axis) attributes.set("axis", int_attr(*axis));
  OpRun run = op("Unique", 11, {x}, attributes);
  run.num_outputs = 4;
  return run;
}

void expect_unique(const OpRun& run, const UniqueOutputs& expected, const std::string& what) {
  const std::vector<Tensor> outputs = run_op(run);
  ASSERT_EQ(outputs.size(), 4u) << what;
  ASSERT_EQ(outputs[0].shape(), expected.y_shape) << what;
  EXPECT_EQ(values_of<float>(outputs[0]), expected.y) << what;
  const auto unique_count = static_cast<int64_t>(expected.indices.size());
  EXPECT_EQ(outputs[1].shape(), (Shape{unique_count})) << what;
  EXPECT_EQ(values_of<int64_t>(outputs[1]), expected.indices) << what;
  EXPECT_EQ(outputs[2].shape(), (Shape{static_cast<int64_t>(expected.inverse.size())})) << what;
  EXPECT_EQ(values_of<int64_t>(outputs[2]), expected.inverse) << what;
  EXPECT_EQ(outputs[3].shape(), (Shape{unique_count})) << what;
  EXPECT_EQ(values_of<int64_t>(outputs[3]), expected.counts) << what;
}

TEST(NewOps, UniqueSpecExamples) {
  // ONNX's test_unique_sorted_without_axis and test_unique_not_sorted_without_axis.
  const Tensor flat = f32s({2, 1, 1, 3, 4, 3}, {6});
  expect_unique(unique(flat, std::nullopt, std::nullopt),
                {{4}, {1, 2, 3, 4}, {1, 0, 3, 4}, {1, 0, 0, 2, 3, 2}, {2, 1, 2, 1}}, "sorted by default");
  expect_unique(unique(flat, 0, std::nullopt),
                {{4}, {2, 1, 3, 4}, {0, 1, 3, 4}, {0, 1, 1, 2, 3, 2}, {1, 2, 2, 1}}, "not sorted");
  // test_unique_sorted_with_axis: rows of [[1, 0, 0], [1, 0, 0], [2, 3, 4]].
  const Tensor rows = f32s({1, 0, 0, 1, 0, 0, 2, 3, 4}, {3, 3});
  expect_unique(unique(rows, 1, 0), {{2, 3}, {1, 0, 0, 2, 3, 4}, {0, 2}, {0, 0, 1}, {2, 1}}, "axis 0");
  // test_unique_sorted_with_axis_3d (and with the axis counted from the end).
  const Tensor cube = f32s({1, 1, 0, 1, 2, 1, 0, 1, 1, 1, 0, 1, 2, 1, 0, 1}, {2, 4, 2});
  const UniqueOutputs slices = {
      {2, 3, 2}, {0, 1, 1, 1, 2, 1, 0, 1, 1, 1, 2, 1}, {1, 0, 2}, {1, 0, 2, 0}, {2, 1, 1}};
  expect_unique(unique(cube, 1, 1), slices, "axis 1");
  expect_unique(unique(cube, 1, -2), slices, "axis -2");
}

// Unique over elements by its definition: sorted ascending, or in order of first occurrence.
void check_unique_against_reference(const std::vector<int64_t>& values, bool sorted) {
  std::vector<int64_t> order;  // distinct values in output order
  std::map<int64_t, int64_t> first, count;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!first.count(values[i])) {
      first[values[i]] = static_cast<int64_t>(i);
      order.push_back(values[i]);
    }
    ++count[values[i]];
  }
  if (sorted) std::sort(order.begin(), order.end());
  std::vector<int64_t> indices, counts, inverse;
  for (int64_t v : order) {
    indices.push_back(first[v]);
    counts.push_back(count[v]);
  }
  for (int64_t v : values) inverse.push_back(std::find(order.begin(), order.end(), v) - order.begin());
  const auto n = static_cast<int64_t>(values.size());
  const std::vector<Tensor> outputs = run_op(unique(i64s(values, {n / 3, 3}), sorted ? 1 : 0, std::nullopt));
  const std::string what = sorted ? "sorted" : "not sorted";
  EXPECT_EQ(outputs[0].dtype(), DType::i64);
  EXPECT_EQ(values_of<int64_t>(outputs[0]), order) << what;
  EXPECT_EQ(values_of<int64_t>(outputs[1]), indices) << what;
  EXPECT_EQ(values_of<int64_t>(outputs[2]), inverse) << what;
  EXPECT_EQ(values_of<int64_t>(outputs[3]), counts) << what;
}

TEST(NewOps, UniqueOfIntegersMatchesReference) {
  const std::vector<int64_t> values = {5, -3, 5, 0, 9, -3, -3, 7, 0, 5, 12, -8, 7, 7, 1};
  check_unique_against_reference(values, true);
  check_unique_against_reference(values, false);
  // Only Y requested.
  OpRun one = unique(i64s(values), 1, std::nullopt);
  one.num_outputs = 1;
  const std::vector<Tensor> y = run_op(one);
  EXPECT_EQ(y.at(0).shape(), (Shape{8}));
}

TEST(NewOps, UniqueErrors) {
  expect_error(unique(sample_tensor({4}), 2, std::nullopt), ErrorKind::invalid_model,
               "Unique sorted must be 0 or 1");
  expect_error(unique(sample_tensor({2, 2}), 1, 2), ErrorKind::invalid_model,
               "Unique axis 2 is out of range");
}

// ---- NonMaxSuppression ---------------------------------------------------------------------------

// The boxes and scores of ONNX's NonMaxSuppression tests: three near-identical boxes near 0, two
// near 10, one at 100, as [y1, x1, y2, x2].
const std::vector<float> kNmsBoxes = {0, 0,    1, 1,    0, 0.1f,  1, 1.1f,  0, -0.1f, 1, 0.9f,
                                      0, 10.f, 1, 11.f, 0, 10.1f, 1, 11.1f, 0, 100.f, 1, 101.f};
const std::vector<float> kNmsScores = {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f};

OpRun nms(const Tensor& boxes, const Tensor& scores, std::optional<int64_t> max_per_class, float iou,
          std::optional<float> score_threshold, int64_t center_point_box = 0) {
  Attributes attributes;
  if (center_point_box != 0) attributes.set("center_point_box", int_attr(center_point_box));
  std::vector<Tensor> inputs = {boxes, scores, max_per_class ? i64s({*max_per_class}) : Tensor{},
                                f32s({iou}, {1})};
  if (score_threshold) inputs.push_back(f32s({*score_threshold}, {1}));
  return op("NonMaxSuppression", 11, inputs, attributes);
}

void expect_selected(const OpRun& run, const std::vector<int64_t>& triples, const std::string& what) {
  const Tensor selected = run_op(run).at(0);
  ASSERT_EQ(selected.dtype(), DType::i64) << what;
  ASSERT_EQ(selected.shape(), (Shape{static_cast<int64_t>(triples.size() / 3), 3})) << what;
  EXPECT_EQ(values_of<int64_t>(selected), triples) << what;
}

TEST(NewOps, NonMaxSuppressionSpecExamples) {
  const Tensor boxes = f32s(kNmsBoxes, {1, 6, 4});
  const Tensor scores = f32s(kNmsScores, {1, 1, 6});
  expect_selected(nms(boxes, scores, 3, 0.5f, 0.0f), {0, 0, 3, 0, 0, 0, 0, 0, 5}, "suppress_by_IOU");
  expect_selected(nms(boxes, scores, 3, 0.5f, 0.4f), {0, 0, 3, 0, 0, 0}, "suppress_by_IOU_and_scores");
  expect_selected(nms(boxes, scores, 2, 0.5f, 0.0f), {0, 0, 3, 0, 0, 0}, "limit_output_size");
  expect_selected(nms(boxes, scores, 3, 0.5f, std::nullopt), {0, 0, 3, 0, 0, 0, 0, 0, 5},
                  "no score_threshold");
  // center_point_box 1: the same boxes as [x_center, y_center, width, height].
  const Tensor centres = f32s({0.5f, 0.5f,  1, 1, 0.5f, 0.6f,  1, 1, 0.5f, 0.4f,   1, 1,
                               0.5f, 10.5f, 1, 1, 0.5f, 10.6f, 1, 1, 0.5f, 100.5f, 1, 1},
                              {1, 6, 4});
  expect_selected(nms(centres, scores, 3, 0.5f, 0.0f, 1), {0, 0, 3, 0, 0, 0, 0, 0, 5}, "center_point_box");
  // Corners given the other way round.
  const Tensor flipped = f32s({1, 1,    0, 0,    1, 1.1f,  0, 0.1f,  1, 0.9f,  0, -0.1f,
                               1, 11.f, 0, 10.f, 1, 11.1f, 0, 10.1f, 1, 101.f, 0, 100.f},
                              {1, 6, 4});
  expect_selected(nms(flipped, scores, 3, 0.5f, 0.0f), {0, 0, 3, 0, 0, 0, 0, 0, 5}, "flipped_coordinates");
  // Two classes (the same scores) and two batches.
  std::vector<float> twice = kNmsScores;
  twice.insert(twice.end(), kNmsScores.begin(), kNmsScores.end());
  expect_selected(nms(boxes, f32s(twice, {1, 2, 6}), 2, 0.5f, 0.0f), {0, 0, 3, 0, 0, 0, 0, 1, 3, 0, 1, 0},
                  "two_classes");
  std::vector<float> two_images = kNmsBoxes;
  two_images.insert(two_images.end(), kNmsBoxes.begin(), kNmsBoxes.end());
  expect_selected(nms(f32s(two_images, {2, 6, 4}), f32s(twice, {2, 1, 6}), 2, 0.5f, 0.0f),
                  {0, 0, 3, 0, 0, 0, 1, 0, 3, 1, 0, 0}, "two_batches");
  // Ten identical boxes keep one; a single box is kept.
  std::vector<float> identical;
  for (int i = 0; i < 10; ++i) identical.insert(identical.end(), {0, 0, 1, 1});
  expect_selected(
      nms(f32s(identical, {1, 10, 4}), f32s(std::vector<float>(10, 0.9f), {1, 1, 10}), 3, 0.5f, 0.0f),
      {0, 0, 0}, "identical_boxes");
  expect_selected(nms(f32s({0, 0, 1, 1}, {1, 1, 4}), f32s({0.9f}, {1, 1, 1}), 3, 0.5f, 0.0f), {0, 0, 0},
                  "single_box");
  // Without max_output_boxes_per_class nothing is selected.
  expect_selected(nms(boxes, scores, std::nullopt, 0.5f, 0.0f), {}, "no max_output_boxes_per_class");
}

TEST(NewOps, NonMaxSuppressionErrors) {
  const Tensor boxes = f32s(kNmsBoxes, {1, 6, 4});
  const Tensor scores = f32s(kNmsScores, {1, 1, 6});
  expect_error(nms(boxes, scores, 3, 1.5f, 0.0f), ErrorKind::invalid_argument,
               "NonMaxSuppression iou_threshold must be in [0, 1], got 1.5");
  expect_error(nms(f32s(kNmsBoxes, {1, 8, 3}), scores, 3, 0.5f, 0.0f), ErrorKind::invalid_argument,
               "NonMaxSuppression boxes must have shape [batch, boxes, 4]");
  expect_error(nms(boxes, f32s(kNmsScores, {1, 2, 3}), 3, 0.5f, 0.0f), ErrorKind::invalid_argument,
               "NonMaxSuppression scores must have shape [1, classes, 6]");
  expect_error(nms(boxes, scores, 3, 0.5f, 0.0f, 2), ErrorKind::invalid_model,
               "NonMaxSuppression center_point_box must be 0 (corners) or 1");
}

// ---- RoiAlign ------------------------------------------------------------------------------------

// X: two 4x4 images, x[h][w] = 4h + w and that plus 100. One roi (x1, y1, x2, y2) = (0, 0, 3, 3) on
// each, pooled to 2x2 with 2x2 samples per bin. Bilinear interpolation of a linear image is exact,
// so each bin is 4 * mean(y) + mean(x) over its samples.
OpRun roi_align(int64_t opset, std::optional<std::string> transform, int64_t sampling_ratio) {
  Tensor x = Tensor::empty(DType::f32, {2, 1, 4, 4});
  for (int64_t i = 0; i < 32; ++i) x.data<float>()[i] = static_cast<float>(i % 16 + (i >= 16 ? 100 : 0));
  Attributes attributes;
  attributes.set("output_height", int_attr(2));
  attributes.set("output_width", int_attr(2));
  attributes.set("sampling_ratio", int_attr(sampling_ratio));
  if (transform) attributes.set("coordinate_transformation_mode", string_attr(*transform));
  return op("RoiAlign", opset, {x, f32s({0, 0, 3, 3, 0, 0, 3, 3}, {2, 4}), i64s({0, 1})}, attributes);
}

TEST(NewOps, RoiAlignHandExample) {
  // half_pixel (opset 16's default): the roi spans [-0.5, 2.5], bins of 1.5; samples at -0.125
  // (clamped to 0) and 0.625, then 1.375 and 2.125: bin means 0.3125 and 1.75.
  const std::vector<double> half_pixel = {4 * 0.3125 + 0.3125, 4 * 0.3125 + 1.75, 4 * 1.75 + 0.3125,
                                          4 * 1.75 + 1.75};
  // output_half_pixel (opset 10's only behaviour): [0, 3], samples 0.375, 1.125, 1.875, 2.625: means
  // 0.75 and 2.25.
  const std::vector<double> output_half_pixel = {4 * 0.75 + 0.75, 4 * 0.75 + 2.25, 4 * 2.25 + 0.75,
                                                 4 * 2.25 + 2.25};
  auto both_images = [](std::vector<double> values) {
    for (size_t i = 0; i < 4; ++i) values.push_back(values[i] + 100);
    return values;
  };
  struct Case {
    int64_t opset;
    std::optional<std::string> transform;
    int64_t sampling_ratio;
    const std::vector<double>& expected;
  };
  const Case cases[] = {
      {16, std::nullopt, 2, half_pixel},
      {16, "half_pixel", 0, half_pixel},  // adaptive: ceil(1.5) = 2 samples per bin side
      {16, "output_half_pixel", 2, output_half_pixel},
      {10, std::nullopt, 2, output_half_pixel},
  };
  for (const Case& c : cases) {
    const std::string what = "opset " + std::to_string(c.opset) + " " + c.transform.value_or("default") +
                             " sampling_ratio " + std::to_string(c.sampling_ratio);
    const Tensor y = run_op(roi_align(c.opset, c.transform, c.sampling_ratio)).at(0);
    ASSERT_EQ(y.shape(), (Shape{2, 1, 2, 2})) << what;
    expect_close(y, both_images(c.expected), what, 1e-6);
  }
}

TEST(NewOps, RoiAlignErrors) {
  OpRun run = roi_align(16, std::nullopt, 2);
  run.inputs[2] = Tensor::from_vector<int32_t>({0, 1}, {2});
  expect_error(run, ErrorKind::type_mismatch, "RoiAlign input batch_indices must be int64");
  run = roi_align(16, std::nullopt, 2);
  run.inputs[1] = sample_tensor({2, 5});
  expect_error(run, ErrorKind::invalid_argument, "RoiAlign input rois must have shape [num_rois, 4]");
  run = roi_align(16, std::nullopt, 2);
  run.attributes.set("mode", string_attr("min"));
  expect_error(run, ErrorKind::invalid_model, "RoiAlign mode 'min' is not one of avg, max");
}

// ---- GridSample ----------------------------------------------------------------------------------

TEST(NewOps, GridSampleBilinearZerosHandExample) {
  // X = [[1, 2], [3, 4]]; without align_corners, -1 and 1 are the outer edges: pixel x = gx + 0.5.
  const Tensor x = f32s({1, 2, 3, 4}, {1, 1, 2, 2});
  const Tensor grid = f32s({0, 0, -1, -1, -0.5f, -0.5f,  // centre; corner (-0.5, -0.5); pixel (0, 0)
                            1, 1, 0.5f, -0.5f, 1, 0},    // corner (1.5, 1.5); pixel (1, 0); (1.5, 0.5)
                           {1, 2, 3, 2});
  // The centre averages all four; outside corners read a quarter of one pixel, the rest zeros;
  // (1.5, 0.5) is half of the right column's mean.
  const std::vector<double> expected = {2.5, 0.25, 1.0, 1.0, 2.0, 1.5};
  for (const int64_t opset : {16, 20}) {
    Attributes attributes;
    attributes.set("mode", string_attr(opset >= 20 ? "linear" : "bilinear"));
    attributes.set("padding_mode", string_attr("zeros"));
    attributes.set("align_corners", int_attr(0));
    const Tensor y = run_op(op("GridSample", opset, {x, grid}, attributes)).at(0);
    ASSERT_EQ(y.shape(), (Shape{1, 1, 2, 3}));
    expect_close(y, expected, "opset " + std::to_string(opset), 1e-6);
    // The defaults are the same mode, padding and alignment.
    expect_close(run_op(op("GridSample", opset, {x, grid})).at(0), expected, "defaults", 1e-6);
  }
  // Each opset accepts only its own spelling.
  Attributes old_name;
  old_name.set("mode", string_attr("bilinear"));
  expect_error(op("GridSample", 20, {x, grid}, old_name), ErrorKind::invalid_model,
               "GridSample mode 'bilinear' is not one of linear, nearest, cubic");
  expect_error(op("GridSample", 16, {x, f32s({0, 0, 0}, {1, 1, 1, 3})}), ErrorKind::invalid_argument,
               "GridSample input grid must have shape [1, H_out, W_out, 2]");
}

// ---- Sessions: outputs sized at run time ---------------------------------------------------------

// x [2, 3] -> NonZero "nz" -> idx, optionally read by a Transpose "tr" -> out.
// NonZero of a [2, 3] input, its output read by `reader` (none: the output is the graph's).
Model non_zero_model(const std::string& reader) {
  Model model;
  model.opsets[""] = 13;
  model.graph.inputs = {ValueInfo{"x", DType::f32, true, {Dim{2, ""}, Dim{3, ""}}}};
  Node non_zero;
  non_zero.name = "nz";
  non_zero.op_type = "NonZero";
  non_zero.inputs = {"x"};
  non_zero.outputs = {"idx"};
  model.graph.nodes = {non_zero};
  if (!reader.empty()) {
    Node read;
    read.name = "reader";
    read.op_type = reader;
    read.inputs = {"idx"};
    read.outputs = {"out"};
    model.graph.nodes.push_back(read);
  }
  model.graph.outputs = {ValueInfo{reader.empty() ? "idx" : "out", DType::i64, false, {}}};
  return model;
}

TEST(NewOps, NonZeroGraphOutputHasEachRunsShape) {
  Session session(non_zero_model(""));
  const Tensor first = session.run({{"x", f32s({1, 0, 2, 0, 3, 0}, {2, 3})}}).at("idx");
  ASSERT_EQ(first.shape(), (Shape{2, 3}));
  EXPECT_EQ(values_of<int64_t>(first), (std::vector<int64_t>{0, 0, 1, 0, 2, 1}));
  // The same plan (same input shape), another count.
  const Tensor second = session.run({{"x", f32s({0, 0, 0, 0, 5, 0}, {2, 3})}}).at("idx");
  ASSERT_EQ(second.shape(), (Shape{2, 1}));
  EXPECT_EQ(values_of<int64_t>(second), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(session.run({{"x", Tensor::zeros(DType::f32, {2, 3})}}).at("idx").shape(), (Shape{2, 0}));
  // The first output is the caller's: later runs did not change it.
  EXPECT_EQ(first.shape(), (Shape{2, 3}));
  EXPECT_EQ(values_of<int64_t>(first), (std::vector<int64_t>{0, 0, 1, 0, 2, 1}));
}

TEST(NewOps, NonZeroOutputReadByANodeIsPlannedWhenItRuns) {
  // Shape and Size too: planning them on the bound would give a wrong value, so the readers wait
  // for the run, which plans them for each count it meets.
  for (const char* reader : {"Transpose", "Shape", "Size"}) {
    SCOPED_TRACE(reader);
    Session session(non_zero_model(reader));
    const Tensor three = session.run({{"x", f32s({1, 0, 2, 0, 3, 0}, {2, 3})}}).at("out");
    const Tensor one = session.run({{"x", f32s({0, 0, 0, 0, 5, 0}, {2, 3})}}).at("out");
    if (std::string(reader) == "Transpose") {
      ASSERT_EQ(three.shape(), (Shape{3, 2}));
      EXPECT_EQ(values_of<int64_t>(three), (std::vector<int64_t>{0, 0, 0, 2, 1, 1}));
      ASSERT_EQ(one.shape(), (Shape{1, 2}));
      EXPECT_EQ(values_of<int64_t>(one), (std::vector<int64_t>{1, 1}));
    } else if (std::string(reader) == "Shape") {
      EXPECT_EQ(values_of<int64_t>(three), (std::vector<int64_t>{2, 3}));
      EXPECT_EQ(values_of<int64_t>(one), (std::vector<int64_t>{2, 1}));
    } else {
      EXPECT_EQ(values_of<int64_t>(three), (std::vector<int64_t>{6}));
      EXPECT_EQ(values_of<int64_t>(one), (std::vector<int64_t>{2}));
    }
    // One plan for the model; its last step holds the reader, planned when the run reaches it.
    const std::shared_ptr<const Plan> plan = session.plan_for(std::vector<Shape>{{2, 3}});
    const StepRecord& deferred = plan->steps().back().record;
    EXPECT_EQ(deferred.op_type, "DeferredRegion");
    ASSERT_FALSE(deferred.notes.empty());
    EXPECT_NE(deferred.notes.front().find("1 node from node 'reader'"), std::string::npos)
        << deferred.notes.front();
  }
}

}  // namespace
}  // namespace kiln
