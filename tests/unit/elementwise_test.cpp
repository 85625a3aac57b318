// Elementwise ops through shape inference, kernel selection and the native kernels, checked against
// straightforward loops (in double) and hand-computed values.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backends/settings.h"
#include "core/error.h"
#include "core/tensor.h"
#include "op_test_util.h"
#include "ops/broadcast.h"
#include "runtime/threads.h"

namespace kiln {
namespace {

using testing::float_attr;
using testing::int_attr;
using testing::OpRun;
using testing::run_op;
using testing::sample_values;
using testing::string_attr;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor run_one(const std::string& op_type, std::vector<Tensor> inputs, Attributes attributes = {},
               int64_t opset = 17) {
  OpRun run;
  run.op_type = op_type;
  run.inputs = std::move(inputs);
  run.attributes = std::move(attributes);
  run.opset = opset;
  return run_op(run).at(0);
}

Attributes attrs(std::initializer_list<std::pair<std::string, Attribute>> entries) {
  Attributes result;
  for (const auto& [name, value] : entries) result.set(name, value);
  return result;
}

using testing::sample_tensor;

template <typename T>
std::vector<T> values_of(const Tensor& tensor) {
  const auto span = tensor.values<T>();
  return {span.begin(), span.end()};
}

// Units in the last place of float at `reference`, floored at the smallest subnormal.
double float_ulp(double reference) {
  const float magnitude = static_cast<float>(std::fabs(reference));
  const double ulp = static_cast<double>(std::nextafter(magnitude, kInf)) - magnitude;
  return std::max(ulp, static_cast<double>(std::numeric_limits<float>::denorm_min()));
}

// Each element of `actual` within `max_ulps` of reference(input) computed in double, or within
// `max_absolute` of it; NaN and infinities must match exactly.
void expect_close_to(const Tensor& input, const Tensor& actual, const std::function<double(double)>& reference,
                     double max_ulps, const std::string& what, double max_absolute = 0) {
  ASSERT_EQ(actual.dtype(), DType::f32) << what;
  ASSERT_EQ(actual.shape(), input.shape()) << what;
  const float* x = input.data<float>();
  const float* y = actual.data<float>();
  for (int64_t i = 0; i < input.numel(); ++i) {
    const double expected = reference(x[i]);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(y[i])) << what << "(" << x[i] << ") = " << y[i] << ", expected NaN";
    } else if (std::isinf(static_cast<float>(expected))) {
      EXPECT_EQ(y[i], static_cast<float>(expected)) << what << "(" << x[i] << ")";
    } else {
      const double absolute = std::fabs(static_cast<double>(y[i]) - expected);
      if (absolute <= max_absolute) continue;
      EXPECT_LE(absolute / float_ulp(expected), max_ulps) << what << "(" << x[i] << ") = " << y[i] << ", expected " << expected;
    }
  }
}

// numpy broadcasting done the slow way: the element of `input` that output index `flat` reads.
int64_t broadcast_source(const Shape& input, const Shape& output, int64_t flat) {
  int64_t offset = 0;
  int64_t stride = 1;
  for (size_t k = 0; k < output.size(); ++k) {
    const size_t axis = output.size() - 1 - k;
    const int64_t index = flat % output[axis];
    flat /= output[axis];
    if (k < input.size()) {
      const int64_t dim = input[input.size() - 1 - k];
      if (dim != 1) offset += index * stride;
      stride *= dim;
    }
  }
  return offset;
}

template <typename Out, typename A, typename B, typename F>
std::vector<Out> broadcast_reference(const Tensor& a, const Tensor& b, const Shape& output, F f) {
  std::vector<Out> result(static_cast<size_t>(checked_numel(output)));
  for (int64_t i = 0; i < static_cast<int64_t>(result.size()); ++i) {
    result[i] = f(a.data<A>()[broadcast_source(a.shape(), output, i)], b.data<B>()[broadcast_source(b.shape(), output, i)]);
  }
  return result;
}

// ---- unary -------------------------------------------------------------------------------------

struct UnaryCase {
  const char* op_type;
  std::function<double(double)> reference;
  double max_ulps;
  Attributes attributes = {};
  // For ops whose float evaluation cancels (a * x + b near 0), where only absolute error is small.
  double max_absolute = 0;
};

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

