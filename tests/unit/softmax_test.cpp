// Softmax, LogSoftmax and Hardmax through shape inference, kernel selection and the native kernels,
// checked against straightforward loops in double, for both opset semantics: before 13 the input is
// coerced to 2-D at `axis` and each row of the flattened trailing block normalizes together; from 13
// each line along `axis` does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/settings.h"
#include "core/error.h"
#include "core/tensor.h"
#include "op_test_util.h"
#include "runtime/threads.h"

namespace kiln {
namespace {

using testing::int_attr;
using testing::OpRun;
using testing::run_op;
using testing::sample_values;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor run_softmax(const std::string& op_type, const Tensor& x, int64_t opset, const int64_t* axis = nullptr) {
  OpRun run;
  run.op_type = op_type;
  run.opset = opset;
  run.inputs = {x};
  if (axis != nullptr) run.attributes.set("axis", int_attr(*axis));
  return run_op(run).at(0);
}

// The op done the slow way, in double: `groups` of `size` elements `stride` apart normalize together.
std::vector<double> reference(const std::string& op_type, const std::vector<double>& x, const Shape& shape,
                              int64_t axis, int64_t opset) {
  const auto rank = static_cast<int64_t>(shape.size());
  if (axis < 0) axis += rank;
  int64_t outer = 1, size = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    (d < axis ? outer : (opset < 13 || d == axis) ? size : inner) *= shape[d];
  }
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const auto at = [&](int64_t k) { return static_cast<size_t>((o * size + k) * inner + i); };
      double max = -std::numeric_limits<double>::infinity();
      int64_t argmax = 0;
      for (int64_t k = 0; k < size; ++k) {
        if (x[at(k)] > max) {
          max = x[at(k)];
          argmax = k;
        }
      }
      double sum = 0;
      for (int64_t k = 0; k < size; ++k) sum += std::exp(x[at(k)] - max);
      for (int64_t k = 0; k < size; ++k) {
        y[at(k)] = op_type == "Softmax"      ? std::exp(x[at(k)] - max) / sum
                   : op_type == "LogSoftmax" ? x[at(k)] - max - std::log(sum)
                                             : (k == argmax ? 1.0 : 0.0);
      }
    }
  }
  return y;
}

void expect_matches(const Tensor& actual, const std::vector<double>& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(actual.numel()), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double value = actual.dtype() == DType::f64 ? actual.data<double>()[i] : actual.data<float>()[i];
    EXPECT_NEAR(value, expected[i], tolerance * std::max(1.0, std::fabs(expected[i]))) << what << " [" << i << "]";
  }
}

std::vector<double> widen(const std::vector<float>& values) { return {values.begin(), values.end()}; }

TEST(SoftmaxOps, EveryAxisAndBothOpsetSemantics) {
  const Shape shape = {3, 4, 5};
  const std::vector<float> values = sample_values(60, -4, 4);
  const Tensor x = Tensor::from_vector(values, shape);
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
    for (int64_t opset : {11, 13}) {
      for (int64_t axis = -3; axis < 3; ++axis) {
        const std::string what = std::string(op) + " opset " + std::to_string(opset) + " axis " + std::to_string(axis);
        expect_matches(run_softmax(op, x, opset, &axis), reference(op, widen(values), shape, axis, opset), 1e-6, what);
      }
    }
  }
}

TEST(SoftmaxOps, DefaultAxisDependsOnTheOpset) {
  const Shape shape = {2, 3, 4};
  const std::vector<float> values = sample_values(24, -2, 2, 5);
  const Tensor x = Tensor::from_vector(values, shape);
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
    // Opset 11: axis 1, one row of 12 per batch item; opset 13: axis -1, rows of 4.
    expect_matches(run_softmax(op, x, 11), reference(op, widen(values), shape, 1, 11), 1e-6, std::string(op) + " 11");
    expect_matches(run_softmax(op, x, 13), reference(op, widen(values), shape, -1, 13), 1e-6, std::string(op) + " 13");
  }
  // The two semantics really differ: opset 11's rows of 12 sum to 1, not each group of 4.
  const Tensor old_style = run_softmax("Softmax", x, 11);
  double first_four = 0;
  for (int i = 0; i < 4; ++i) first_four += old_style.data<float>()[i];
  EXPECT_LT(first_four, 0.9);
}

