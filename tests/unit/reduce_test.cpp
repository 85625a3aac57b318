// Reductions through shape inference, kernel selection and the native kernels, checked against a
// straightforward loop in double: every input element is sent to its output and each output's
// elements are reduced as written in the ONNX spec.
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
using testing::ints_attr;
using testing::OpRun;
using testing::run_op;
using testing::sample_values;

constexpr double kInf = std::numeric_limits<double>::infinity();

const char* const kReductions[] = {"ReduceMean", "ReduceSum",    "ReduceMax",       "ReduceMin",      "ReduceProd",
                                   "ReduceL1",   "ReduceL2",     "ReduceLogSum",    "ReduceLogSumExp", "ReduceSumSquare"};

// Runs a Reduce op with axes as an attribute (or, for ReduceSum from opset 13, as an input).
Tensor reduce(const std::string& op_type, const Tensor& data, const std::vector<int64_t>* axes, bool keepdims,
              int64_t opset = 13) {
  OpRun run;
  run.op_type = op_type;
  run.opset = opset;
  run.inputs = {data};
  run.attributes.set("keepdims", int_attr(keepdims ? 1 : 0));
  if (axes != nullptr) {
    if (op_type == "ReduceSum" && opset >= 13) {
      run.inputs.push_back(Tensor::from_vector(*axes, {static_cast<int64_t>(axes->size())}));
    } else {
      run.attributes.set("axes", ints_attr(*axes));
    }
  }
  return run_op(run).at(0);
}

struct Reference {
  Shape shape;
  std::vector<double> values;
};

// The reduction done the slow way; `axes` empty reduces everything.
Reference reference_reduce(const std::string& op_type, const std::vector<double>& x, const Shape& shape,
                           std::vector<int64_t> axes, bool keepdims) {
  const auto rank = static_cast<int64_t>(shape.size());
  std::vector<bool> reduced(shape.size(), axes.empty());
  for (int64_t axis : axes) reduced[static_cast<size_t>(axis < 0 ? axis + rank : axis)] = true;
  Reference result;
  Shape kept;  // the output shape without keepdims' 1s
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) kept.push_back(shape[d]);
    if (!reduced[d] || keepdims) result.shape.push_back(reduced[d] ? 1 : shape[d]);
  }
  std::vector<std::vector<double>> groups(static_cast<size_t>(checked_numel(kept)));
  for (int64_t flat = 0; flat < static_cast<int64_t>(x.size()); ++flat) {
    int64_t rest = flat, out = 0, stride = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t index = rest % shape[d];
      rest /= shape[d];
      if (!reduced[d]) {
        out += index * stride;
        stride *= shape[d];
      }
    }
    groups[static_cast<size_t>(out)].push_back(x[static_cast<size_t>(flat)]);
  }
  for (const std::vector<double>& group : groups) {
    double sum = 0, prod = 1, l1 = 0, squares = 0, exps = 0, max = -kInf, min = kInf;
    for (double v : group) {
      sum += v;
      prod *= v;
      l1 += std::fabs(v);
      squares += v * v;
      exps += std::exp(v);
      max = std::max(max, v);
      min = std::min(min, v);
    }
    const auto n = static_cast<double>(group.size());
    const double value = op_type == "ReduceMean"        ? sum / n
                         : op_type == "ReduceSum"       ? sum
                         : op_type == "ReduceMax"       ? max
                         : op_type == "ReduceMin"       ? min
                         : op_type == "ReduceProd"      ? prod
                         : op_type == "ReduceL1"        ? l1
                         : op_type == "ReduceL2"        ? std::sqrt(squares)
                         : op_type == "ReduceLogSum"    ? std::log(sum)
                         : op_type == "ReduceLogSumExp" ? std::log(exps)
                                                        : squares;
    result.values.push_back(value);
  }
  return result;
}

void expect_matches(const Tensor& actual, const Reference& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape) << what;
  ASSERT_EQ(actual.dtype(), DType::f32) << what;
  for (size_t i = 0; i < expected.values.size(); ++i) {
    const double value = actual.data<float>()[i];
    const double reference = expected.values[i];
    if (std::isnan(reference)) {
      EXPECT_TRUE(std::isnan(value)) << what << " [" << i << "]";
    } else {
      EXPECT_NEAR(value, reference, tolerance * std::max(1.0, std::fabs(reference))) << what << " [" << i << "]";
    }
  }
}