TEST(ElementwiseUnary, FloatOpsMatchTheCLibrary) {
  // Ordinary values, both signs, the edges of exp's range, and the special values.
  std::vector<float> values = sample_values(2000, -12, 12);
  for (float v : {0.0f, -0.0f, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 1e-6f, -1e-6f, 1e-30f, 20.0f, -20.0f, 88.0f, -88.0f,
                  88.7f, -103.0f, -150.0f, 200.0f, kInf, -kInf, kNaN}) {
    values.push_back(v);
  }
  const Tensor x = Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
  const std::vector<UnaryCase> cases = {
      {"Relu", [](double v) { return v < 0 ? 0.0 : v; }, 0},
      {"Neg", [](double v) { return -v; }, 0},
      {"Abs", [](double v) { return std::fabs(v); }, 0},
      {"Sign", [](double v) { return std::isnan(v) ? v : (v > 0 ? 1.0 : (v < 0 ? -1.0 : 0.0)); }, 0},
      {"Exp", [](double v) { return std::exp(v); }, 1},
      {"Sigmoid", sigmoid, 3},
      {"Tanh", [](double v) { return std::tanh(v); }, 2},
      {"Erf", [](double v) { return std::erf(v); }, 3},
      {"Sqrt", [](double v) { return std::sqrt(v); }, 0.5},
      {"Log", [](double v) { return std::log(v); }, 1},
      {"Reciprocal", [](double v) { return 1 / v; }, 0.5},
      {"Floor", [](double v) { return std::floor(v); }, 0},
      {"Ceil", [](double v) { return std::ceil(v); }, 0},
      {"Round", [](double v) { return std::nearbyint(v); }, 0},
      {"Sin", [](double v) { return std::sin(v); }, 1},
      {"Cos", [](double v) { return std::cos(v); }, 1},
      {"Softplus", [](double v) { return v > 0 ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v)); }, 2},
      {"Softsign", [](double v) { return v / (1 + std::fabs(v)); }, 2},
      {"LeakyRelu", [](double v) { return v < 0 ? 0.1 * v : v; }, 1, attrs({{"alpha", float_attr(0.1f)}})},
      {"Elu", [](double v) { return v < 0 ? 2 * std::expm1(v) : v; }, 2, attrs({{"alpha", float_attr(2.0f)}})},
      {"Selu",
       [](double v) {
         const double alpha = 1.67326319217681884765625;
         const double gamma = 1.05070102214813232421875;
         return gamma * (v > 0 ? v : alpha * std::expm1(v));
       },
       3},
      {"Celu", [](double v) { return std::max(0.0, v) + std::min(0.0, 1.5 * std::expm1(v / 1.5)); }, 3,
       attrs({{"alpha", float_attr(1.5f)}})},
      {"HardSigmoid", [](double v) { return std::isnan(v) ? v : std::clamp(0.25 * v + 0.4, 0.0, 1.0); }, 2,
       attrs({{"alpha", float_attr(0.25f)}, {"beta", float_attr(0.4f)}}), 6e-8},
      {"HardSwish", [](double v) { return std::isnan(v) ? v : v * std::clamp(v / 6 + 0.5, 0.0, 1.0); }, 2, {}, 4e-7},
      {"ThresholdedRelu", [](double v) { return v > 2 ? v : 0.0; }, 0, attrs({{"alpha", float_attr(2.0f)}})},
      {"Shrink", [](double v) { return v < -1.5 ? v + 0.5 : (v > 1.5 ? v - 0.5 : 0.0); }, 0.5,
       attrs({{"lambd", float_attr(1.5f)}, {"bias", float_attr(0.5f)}})},
  };
  for (const UnaryCase& c : cases) {
    const Tensor y = run_one(c.op_type, {x}, c.attributes);
    expect_close_to(x, y, c.reference, c.max_ulps, c.op_type, c.max_absolute);
  }
}

// exp, sigmoid, tanh and erf have their own float implementations: sweep them densely, across
// the cut-over points and into the subnormal and saturated ranges.
TEST(ElementwiseUnary, FastFloatFunctionsStayWithinAFewUlps) {
  std::vector<float> values = sample_values(200000, -110, 110, 7);
  const std::vector<float> near_zero = sample_values(20000, -1.2f, 1.2f, 9);
  values.insert(values.end(), near_zero.begin(), near_zero.end());
  for (float v = 1e-38f; v < 1; v *= 1.7f) {
    values.push_back(v);
    values.push_back(-v);
  }
  const Tensor x = Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
  // (Subnormal results count in units of the smallest subnormal.)
  expect_close_to(x, run_one("Exp", {x}), [](double v) { return std::exp(v); }, 1, "Exp");
  expect_close_to(x, run_one("Sigmoid", {x}), sigmoid, 3, "Sigmoid");
  expect_close_to(x, run_one("Tanh", {x}), [](double v) { return std::tanh(v); }, 2, "Tanh");
  expect_close_to(x, run_one("Erf", {x}), [](double v) { return std::erf(v); }, 3, "Erf");

  const Tensor specials = Tensor::from_vector<float>({-kInf, kInf, -200, 200, 89, -104}, {6});
  EXPECT_EQ(values_of<float>(run_one("Exp", {specials})), (std::vector<float>{0, kInf, 0, kInf, kInf, 0}));
  EXPECT_EQ(values_of<float>(run_one("Sigmoid", {specials})), (std::vector<float>{0, 1, 0, 1, 1, 0}));
  EXPECT_EQ(values_of<float>(run_one("Tanh", {specials})), (std::vector<float>{-1, 1, -1, 1, 1, -1}));
  EXPECT_EQ(values_of<float>(run_one("Erf", {specials})), (std::vector<float>{-1, 1, -1, 1, 1, -1}));
  // Subnormal results of exp come out, not flushed to zero.
  const float subnormal = run_one("Exp", {Tensor::scalar(-100.0f)}).data<float>()[0];
  EXPECT_NEAR(subnormal, std::exp(-100.0), 2e-45);
  EXPECT_GT(subnormal, 0.0f);
}

TEST(ElementwiseUnary, OtherFloatTypes) {
  const std::vector<double> source = {-2.5, -1, -0.25, 0, 0.5, 3};
  const Tensor x64 = Tensor::from_vector(source, {2, 3});
  const Tensor y64 = run_one("Tanh", {x64});
  ASSERT_EQ(y64.dtype(), DType::f64);
  for (size_t i = 0; i < source.size(); ++i) EXPECT_DOUBLE_EQ(y64.data<double>()[i], std::tanh(source[i]));

  std::vector<Float16> halves;
  for (double v : source) halves.push_back(float_to_float16(static_cast<float>(v)));
  const Tensor y16 = run_one("Sigmoid", {Tensor::from_vector(halves, {6})});
  ASSERT_EQ(y16.dtype(), DType::f16);
  for (size_t i = 0; i < source.size(); ++i) {
    EXPECT_NEAR(float16_to_float(y16.data<Float16>()[i]), sigmoid(source[i]), 1e-3) << source[i];
  }

  std::vector<BFloat16> brains;
  for (double v : source) brains.push_back(float_to_bfloat16(static_cast<float>(v)));
  const Tensor ybf = run_one("Relu", {Tensor::from_vector(brains, {6})});
  ASSERT_EQ(ybf.dtype(), DType::bf16);
  for (size_t i = 0; i < source.size(); ++i) {
    EXPECT_EQ(bfloat16_to_float(ybf.data<BFloat16>()[i]), std::max(0.0, source[i]));
  }
}