// Rows of every length around the vector widths (4, 8, 16 floats, two vectors per step) and past
// the float sums' flush block, on the last axis, which the vectorized row kernels handle.
TEST(SoftmaxOps, RowsOfManyLengths) {
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 70; ++n) lengths.push_back(n);
  for (int64_t n : {127, 128, 256, 1023, 1024, 1025, 3000}) lengths.push_back(n);
  for (int64_t n : lengths) {
    const Shape shape = {3, n};
    const std::vector<float> values = sample_values(3 * n, -10, 10, static_cast<uint32_t>(n));
    const Tensor x = Tensor::from_vector(values, shape);
    for (const char* op : {"Softmax", "LogSoftmax"}) {
      const std::string what = std::string(op) + " rows of " + std::to_string(n);
      expect_matches(run_softmax(op, x, 13), reference(op, widen(values), shape, -1, 13), 2e-6, what);
    }
  }
}

// Softmax of [0, x, -inf...] is the logistic function: checks exp over a wide range. Rows of 32 go
// through the vector loops of every ISA variant; the -inf padding contributes exact zeros.
TEST(SoftmaxOps, ExpIsAccurateAcrossItsRange) {
  constexpr int64_t kRow = 32;
  std::vector<float> values;
  for (float x = -100.0f; x <= 100.0f; x += 0.37f) {
    values.push_back(0.0f);
    values.push_back(x);
    values.insert(values.end(), kRow - 2, -kInf);
  }
  const int64_t rows = static_cast<int64_t>(values.size()) / kRow;
  const Tensor y = run_softmax("Softmax", Tensor::from_vector(values, {rows, kRow}), 13);
  for (int64_t r = 0; r < rows; ++r) {
    const double x = values[r * kRow + 1];
    const double expected = 1.0 / (1.0 + std::exp(x));  // the share of the 0 entry
    EXPECT_NEAR(y.data<float>()[r * kRow], expected, 4e-7 * expected + 1e-37) << "x = " << x;
    EXPECT_EQ(y.data<float>()[r * kRow + 2], 0.0f);
  }
}

TEST(SoftmaxOps, StableForLargeValuesAndMaskedEntries) {
  // Large values would overflow exp() without subtracting the maximum; -inf is a masked position.
  const Tensor x = Tensor::from_vector<float>({1000, 1001, 1002, -kInf, -1000, 0, -kInf, 5}, {2, 4});
  const Tensor y = run_softmax("Softmax", x, 13);
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0);
  const double sum = 1 + e1 + e2;
  EXPECT_NEAR(y.data<float>()[0], e2 / sum, 1e-7);
  EXPECT_NEAR(y.data<float>()[2], 1 / sum, 1e-7);
  EXPECT_EQ(y.data<float>()[3], 0.0f);
  EXPECT_EQ(y.data<float>()[4], 0.0f);  // e^-1005 underflows
  EXPECT_EQ(y.data<float>()[6], 0.0f);
  EXPECT_NEAR(y.data<float>()[7], 1 / (1 + std::exp(-5.0)), 1e-7);
  const Tensor log_y = run_softmax("LogSoftmax", x, 13);
  EXPECT_NEAR(log_y.data<float>()[2], -std::log(sum), 1e-6);
  EXPECT_EQ(log_y.data<float>()[3], -kInf);
}

TEST(SoftmaxOps, NaNRowsStayNaNAndOtherRowsDoNot) {
  std::vector<float> values = sample_values(2 * 40, -1, 1);
  values[13] = kNaN;  // inside the vector loop of row 0
  const Tensor x = Tensor::from_vector(values, {2, 40});
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    const Tensor y = run_softmax(op, x, 13);
    for (int64_t i = 0; i < 40; ++i) EXPECT_TRUE(std::isnan(y.data<float>()[i])) << op << " [" << i << "]";
    for (int64_t i = 40; i < 80; ++i) EXPECT_FALSE(std::isnan(y.data<float>()[i])) << op << " [" << i << "]";
  }
}