std::vector<double> widen(const std::vector<float>& values) { return {values.begin(), values.end()}; }

// Every reduction, over every subset of axes of a 3-D tensor (negative spellings too), with and
// without keepdims: covers the rows, columns and strided layouts.
TEST(ReduceOps, EveryReductionOverEveryAxisSubset) {
  const Shape shape = {3, 4, 5};
  // Positive values keep ReduceLogSum defined and ReduceProd in range.
  const std::vector<float> values = sample_values(checked_numel(shape), 0.5f, 1.5f);
  const Tensor data = Tensor::from_vector(values, shape);
  const std::vector<std::vector<int64_t>> axis_sets = {{}, {0}, {1}, {2}, {-1}, {0, 1}, {0, 2}, {1, 2}, {-1, 0}, {0, 1, 2}};
  for (const char* op : kReductions) {
    for (const auto& axes : axis_sets) {
      for (bool keepdims : {true, false}) {
        const std::string what = std::string(op) + " axes " + shape_to_string(axes) + " keepdims " + std::to_string(keepdims);
        const Tensor actual = reduce(op, data, axes.empty() ? nullptr : &axes, keepdims);
        expect_matches(actual, reference_reduce(op, widen(values), shape, axes, keepdims), 1e-6, what);
      }
    }
  }
}

// Rows longer than the vector loops' blocks and not a multiple of any vector width, columns wider
// than a column tile, and one output over a run long enough to split into parallel blocks.
TEST(ReduceOps, LongRowsWideColumnsAndOneHugeOutput) {
  ScopedThreads threads(2);
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
  };
  const Case cases[] = {
      {{7, 1031}, {1}}, {{5, 3, 2053}, {2}}, {{3, 37, 600}, {1}}, {{2, 9, 3, 7}, {0, 2}}, {{40000}, {0}}, {{2, 70001}, {}},
  };
  for (const Case& c : cases) {
    const std::vector<float> values = sample_values(checked_numel(c.shape), -2.0f, 2.0f, 7);
    const Tensor data = Tensor::from_vector(values, c.shape);
    for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2",
                           "ReduceSumSquare", "ReduceLogSumExp"}) {
      const std::string what = std::string(op) + " of " + shape_to_string(c.shape) + " axes " + shape_to_string(c.axes);
      const Tensor actual = reduce(op, data, c.axes.empty() ? nullptr : &c.axes, true);
      // Sums of 140002 values of either sign: compare with the magnitude of what was summed.
      expect_matches(actual, reference_reduce(op, widen(values), c.shape, c.axes, true), 2e-6, what);
    }
  }
}

TEST(ReduceOps, ResultsDoNotDependOnTheThreadCount) {
  const Shape shape = {64, 128, 256};
  const Tensor data = Tensor::from_vector(sample_values(checked_numel(shape), -1.0f, 1.0f, 3), shape);
  const std::vector<int64_t> last = {-1}, middle = {1}, all = {};
  for (const auto* axes : {&last, &middle, &all}) {
    Tensor one, two;
    {
      ScopedThreads threads(1);
      one = reduce("ReduceMean", data, axes->empty() ? nullptr : axes, true);
    }
    {
      ScopedThreads threads(2);
      two = reduce("ReduceMean", data, axes->empty() ? nullptr : axes, true);
    }
    EXPECT_EQ(testing::max_abs_diff(one, two), 0.0) << "axes " << shape_to_string(*axes);
  }
}