TEST(ElementwiseUnary, IntegerOps) {
  const Tensor x = Tensor::from_vector<int32_t>({-5, -1, 0, 3, std::numeric_limits<int32_t>::min()}, {5});
  EXPECT_EQ(values_of<int32_t>(run_one("Relu", {x})), (std::vector<int32_t>{0, 0, 0, 3, 0}));
  EXPECT_EQ(values_of<int32_t>(run_one("Abs", {x})),
            (std::vector<int32_t>{5, 1, 0, 3, std::numeric_limits<int32_t>::min()}));  // wraps
  EXPECT_EQ(values_of<int32_t>(run_one("Neg", {x})),
            (std::vector<int32_t>{5, 1, 0, -3, std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(values_of<int32_t>(run_one("Sign", {x})), (std::vector<int32_t>{-1, -1, 0, 1, -1}));
  const Tensor bytes = Tensor::from_vector<int8_t>({-4, -1, 0, 1, 4}, {5});
  EXPECT_EQ(values_of<int8_t>(run_one("Shrink", {bytes}, attrs({{"lambd", float_attr(1.5f)}, {"bias", float_attr(1)}}))),
            (std::vector<int8_t>{-3, 0, 0, 0, 3}));
}

TEST(ElementwiseUnary, NotIsNaNIsInf) {
  const Tensor flags = Tensor::from_vector<bool>({true, false, false, true}, {2, 2});
  const Tensor negated = run_one("Not", {flags});
  ASSERT_EQ(negated.dtype(), DType::boolean);
  EXPECT_EQ(values_of<bool>(negated), (std::vector<bool>{false, true, true, false}));

  const Tensor x = Tensor::from_vector<float>({1, kNaN, kInf, -kInf, -0.0f}, {5});
  EXPECT_EQ(values_of<bool>(run_one("IsNaN", {x})), (std::vector<bool>{false, true, false, false, false}));
  EXPECT_EQ(values_of<bool>(run_one("IsInf", {x})), (std::vector<bool>{false, false, true, true, false}));
  EXPECT_EQ(values_of<bool>(run_one("IsInf", {x}, attrs({{"detect_negative", int_attr(0)}}))),
            (std::vector<bool>{false, false, true, false, false}));
  EXPECT_EQ(values_of<bool>(run_one("IsInf", {x}, attrs({{"detect_positive", int_attr(0)}}))),
            (std::vector<bool>{false, false, false, true, false}));
}

TEST(ElementwiseUnary, RoundIsHalfToEvenAndNaNPassesThrough) {
  const Tensor x = Tensor::from_vector<float>({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, 2.6f}, {7});
  EXPECT_EQ(values_of<float>(run_one("Round", {x})), (std::vector<float>{0, 2, 2, -0.0f, -2, 2, 3}));
  const Tensor nan = Tensor::from_vector<float>({kNaN}, {1});
  for (const char* op : {"Relu", "LeakyRelu", "HardSigmoid", "HardSwish", "Clip", "Abs", "Sign"}) {
    EXPECT_TRUE(std::isnan(run_one(op, {nan}).data<float>()[0])) << op;
  }
}

TEST(ElementwiseUnary, LargeTensorsSplitAcrossThreads) {
  const ScopedThreads threads(2);
  const Tensor x = sample_tensor({3, 50001});
  const Tensor y = run_one("Sigmoid", {x});
  expect_close_to(x, y, sigmoid, 3, "Sigmoid");
  const Tensor r = run_one("Relu", {x});
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(r.data<float>()[i], std::max(0.0f, x.data<float>()[i]));
}

TEST(ElementwiseUnary, RejectsWrongDtypes) {
  const Tensor ints = Tensor::from_vector<int32_t>({1, 4}, {2});
  try {
    run_one("Sqrt", {ints});
    FAIL() << "Sqrt accepted int32";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::type_mismatch);
  }
  EXPECT_THROW(run_one("Not", {Tensor::from_vector<float>({1}, {1})}), Error);
  EXPECT_THROW(run_one("Relu", {Tensor::from_vector<bool>({true}, {1})}), Error);
  EXPECT_THROW(run_one("IsNaN", {ints}), Error);
  EXPECT_THROW(run_one("Relu", {ints, ints}), Error);  // too many inputs
}

// ---- Clip --------------------------------------------------------------------------------------

TEST(ElementwiseClip, BoundsAsAttributesBeforeOpset11) {
  const Tensor x = Tensor::from_vector<float>({-3, -1, 0, 2, 7}, {5});
  const Attributes bounds = attrs({{"min", float_attr(-1.5f)}, {"max", float_attr(2.5f)}});
  EXPECT_EQ(values_of<float>(run_one("Clip", {x}, bounds, 6)), (std::vector<float>{-1.5f, -1, 0, 2, 2.5f}));
  EXPECT_EQ(values_of<float>(run_one("Clip", {x}, attrs({{"max", float_attr(0)}}), 6)),
            (std::vector<float>{-3, -1, 0, 0, 0}));
}

TEST(ElementwiseClip, OptionalBoundInputsFromOpset11) {
  const Tensor x = Tensor::from_vector<float>({-3, -1, 0, 2, 7}, {5});
  EXPECT_EQ(values_of<float>(run_one("Clip", {x, Tensor::scalar(0.0f), Tensor::scalar(6.0f)})),
            (std::vector<float>{0, 0, 0, 2, 6}));
  EXPECT_EQ(values_of<float>(run_one("Clip", {x, Tensor(), Tensor::scalar(1.0f)})),
            (std::vector<float>{-3, -1, 0, 1, 1}));
  EXPECT_EQ(values_of<float>(run_one("Clip", {x, Tensor::from_vector<float>({-1}, {1})})),
            (std::vector<float>{-1, -1, 0, 2, 7}));
  EXPECT_EQ(values_of<float>(run_one("Clip", {x})), (std::vector<float>{-3, -1, 0, 2, 7}));
  // min > max: everything becomes max.
  EXPECT_EQ(values_of<float>(run_one("Clip", {x, Tensor::scalar(5.0f), Tensor::scalar(1.0f)})),
            (std::vector<float>{1, 1, 1, 1, 1}));
  const Tensor ints = Tensor::from_vector<int64_t>({-9, 4, 12}, {3});
  EXPECT_EQ(values_of<int64_t>(run_one("Clip", {ints, Tensor::scalar<int64_t>(0), Tensor::scalar<int64_t>(10)})),
            (std::vector<int64_t>{0, 4, 10}));
  EXPECT_EQ(values_of<uint8_t>(run_one("Clip", {Tensor::from_vector<uint8_t>({1, 200}, {2}), Tensor(),
                                                Tensor::scalar<uint8_t>(100)})),
            (std::vector<uint8_t>{1, 100}));
}

TEST(ElementwiseClip, RejectsNonScalarBoundsAndMismatchedTypes) {
  const Tensor x = Tensor::from_vector<float>({1, 2}, {2});
  try {
    run_one("Clip", {x, Tensor::from_vector<float>({0, 1}, {2})});
    FAIL() << "Clip accepted a two-element min";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("min"), std::string::npos) << error.what();
  }
  EXPECT_THROW(run_one("Clip", {x, Tensor::scalar<double>(0)}), Error);
}

// ---- binary ------------------------------------------------------------------------------------

struct ShapePair {
  Shape a;
  Shape b;
  Shape expected;
};

// Equal shapes, scalars, per-channel bias, trailing vectors, rows of two, both sides broadcasting,
// size-1 and empty dims, and shapes big enough to be split across threads mid-row.
const std::vector<ShapePair> kBroadcastCases = {
    {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
    {{2, 3, 4}, {}, {2, 3, 4}},
    {{}, {2, 3, 4}, {2, 3, 4}},
    {{1}, {5}, {5}},
    {{2, 3, 4, 5}, {3, 1, 1}, {2, 3, 4, 5}},
    {{2, 3, 4, 5}, {1, 3, 1, 1}, {2, 3, 4, 5}},
    {{2, 3, 4}, {4}, {2, 3, 4}},
    {{300, 2}, {2}, {300, 2}},
    {{2, 3, 4}, {2, 3, 1}, {2, 3, 4}},
    {{4, 1}, {1, 3}, {4, 3}},
    {{1, 3, 1, 5}, {2, 1, 4, 1}, {2, 3, 4, 5}},
    {{2, 1, 3}, {4, 1}, {2, 4, 3}},
    {{5, 1, 7}, {5, 6, 7}, {5, 6, 7}},
    {{2, 0, 3}, {3}, {2, 0, 3}},
    {{1, 1}, {1}, {1, 1}},
    {{64, 33, 17}, {33, 1}, {64, 33, 17}},
    {{40000}, {40000}, {40000}},
    {{7, 9001}, {7, 1}, {7, 9001}},
    {{9001, 7}, {7}, {9001, 7}},
    {{7}, {9001, 7}, {9001, 7}},
    {{3, 1}, {5000, 3, 1}, {5000, 3, 1}},
};

template <typename F>
void check_float_binary(const char* op, F reference, float a_low = -4) {
  const ScopedThreads threads(2);
  for (const ShapePair& shapes : kBroadcastCases) {
    // PRelu broadcasts only its slope.
    if (std::string(op) == "PRelu" && shapes.a != shapes.expected) continue;
    const Tensor a = sample_tensor(shapes.a, a_low, 4, 3);
    const Tensor b = sample_tensor(shapes.b, 0.5f, 4, 5);  // positive: Div and Pow stay finite
    const Tensor y = run_one(op, {a, b});
    ASSERT_EQ(y.shape(), shapes.expected) << op << " " << shape_to_string(shapes.a) << " " << shape_to_string(shapes.b);
    const std::vector<float> expected = broadcast_reference<float, float, float>(a, b, shapes.expected, reference);
    for (int64_t i = 0; i < y.numel(); ++i) {
      ASSERT_EQ(y.data<float>()[i], expected[i])
          << op << " " << shape_to_string(shapes.a) << " " << shape_to_string(shapes.b) << " at " << i;
    }
  }
}

TEST(ElementwiseBinary, ArithmeticBroadcasts) {
  check_float_binary("Add", [](float x, float y) { return x + y; });
  check_float_binary("Sub", [](float x, float y) { return x - y; });
  check_float_binary("Mul", [](float x, float y) { return x * y; });
  check_float_binary("Div", [](float x, float y) { return x / y; });
  check_float_binary("PRelu", [](float x, float y) { return x < 0 ? x * y : x; });
  check_float_binary("Max", [](float x, float y) { return std::max(x, y); });
  check_float_binary("Min", [](float x, float y) { return std::min(x, y); });
  check_float_binary("Pow", [](float x, float y) { return std::pow(x, y); }, 0);
}

TEST(ElementwiseBinary, ComparisonsGiveBool) {
  const ScopedThreads threads(2);
  struct Comparison {
    const char* op;
    std::function<bool(int64_t, int64_t)> reference;
  };
  const std::vector<Comparison> comparisons = {
      {"Equal", [](int64_t x, int64_t y) { return x == y; }},
      {"Less", [](int64_t x, int64_t y) { return x < y; }},
      {"Greater", [](int64_t x, int64_t y) { return x > y; }},
      {"LessOrEqual", [](int64_t x, int64_t y) { return x <= y; }},
      {"GreaterOrEqual", [](int64_t x, int64_t y) { return x >= y; }},
  };
  for (const ShapePair& shapes : kBroadcastCases) {
    std::vector<int64_t> a_values, b_values;
    for (float v : sample_values(checked_numel(shapes.a), -3, 3, 2)) a_values.push_back(std::lround(v));
    for (float v : sample_values(checked_numel(shapes.b), -3, 3, 4)) b_values.push_back(std::lround(v));
    const Tensor a = Tensor::from_vector(a_values, shapes.a);
    const Tensor b = Tensor::from_vector(b_values, shapes.b);
    for (const Comparison& c : comparisons) {
      const Tensor y = run_one(c.op, {a, b});
      ASSERT_EQ(y.dtype(), DType::boolean);
      ASSERT_EQ(y.shape(), shapes.expected);
      const std::vector<bool> expected = broadcast_reference<bool, int64_t, int64_t>(a, b, shapes.expected, c.reference);
      for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.data<bool>()[i], expected[i]) << c.op << " at " << i;
    }
  }
  // NaN compares unequal to everything.
  const Tensor nan = Tensor::from_vector<float>({kNaN, 1}, {2});
  EXPECT_EQ(values_of<bool>(run_one("Equal", {nan, nan})), (std::vector<bool>{false, true}));
}

TEST(ElementwiseBinary, LogicOnBools) {
  const Tensor a = Tensor::from_vector<bool>({true, true, false, false}, {4, 1});
  const Tensor b = Tensor::from_vector<bool>({true, false}, {1, 2});
  EXPECT_EQ(values_of<bool>(run_one("And", {a, b})), (std::vector<bool>{1, 0, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(values_of<bool>(run_one("Or", {a, b})), (std::vector<bool>{1, 1, 1, 1, 1, 0, 1, 0}));
  EXPECT_EQ(values_of<bool>(run_one("Xor", {a, b})), (std::vector<bool>{0, 1, 0, 1, 1, 0, 1, 0}));
  EXPECT_THROW(run_one("And", {Tensor::from_vector<float>({1}, {1}), b}), Error);
}

TEST(ElementwiseBinary, IntegerDivisionTruncatesLikeC) {
  const Tensor a = Tensor::from_vector<int32_t>({7, -7, 7, -7, 6, std::numeric_limits<int32_t>::min()}, {6});
  const Tensor b = Tensor::from_vector<int32_t>({2, 2, -2, -2, 3, -1}, {6});
  EXPECT_EQ(values_of<int32_t>(run_one("Div", {a, b})),
            (std::vector<int32_t>{3, -3, -3, 3, 2, std::numeric_limits<int32_t>::min()}));
  const Tensor u = Tensor::from_vector<uint8_t>({250, 9}, {2});
  EXPECT_EQ(values_of<uint8_t>(run_one("Div", {u, Tensor::scalar<uint8_t>(4)})), (std::vector<uint8_t>{62, 2}));
  // Integer arithmetic wraps instead of overflowing.
  const Tensor big = Tensor::from_vector<int64_t>({std::numeric_limits<int64_t>::max()}, {1});
  EXPECT_EQ(run_one("Add", {big, Tensor::scalar<int64_t>(1)}).data<int64_t>()[0], std::numeric_limits<int64_t>::min());
  const Tensor u16 = Tensor::from_vector<uint16_t>({65535}, {1});
  EXPECT_EQ(run_one("Mul", {u16, u16}).data<uint16_t>()[0], 1);
  try {
    run_one("Div", {a, Tensor::from_vector<int32_t>({1, 1, 0, 1, 1, 1}, {6})});
    FAIL() << "integer division by zero did not throw";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("division by zero"), std::string::npos) << error.what();
  }
}

TEST(ElementwiseBinary, ModFollowsTheDivisorOrTheDividend) {
  const Tensor a = Tensor::from_vector<int32_t>({7, -7, 7, -7, 6}, {5});
  const Tensor b = Tensor::from_vector<int32_t>({3, 3, -3, -3, 3}, {5});
  EXPECT_EQ(values_of<int32_t>(run_one("Mod", {a, b})), (std::vector<int32_t>{1, 2, -2, -1, 0}));
  EXPECT_EQ(values_of<int32_t>(run_one("Mod", {a, b}, attrs({{"fmod", int_attr(1)}}))),
            (std::vector<int32_t>{1, -1, 1, -1, 0}));
  const Tensor fa = Tensor::from_vector<float>({5.5f, -5.5f, 5.5f, -5.5f}, {4});
  const Tensor fb = Tensor::from_vector<float>({2, 2, -2, -2}, {4});
  EXPECT_EQ(values_of<float>(run_one("Mod", {fa, fb}, attrs({{"fmod", int_attr(1)}}))),
            (std::vector<float>{1.5f, -1.5f, 1.5f, -1.5f}));
  EXPECT_EQ(values_of<float>(run_one("Mod", {fa, fb})), (std::vector<float>{1.5f, 0.5f, -0.5f, -1.5f}));
  EXPECT_THROW(run_one("Mod", {a, Tensor::scalar<int32_t>(0)}), Error);
}

TEST(ElementwiseBinary, PowAcrossTypesAndScalarExponents) {
  const Tensor base = Tensor::from_vector<float>({-2, -0.0f, 0.5f, 1, 3, kInf, -kInf, kNaN}, {8});
  for (float exponent : {0.0f, 1.0f, 2.0f, 3.0f, 0.5f, -1.0f, -2.0f, 1.7f, -0.5f}) {
    const Tensor y = run_one("Pow", {base, Tensor::scalar(exponent)});
    for (int64_t i = 0; i < base.numel(); ++i) {
      const float x = base.data<float>()[i];
      const float expected = std::pow(x, exponent);
      const float actual = y.data<float>()[i];
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(actual)) << x << "^" << exponent;
      } else if (std::isinf(expected)) {
        EXPECT_EQ(actual, expected) << x << "^" << exponent;
      } else {
        EXPECT_NEAR(actual, expected, std::fabs(expected) * 3e-7) << x << "^" << exponent;
        EXPECT_EQ(std::signbit(actual), std::signbit(expected)) << x << "^" << exponent;
      }
    }
  }
  // Float base, integer exponent; integer base, float or integer exponent (ONNX's Pow types).
  const Tensor x = Tensor::from_vector<float>({1, 2, 3}, {3});
  EXPECT_EQ(values_of<float>(run_one("Pow", {x, Tensor::from_vector<int64_t>({4, 5, 6}, {3})})),
            (std::vector<float>{1, 32, 729}));
  const Tensor ints = Tensor::from_vector<int32_t>({1, 2, 3}, {3});
  EXPECT_EQ(values_of<int32_t>(run_one("Pow", {ints, Tensor::from_vector<float>({4, 5, 6}, {3})})),
            (std::vector<int32_t>{1, 32, 729}));
  EXPECT_EQ(values_of<int32_t>(run_one("Pow", {ints, Tensor::from_vector<int64_t>({4, 5, 6}, {3})})),
            (std::vector<int32_t>{1, 32, 729}));
  EXPECT_EQ(values_of<int64_t>(run_one("Pow", {Tensor::from_vector<int64_t>({-2, 1, -1, 5}, {4}),
                                               Tensor::scalar<int64_t>(-3)})),
            (std::vector<int64_t>{0, 1, -1, 0}));
  EXPECT_EQ(values_of<int64_t>(run_one("Pow", {Tensor::from_vector<int64_t>({-2, 10}, {2}),
                                               Tensor::scalar<int64_t>(3)})),
            (std::vector<int64_t>{-8, 1000}));
  // A one-element exponent with more dims still broadcasts the output shape.
  const Tensor y = run_one("Pow", {x, Tensor::from_vector<float>({2}, {1, 1})});
  EXPECT_EQ(y.shape(), (Shape{1, 3}));
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{1, 4, 9}));
  EXPECT_THROW(run_one("Pow", {Tensor::from_vector<uint8_t>({2}, {1}), Tensor::scalar<uint8_t>(2)}), Error);
}