TEST(SoftmaxOps, HardmaxPicksTheFirstMaximum) {
  const Tensor x = Tensor::from_vector<float>({1, 3, 3, 0, 7, 7, 7, 7}, {2, 4});
  const Tensor y = run_softmax("Hardmax", x, 13);
  const std::vector<float> expected = {0, 1, 0, 0, 1, 0, 0, 0};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(y.data<float>()[i], expected[i]) << i;
  // Along a non-last axis too.
  const int64_t axis = 0;
  const Tensor columns = run_softmax("Hardmax", Tensor::from_vector<float>({1, 5, 4, 5}, {2, 2}), 13, &axis);
  const std::vector<float> expected_columns = {0, 1, 1, 0};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(columns.data<float>()[i], expected_columns[i]) << i;
}

TEST(SoftmaxOps, AxisBeforeTheLastWithWideColumns) {
  // inner = 300 columns: more than one column tile.
  const Shape shape = {2, 7, 300};
  const std::vector<float> values = sample_values(checked_numel(shape), -5, 5, 9);
  const Tensor x = Tensor::from_vector(values, shape);
  const int64_t axis = 1;
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
    expect_matches(run_softmax(op, x, 13, &axis), reference(op, widen(values), shape, axis, 13), 2e-6, op);
  }
}

TEST(SoftmaxOps, DoubleAndHalfTypes) {
  const Shape shape = {3, 7};
  const std::vector<float> values = sample_values(21, -3, 3);
  const std::vector<double> expected = reference("Softmax", widen(values), shape, -1, 13);
  const Tensor y64 = run_softmax("Softmax", Tensor::from_vector(widen(values), shape), 13);
  ASSERT_EQ(y64.dtype(), DType::f64);
  expect_matches(y64, expected, 1e-14, "double");
  std::vector<Float16> halves;
  for (float v : values) halves.push_back(float_to_float16(v));
  std::vector<double> rounded;
  for (Float16 h : halves) rounded.push_back(float16_to_float(h));
  const std::vector<double> expected_half = reference("LogSoftmax", rounded, shape, -1, 13);
  const Tensor y16 = run_softmax("LogSoftmax", Tensor::from_vector(halves, shape), 13);
  ASSERT_EQ(y16.dtype(), DType::f16);
  for (size_t i = 0; i < expected_half.size(); ++i) {
    EXPECT_NEAR(float16_to_float(y16.data<Float16>()[i]), expected_half[i], 2e-3 * std::fabs(expected_half[i]) + 1e-3);
  }
}

TEST(SoftmaxOps, ResultsDoNotDependOnTheThreadCount) {
  // The attention shape: [batch * heads, 128, 128].
  const Shape shape = {32, 128, 128};
  const Tensor x = Tensor::from_vector(sample_values(checked_numel(shape), -8, 8, 11), shape);
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    Tensor one, two;
    {
      ScopedThreads threads(1);
      one = run_softmax(op, x, 13);
    }
    {
      ScopedThreads threads(2);
      two = run_softmax(op, x, 13);
    }
    EXPECT_EQ(testing::max_abs_diff(one, two), 0.0) << op;
  }
}

TEST(SoftmaxOps, RejectsBadAxesAndTypes) {
  const Tensor x = Tensor::zeros(DType::f32, {2, 3});
  for (int64_t axis : {2, -3}) {
    try {
      run_softmax("Softmax", x, 13, &axis);
      FAIL() << "axis " << axis << " accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::invalid_model);
      EXPECT_NE(std::string(error.what()).find("axis"), std::string::npos) << error.what();
    }
  }
  try {
    run_softmax("LogSoftmax", Tensor::zeros(DType::i32, {2, 3}), 13);
    FAIL() << "int32 input accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::type_mismatch);
  }
  EXPECT_THROW(run_softmax("Hardmax", Tensor::scalar(1.0f), 13), Error);
}

}  // namespace
}  // namespace kiln