TEST(ReduceOps, KeepdimsShapesAndRankZero) {
  const Tensor data = Tensor::from_vector(sample_values(24, 0, 1), {2, 3, 4});
  const std::vector<int64_t> axes = {0, 2};
  EXPECT_EQ(reduce("ReduceMax", data, &axes, true).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(reduce("ReduceMax", data, &axes, false).shape(), (Shape{3}));
  EXPECT_EQ(reduce("ReduceMax", data, nullptr, false).shape(), Shape{});
  EXPECT_EQ(reduce("ReduceMax", data, nullptr, true).shape(), (Shape{1, 1, 1}));
  const Tensor scalar = reduce("ReduceSum", Tensor::scalar(2.5f), nullptr, true);
  EXPECT_EQ(scalar.shape(), Shape{});
  EXPECT_EQ(scalar.data<float>()[0], 2.5f);
}

TEST(ReduceOps, ReduceSumAxesAttributeBeforeOpset13AndInputAfter) {
  const Tensor data = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const std::vector<int64_t> axes = {1};
  const Tensor old_style = reduce("ReduceSum", data, &axes, false, 11);
  EXPECT_EQ(old_style.values<float>()[0], 6.0f);
  EXPECT_EQ(old_style.values<float>()[1], 15.0f);
  const Tensor new_style = reduce("ReduceSum", data, &axes, false, 13);
  EXPECT_EQ(new_style.values<float>()[1], 15.0f);
  // An empty axes input reduces everything, unless noop_with_empty_axes asks for the identity.
  const std::vector<int64_t> none = {};
  EXPECT_EQ(reduce("ReduceSum", data, &none, false, 13).values<float>()[0], 21.0f);
  OpRun noop;
  noop.op_type = "ReduceSum";
  noop.opset = 13;
  noop.inputs = {data, Tensor::from_vector<int64_t>({}, {0})};
  noop.attributes.set("noop_with_empty_axes", int_attr(1));
  const Tensor same = run_op(noop).at(0);
  EXPECT_EQ(same.shape(), data.shape());
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(same.data<float>()[i], data.data<float>()[i]);
}

TEST(ReduceOps, EmptyReducedDimGivesTheIdentity) {
  const Tensor data = Tensor::zeros(DType::f32, {2, 0, 3});
  const std::vector<int64_t> axes = {1};
  const std::pair<const char*, float> cases[] = {
      {"ReduceSum", 0.0f}, {"ReduceProd", 1.0f}, {"ReduceMax", -std::numeric_limits<float>::infinity()},
      {"ReduceMin", std::numeric_limits<float>::infinity()}, {"ReduceL2", 0.0f}};
  for (const auto& [op, identity] : cases) {
    const Tensor out = reduce(op, data, &axes, false);
    ASSERT_EQ(out.shape(), (Shape{2, 3})) << op;
    for (float value : out.values<float>()) EXPECT_EQ(value, identity) << op;
  }
  EXPECT_EQ(reduce("ReduceSum", Tensor::zeros(DType::f32, {0, 4}), &axes, false).shape(), (Shape{0}));
}

TEST(ReduceOps, NaNAndInfinities) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // 40 columns: the NaN sits in the vector loop of the float row kernels, not only the tail.
  std::vector<float> values(80, 1.0f);
  values[17] = nan;
  values[40 + 3] = inf;
  const Tensor data = Tensor::from_vector(values, {2, 40});
  const std::vector<int64_t> axes = {1};
  const Tensor max = reduce("ReduceMax", data, &axes, false);
  EXPECT_TRUE(std::isnan(max.data<float>()[0]));
  EXPECT_EQ(max.data<float>()[1], inf);
  EXPECT_TRUE(std::isnan(reduce("ReduceMin", data, &axes, false).data<float>()[0]));
  EXPECT_TRUE(std::isnan(reduce("ReduceSum", data, &axes, false).data<float>()[0]));
  EXPECT_EQ(reduce("ReduceLogSumExp", data, &axes, false).data<float>()[1], inf);
  // A row of -inf: LogSumExp is -inf, not NaN from -inf - -inf.
  const Tensor minus = Tensor::from_vector<float>({-inf, -inf}, {1, 2});
  EXPECT_EQ(reduce("ReduceLogSumExp", minus, &axes, false).data<float>()[0], -inf);
}

TEST(ReduceOps, LogSumExpIsStableForLargeValues) {
  const Tensor data = Tensor::from_vector<double>({1000, 1000, 999, -1000, 710, 709}, {2, 3});
  const std::vector<int64_t> axes = {1};
  const Tensor out = reduce("ReduceLogSumExp", data, &axes, false);
  ASSERT_EQ(out.dtype(), DType::f64);
  EXPECT_NEAR(out.data<double>()[0], 1000 + std::log(2 + std::exp(-1.0)), 1e-12);
  EXPECT_NEAR(out.data<double>()[1], 710 + std::log(1 + std::exp(-1.0) + std::exp(-1710.0)), 1e-12);
}