TEST(ElementwiseBinary, BitShift) {
  const Tensor x = Tensor::from_vector<uint8_t>({16, 4, 1, 255}, {4});
  const Tensor s = Tensor::from_vector<uint8_t>({1, 2, 3, 8}, {4});
  EXPECT_EQ(values_of<uint8_t>(run_one("BitShift", {x, s}, attrs({{"direction", string_attr("LEFT")}}))),
            (std::vector<uint8_t>{32, 16, 8, 0}));
  EXPECT_EQ(values_of<uint8_t>(run_one("BitShift", {x, s}, attrs({{"direction", string_attr("RIGHT")}}))),
            (std::vector<uint8_t>{8, 1, 0, 0}));
  EXPECT_THROW(run_one("BitShift", {x, s}, attrs({{"direction", string_attr("UP")}})), Error);
  EXPECT_THROW(run_one("BitShift", {Tensor::from_vector<int32_t>({1}, {1}), Tensor::from_vector<int32_t>({1}, {1})},
                       attrs({{"direction", string_attr("LEFT")}})),
               Error);
}

TEST(ElementwiseBinary, OtherElementTypes) {
  const Tensor a = Tensor::from_vector<double>({1.5, -2.25}, {2, 1});
  const Tensor b = Tensor::from_vector<double>({0.5, 4}, {2});
  EXPECT_EQ(values_of<double>(run_one("Mul", {a, b})), (std::vector<double>{0.75, 6, -1.125, -9}));
  const Tensor h = Tensor::from_vector<Float16>({float_to_float16(1.5f), float_to_float16(-3)}, {2});
  const Tensor sum = run_one("Add", {h, Tensor::from_vector<Float16>({float_to_float16(0.25f)}, {1})});
  ASSERT_EQ(sum.dtype(), DType::f16);
  EXPECT_EQ(float16_to_float(sum.data<Float16>()[0]), 1.75f);
  EXPECT_EQ(float16_to_float(sum.data<Float16>()[1]), -2.75f);
  const Tensor i8 = Tensor::from_vector<int8_t>({100, -100}, {2});
  EXPECT_EQ(values_of<int8_t>(run_one("Sub", {i8, Tensor::scalar<int8_t>(50)})), (std::vector<int8_t>{50, 106}));
}