TEST(ReduceOps, IntegerAndDoubleTypes) {
  const std::vector<int64_t> axes = {1};
  const Tensor i32 = Tensor::from_vector<int32_t>({1, -2, 7, 4, 5, -9}, {2, 3});
  const Tensor sum = reduce("ReduceSum", i32, &axes, false);
  ASSERT_EQ(sum.dtype(), DType::i32);
  EXPECT_EQ(sum.data<int32_t>()[0], 6);
  EXPECT_EQ(sum.data<int32_t>()[1], 0);
  // Integer means truncate toward zero, like numpy's mean(...).astype(int).
  const Tensor mean = reduce("ReduceMean", Tensor::from_vector<int32_t>({1, 2, -3, -4}, {2, 2}), &axes, false);
  EXPECT_EQ(mean.data<int32_t>()[0], 1);
  EXPECT_EQ(mean.data<int32_t>()[1], -3);
  EXPECT_EQ(reduce("ReduceL1", i32, &axes, false).data<int32_t>()[1], 18);
  EXPECT_EQ(reduce("ReduceSumSquare", i32, &axes, false).data<int32_t>()[0], 54);
  EXPECT_EQ(reduce("ReduceMin", i32, &axes, false).data<int32_t>()[1], -9);
  // int64 values beyond double's 53-bit mantissa stay exact.
  const int64_t big = (int64_t{1} << 60) + 1;
  const Tensor i64 = Tensor::from_vector<int64_t>({big, 1, big - 2, -1}, {2, 2});
  EXPECT_EQ(reduce("ReduceSum", i64, &axes, false).data<int64_t>()[0], big + 1);
  EXPECT_EQ(reduce("ReduceMax", i64, &axes, false).data<int64_t>()[1], big - 2);
  EXPECT_EQ(reduce("ReduceProd", Tensor::from_vector<int64_t>({3, -5, 7, 11}, {1, 4}), &axes, false).data<int64_t>()[0],
            -1155);
  const Tensor u8 = Tensor::from_vector<uint8_t>({200, 3, 255, 0}, {2, 2});
  EXPECT_EQ(reduce("ReduceMax", u8, &axes, false).data<uint8_t>()[1], 255);
  const Tensor f64 = Tensor::from_vector<double>({0.1, 0.2, 0.3, 0.4}, {1, 4});
  EXPECT_DOUBLE_EQ(reduce("ReduceMean", f64, &axes, false).data<double>()[0], 0.25);
}

TEST(ReduceOps, HalfPrecisionAccumulatesInWideTypes) {
  // 2048 ones: a float16 running sum would stall at 2048 long before; the result is exact.
  std::vector<Float16> ones(4096, float_to_float16(1.0f));
  const Tensor data = Tensor::from_vector(ones, {2, 2048});
  const std::vector<int64_t> axes = {1};
  const Tensor sum = reduce("ReduceSum", data, &axes, false);
  ASSERT_EQ(sum.dtype(), DType::f16);
  EXPECT_EQ(float16_to_float(sum.data<Float16>()[0]), 2048.0f);
  EXPECT_EQ(float16_to_float(reduce("ReduceMean", data, &axes, false).data<Float16>()[1]), 1.0f);
}

TEST(ReduceOps, RejectsBadNodes) {
  const Tensor data = Tensor::zeros(DType::f32, {2, 3});
  const std::vector<int64_t> out_of_range = {2}, twice = {1, -1};
  EXPECT_THROW(reduce("ReduceMean", data, &out_of_range, true), Error);
  EXPECT_THROW(reduce("ReduceMean", data, &twice, true), Error);
  EXPECT_THROW(reduce("ReduceSum", data, &twice, true, 13), Error);
  // ReduceMean takes axes as an attribute up to opset 17.
  OpRun axes_input;
  axes_input.op_type = "ReduceMean";
  axes_input.opset = 17;
  axes_input.inputs = {data, Tensor::from_vector<int64_t>({1}, {1})};
  EXPECT_THROW(run_op(axes_input), Error);
  // ReduceSum's axes input must be int64.
  OpRun int32_axes;
  int32_axes.op_type = "ReduceSum";
  int32_axes.opset = 13;
  int32_axes.inputs = {data, Tensor::from_vector<int32_t>({1}, {1})};
  try {
    run_op(int32_axes);
    FAIL() << "int32 axes accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::type_mismatch);
  }
  const Tensor flags = Tensor::zeros(DType::boolean, {2, 3});
  try {
    reduce("ReduceMax", flags, nullptr, true);
    FAIL() << "bool input accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::type_mismatch);
  }
}

// ---- ArgMax / ArgMin ---------------------------------------------------------------------------

Tensor arg(const std::string& op_type, const Tensor& data, int64_t axis, bool keepdims, bool select_last = false) {
  OpRun run;
  run.op_type = op_type;
  run.opset = 13;
  run.inputs = {data};
  run.attributes.set("axis", int_attr(axis));
  run.attributes.set("keepdims", int_attr(keepdims ? 1 : 0));
  run.attributes.set("select_last_index", int_attr(select_last ? 1 : 0));
  return run_op(run).at(0);
}

TEST(ReduceArg, EveryAxisAgainstALoop) {
  const Shape shape = {3, 4, 5};
  // Values from a small set, so ties are common.
  std::vector<float> values = sample_values(60, 0, 4);
  for (float& v : values) v = std::floor(v);
  const Tensor data = Tensor::from_vector(values, shape);
  for (const char* op : {"ArgMax", "ArgMin"}) {
    const bool is_max = std::string(op) == "ArgMax";
    for (int64_t axis = -3; axis < 3; ++axis) {
      for (bool select_last : {false, true}) {
        const int64_t a = axis < 0 ? axis + 3 : axis;
        const Tensor out = arg(op, data, axis, true, select_last);
        Shape expected_shape = shape;
        expected_shape[a] = 1;
        ASSERT_EQ(out.shape(), expected_shape);
        ASSERT_EQ(out.dtype(), DType::i64);
        const std::vector<int64_t> strides = contiguous_strides(shape);
        for (int64_t o = 0; o < out.numel(); ++o) {
          // The output index as an input offset with the reduced coordinate at 0.
          int64_t base = 0, rest = o;
          for (int64_t d = 2; d >= 0; --d) {
            base += (rest % expected_shape[d]) * strides[d];
            rest /= expected_shape[d];
          }
          int64_t best = 0;
          for (int64_t k = 1; k < shape[a]; ++k) {
            const float v = values[base + k * strides[a]], b = values[base + best * strides[a]];
            if ((is_max ? v > b : v < b) || (select_last && v == b)) best = k;
          }
          EXPECT_EQ(out.data<int64_t>()[o], best) << op << " axis " << axis << " select_last " << select_last;
        }
      }
    }
  }
}

TEST(ReduceArg, KeepdimsDefaultsAndSpecialValues) {
  const Tensor data = Tensor::from_vector<float>({1, 5, 5, 2, 9, 0}, {2, 3});
  EXPECT_EQ(arg("ArgMax", data, 1, false).shape(), (Shape{2}));
  EXPECT_EQ(arg("ArgMax", data, 1, false).data<int64_t>()[0], 1);
  EXPECT_EQ(arg("ArgMax", data, 1, false, true).data<int64_t>()[0], 2);
  EXPECT_EQ(arg("ArgMin", data, 0, false).data<int64_t>()[2], 1);
  // The default axis is 0 and keepdims 1.
  OpRun defaults;
  defaults.op_type = "ArgMax";
  defaults.inputs = {data};
  const Tensor out = run_op(defaults).at(0);
  EXPECT_EQ(out.shape(), (Shape{1, 3}));
  EXPECT_EQ(out.data<int64_t>()[0], 1);
  EXPECT_EQ(out.data<int64_t>()[1], 1);
  EXPECT_EQ(out.data<int64_t>()[2], 0);
  // A NaN is the extreme, as in numpy; int64 compares exactly.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(arg("ArgMax", Tensor::from_vector<float>({1, nan, 3, nan}, {4}), 0, false).data<int64_t>()[0], 1);
  EXPECT_EQ(arg("ArgMin", Tensor::from_vector<float>({1, nan, -3}, {3}), 0, false).data<int64_t>()[0], 1);
  const int64_t big = int64_t{1} << 60;
  EXPECT_EQ(arg("ArgMax", Tensor::from_vector<int64_t>({big, big + 1, big}, {3}), 0, false).data<int64_t>()[0], 1);
}

TEST(ReduceArg, RejectsBadAxesAndEmptyDims) {
  EXPECT_THROW(arg("ArgMax", Tensor::zeros(DType::f32, {2, 3}), 2, true), Error);
  EXPECT_THROW(arg("ArgMin", Tensor::zeros(DType::f32, {2, 0}), 1, true), Error);
}

}  // namespace
}  // namespace kiln