TEST(ElementwiseBinary, IncompatibleShapesNameBothShapes) {
  try {
    run_one("Add", {sample_tensor({2, 3}), sample_tensor({4})});
    FAIL() << "Add broadcast [2, 3] with [4]";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("[2, 3]"), std::string::npos) << message;
    EXPECT_NE(message.find("[4]"), std::string::npos) << message;
  }
  EXPECT_THROW(run_one("Where", {Tensor::from_vector<bool>({true, false, true}, {3}), sample_tensor({2}),
                                 sample_tensor({1})}),
               Error);
  // PRelu's slope must broadcast to X, not the other way round.
  EXPECT_THROW(run_one("PRelu", {sample_tensor({3}), sample_tensor({2, 3})}), Error);
}

TEST(ElementwiseBinary, RejectsMixedAndWrongDtypes) {
  try {
    run_one("Add", {Tensor::from_vector<float>({1}, {1}), Tensor::from_vector<int32_t>({1}, {1})});
    FAIL() << "Add mixed float32 and int32";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::type_mismatch);
  }
  EXPECT_THROW(run_one("Add", {Tensor::from_vector<bool>({true}, {1}), Tensor::from_vector<bool>({true}, {1})}),
               Error);
  EXPECT_THROW(run_one("Add", {Tensor::from_vector<float>({1}, {1})}), Error);  // one input
}

// ---- variadic ----------------------------------------------------------------------------------

TEST(ElementwiseVariadic, SumMeanMaxMinWithBroadcasting) {
  const Tensor a = Tensor::from_vector<float>({1, 2, 3}, {3});
  const Tensor b = Tensor::from_vector<float>({10, 20}, {2, 1});
  const Tensor c = Tensor::scalar(100.0f);
  EXPECT_EQ(values_of<float>(run_one("Sum", {a})), (std::vector<float>{1, 2, 3}));
  const Tensor sum = run_one("Sum", {a, b, c});
  EXPECT_EQ(sum.shape(), (Shape{2, 3}));
  EXPECT_EQ(values_of<float>(sum), (std::vector<float>{111, 112, 113, 121, 122, 123}));
  // A later input may widen the shape the first pass produced.
  const Tensor widened = run_one("Sum", {c, a, b});
  EXPECT_EQ(values_of<float>(widened), (std::vector<float>{111, 112, 113, 121, 122, 123}));
  EXPECT_EQ(values_of<float>(run_one("Mean", {a, b})), (std::vector<float>{5.5f, 6, 6.5f, 10.5f, 11, 11.5f}));
  EXPECT_EQ(values_of<float>(run_one("Max", {a, Tensor::from_vector<float>({2}, {1}), Tensor::from_vector<float>({0, 0, 5}, {3})})),
            (std::vector<float>{2, 2, 5}));
  EXPECT_EQ(values_of<float>(run_one("Min", {a, b})), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  const Tensor ints = Tensor::from_vector<int64_t>({4, -7}, {2});
  EXPECT_EQ(values_of<int64_t>(run_one("Mean", {ints, Tensor::from_vector<int64_t>({1, 2}, {2})})),
            (std::vector<int64_t>{2, -2}));
  // NaN wins in Max and Min, as in numpy.
  const Tensor nan = Tensor::from_vector<float>({kNaN, 1}, {2});
  const Tensor maximum = run_one("Max", {nan, Tensor::from_vector<float>({3, kNaN}, {2})});
  EXPECT_TRUE(std::isnan(maximum.data<float>()[0]));
  EXPECT_TRUE(std::isnan(maximum.data<float>()[1]));
  EXPECT_THROW(run_one("Sum", {a, Tensor::from_vector<double>({1}, {1})}), Error);
}

// ---- Where -------------------------------------------------------------------------------------

TEST(ElementwiseWhere, BroadcastsAllThreeInputs) {
  const ScopedThreads threads(2);
  const std::vector<std::array<Shape, 3>> cases = {
      {Shape{2, 3}, Shape{2, 3}, Shape{2, 3}}, {Shape{2, 1, 3}, Shape{4, 1}, Shape{}},
      {Shape{3}, Shape{2, 3}, Shape{2, 1}},    {Shape{}, Shape{2, 2}, Shape{2, 2}},
      {Shape{50000}, Shape{1}, Shape{50000}},  {Shape{4, 1, 5}, Shape{3, 5}, Shape{4, 3, 1}},
  };
  for (const auto& shapes : cases) {
    std::vector<bool> flags;
    for (float v : sample_values(checked_numel(shapes[0]), 0, 1, 6)) flags.push_back(v < 0.5f);
    const Tensor condition = Tensor::from_vector(flags, shapes[0]);
    const Tensor x = sample_tensor(shapes[1], 0, 1, 7);
    const Tensor y = sample_tensor(shapes[2], -1, 0, 8);
    const Tensor out = run_one("Where", {condition, x, y});
    const Shape expected_shape = broadcast_shapes(std::vector<Shape>{shapes[0], shapes[1], shapes[2]});
    ASSERT_EQ(out.shape(), expected_shape);
    for (int64_t i = 0; i < out.numel(); ++i) {
      const bool c = condition.data<bool>()[broadcast_source(shapes[0], expected_shape, i)];
      const float expected = c ? x.data<float>()[broadcast_source(shapes[1], expected_shape, i)]
                               : y.data<float>()[broadcast_source(shapes[2], expected_shape, i)];
      ASSERT_EQ(out.data<float>()[i], expected) << i;
    }
  }
  // Element sizes 1, 2 and 8.
  const Tensor condition = Tensor::from_vector<bool>({true, false}, {2});
  EXPECT_EQ(values_of<int64_t>(run_one("Where", {condition, Tensor::from_vector<int64_t>({1, 2}, {2}),
                                                 Tensor::scalar<int64_t>(-1)})),
            (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(values_of<bool>(run_one("Where", {condition, Tensor::from_vector<bool>({false, false}, {2}),
                                              Tensor::from_vector<bool>({true, true}, {2})})),
            (std::vector<bool>{false, true}));
  const Tensor halves = run_one("Where", {condition, Tensor::scalar(float_to_float16(2)), Tensor::scalar(float_to_float16(3))});
  EXPECT_EQ(float16_to_float(halves.data<Float16>()[0]), 2.0f);
  EXPECT_EQ(float16_to_float(halves.data<Float16>()[1]), 3.0f);
  EXPECT_THROW(run_one("Where", {Tensor::from_vector<float>({1}, {1}), sample_tensor({1}), sample_tensor({1})}), Error);
  EXPECT_THROW(run_one("Where", {condition, sample_tensor({2}), Tensor::from_vector<double>({1}, {1})}), Error);
}

// ---- Cast --------------------------------------------------------------------------------------

// ONNX TensorProto codes.
constexpr int64_t kOnnxFloat = 1;
constexpr int64_t kOnnxUint8 = 2;
constexpr int64_t kOnnxInt32 = 6;
constexpr int64_t kOnnxInt64 = 7;
constexpr int64_t kOnnxString = 8;
constexpr int64_t kOnnxBool = 9;
constexpr int64_t kOnnxFloat16 = 10;
constexpr int64_t kOnnxDouble = 11;
constexpr int64_t kOnnxBFloat16 = 16;

Tensor cast(const Tensor& x, int64_t to) { return run_one("Cast", {x}, attrs({{"to", int_attr(to)}})); }

TEST(ElementwiseCast, RoundTripsThroughHalfTypes) {
  // Values float16 and bfloat16 represent exactly come back unchanged.
  const Tensor exact = Tensor::from_vector<float>({0, -0.0f, 1, -2.5f, 0.125f, 1024, -40960, kInf, -kInf}, {9});
  const Tensor half = cast(exact, kOnnxFloat16);
  ASSERT_EQ(half.dtype(), DType::f16);
  EXPECT_EQ(values_of<float>(cast(half, kOnnxFloat)), values_of<float>(exact));
  const Tensor brain = cast(exact, kOnnxBFloat16);
  ASSERT_EQ(brain.dtype(), DType::bf16);
  EXPECT_EQ(values_of<float>(cast(brain, kOnnxFloat)), values_of<float>(exact));
  // Rounding to nearest even: 1 + 2^-11 is halfway between two float16 values.
  const Tensor halfway = Tensor::from_vector<float>({1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 70000}, {3});
  EXPECT_EQ(values_of<float>(cast(cast(halfway, kOnnxFloat16), kOnnxFloat)),
            (std::vector<float>{1, 1.0f + 2.0f / 1024, kInf}));
  EXPECT_TRUE(std::isnan(cast(cast(Tensor::scalar(kNaN), kOnnxFloat16), kOnnxFloat).data<float>()[0]));
  // double -> float16 -> double.
  const Tensor doubles = Tensor::from_vector<double>({0.5, -3}, {2});
  EXPECT_EQ(values_of<double>(cast(cast(doubles, kOnnxFloat16), kOnnxDouble)), (std::vector<double>{0.5, -3}));
}

TEST(ElementwiseCast, FloatToIntegerTruncatesAndSaturates) {
  const Tensor x = Tensor::from_vector<float>({2.7f, -2.7f, 1e20f, -1e20f, kNaN, 300, -1}, {7});
  EXPECT_EQ(values_of<int32_t>(cast(x, kOnnxInt32)),
            (std::vector<int32_t>{2, -2, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(), 0,
                                  300, -1}));
  EXPECT_EQ(values_of<uint8_t>(cast(x, kOnnxUint8)), (std::vector<uint8_t>{2, 0, 255, 0, 0, 255, 0}));
  const Tensor longs = Tensor::from_vector<int64_t>({-1, 0, 5, (int64_t{1} << 40)}, {4});
  EXPECT_EQ(values_of<bool>(cast(longs, kOnnxBool)), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(values_of<int32_t>(cast(longs, kOnnxInt32)), (std::vector<int32_t>{-1, 0, 5, 0}));  // wraps
  EXPECT_EQ(values_of<float>(cast(Tensor::from_vector<bool>({true, false}, {2}), kOnnxFloat)),
            (std::vector<float>{1, 0}));
  EXPECT_EQ(values_of<int64_t>(cast(Tensor::from_vector<uint8_t>({255}, {1}), kOnnxInt64)), (std::vector<int64_t>{255}));
}

TEST(ElementwiseCast, CastLikeTakesTheSecondInputsType) {
  const Tensor x = Tensor::from_vector<float>({1.5f, -2}, {2});
  const Tensor y = run_one("CastLike", {x, Tensor::from_vector<int64_t>({0}, {1})});
  ASSERT_EQ(y.dtype(), DType::i64);
  EXPECT_EQ(values_of<int64_t>(y), (std::vector<int64_t>{1, -2}));
  EXPECT_THROW(run_one("CastLike", {x}), Error);
}

TEST(ElementwiseCast, RejectsStringsAndUnknownCodes) {
  const Tensor x = Tensor::from_vector<float>({1}, {1});
  try {
    cast(x, kOnnxString);
    FAIL() << "Cast to STRING";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::not_implemented);
    EXPECT_NE(std::string(error.what()).find("STRING"), std::string::npos) << error.what();
  }
  EXPECT_THROW(cast(x, 99), Error);
  EXPECT_THROW(run_one("Cast", {x}), Error);  // 'to' is required
}

}  // namespace
}  // namespace kiln
