// The random ops through shape inference and the native kernels. Their draws cannot be compared
// with anyone's values, so they are checked statistically on 100k samples (means and variances
// within five standard errors, ranges, Bernoulli frequencies, Multinomial frequencies against the
// softmax of the logits) and for reproducibility: a seed gives the same bits on every run and
// thread count, different seeds differ, unseeded runs differ, and sessions never fold a draw into
// their plan. The generator itself is checked against Random123's known answers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "backends/native/philox.h"
#include "backends/settings.h"
#include "core/error.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "graph/session.h"
#include "op_test_util.h"
#include "runtime/threads.h"

namespace kiln {
namespace {

using testing::float_attr;
using testing::int_attr;
using testing::ints_attr;
using testing::OpRun;
using testing::run_op;

constexpr int64_t kSamples = 100000;
// Five standard errors: a correct generator fails one such check in ~1.7 million.
constexpr double kStandardErrors = 5;

OpRun op(std::string type, std::vector<Tensor> inputs, Attributes attributes = {}) {
  OpRun run;
  run.op_type = std::move(type);
  run.inputs = std::move(inputs);
  run.attributes = std::move(attributes);
  run.opset = 17;
  return run;
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

struct Moments {
  double mean = 0;
  double variance = 0;  // sample variance (n - 1)
};

Moments moments_of(const Tensor& values) {
  Moments m;
  const int64_t n = values.numel();
  for (int64_t i = 0; i < n; ++i) m.mean += values.double_at(i);
  m.mean /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) m.variance += std::pow(values.double_at(i) - m.mean, 2);
  m.variance /= static_cast<double>(n - 1);
  return m;
}

// A frequency of `hits` in `n` trials against probability p.
void expect_frequency(int64_t hits, int64_t n, double p, const std::string& what) {
  const double frequency = static_cast<double>(hits) / static_cast<double>(n);
  const double standard_error = std::sqrt(p * (1 - p) / static_cast<double>(n));
  EXPECT_NEAR(frequency, p, kStandardErrors * standard_error + 1e-12) << what;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

Attributes random_attrs(Shape shape, int64_t dtype, std::optional<float> seed) {
  Attributes attributes;
  attributes.set("shape", ints_attr(shape));
  attributes.set("dtype", int_attr(dtype));
  if (seed) attributes.set("seed", float_attr(*seed));
  return attributes;
}

constexpr int64_t kOnnxFloat = 1;
constexpr int64_t kOnnxFloat16 = 10;
constexpr int64_t kOnnxDouble = 11;
constexpr int64_t kOnnxInt32 = 6;
constexpr int64_t kOnnxInt64 = 7;
constexpr int64_t kOnnxBool = 9;

TEST(RandomPhilox, MatchesRandom123KnownAnswers) {
  // Random123's kat_vectors, the philox4x32 10-round lines.
  using native::philox4x32_10;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (native::PhiloxBlock{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (native::PhiloxBlock{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (native::PhiloxBlock{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  EXPECT_EQ(native::unit_interval(0, 0), 0.0);
  EXPECT_LT(native::unit_interval(0xffffffff, 0xffffffff), 1.0);
}

TEST(RandomNormal, MeanVarianceAndShapeOfTheDistribution) {
  const double mean = 2.5;
  const double scale = 0.5;
  for (int64_t dtype : {kOnnxFloat, kOnnxDouble, kOnnxFloat16}) {
    Attributes attributes = random_attrs({100, kSamples / 100}, dtype, 7.0f);
    attributes.set("mean", float_attr(static_cast<float>(mean)));
    attributes.set("scale", float_attr(static_cast<float>(scale)));
    const Tensor y = run_op(op("RandomNormal", {}, attributes)).at(0);
    ASSERT_EQ(y.shape(), (Shape{100, kSamples / 100}));
    ASSERT_EQ(y.dtype(), dtype == kOnnxFloat ? DType::f32 : dtype == kOnnxDouble ? DType::f64 : DType::f16);
    const Moments m = moments_of(y);
    const double n = static_cast<double>(kSamples);
    // float16 rounds each draw by up to 2^-11 relative: far below these bounds.
    EXPECT_NEAR(m.mean, mean, kStandardErrors * scale / std::sqrt(n)) << "dtype " << dtype;
    EXPECT_NEAR(m.variance, scale * scale, kStandardErrors * scale * scale * std::sqrt(2.0 / (n - 1)))
        << "dtype " << dtype;
    // The share within one and two standard deviations: 68.27% and 95.45% for a normal distribution.
    int64_t within_one = 0;
    int64_t within_two = 0;
    for (int64_t i = 0; i < y.numel(); ++i) {
      const double z = std::fabs(y.double_at(i) - mean) / scale;
      within_one += z < 1;
      within_two += z < 2;
    }
    expect_frequency(within_one, kSamples, std::erf(1 / std::sqrt(2.0)), "within 1 sigma");
    expect_frequency(within_two, kSamples, std::erf(2 / std::sqrt(2.0)), "within 2 sigma");
    // Neighbours are independent (the kernel makes each pair from one Box-Muller draw): their
    // correlation is 0 within its standard error, 1 / sqrt(pairs).
    for (int64_t offset : {0, 1}) {
      double sum = 0;
      int64_t pairs = 0;
      for (int64_t i = offset; i + 1 < y.numel(); i += 2, ++pairs) {
        sum += (y.double_at(i) - mean) * (y.double_at(i + 1) - mean) / (scale * scale);
      }
      EXPECT_NEAR(sum / static_cast<double>(pairs), 0,
                  kStandardErrors / std::sqrt(static_cast<double>(pairs)))
          << "neighbours from offset " << offset << ", dtype " << dtype;
    }
  }
}

TEST(RandomUniform, RangeMomentsAndEvenBins) {
  const double low = -2;
  const double high = 3;
  for (int64_t dtype : {kOnnxFloat, kOnnxDouble, kOnnxFloat16}) {
    Attributes attributes = random_attrs({kSamples}, dtype, 11.0f);
    attributes.set("low", float_attr(static_cast<float>(low)));
    attributes.set("high", float_attr(static_cast<float>(high)));
    const Tensor y = run_op(op("RandomUniform", {}, attributes)).at(0);
    std::vector<int64_t> bins(10, 0);
    for (int64_t i = 0; i < y.numel(); ++i) {
      const double value = y.double_at(i);
      ASSERT_GE(value, low);
      ASSERT_LT(value, high);
      ++bins[static_cast<size_t>((value - low) / (high - low) * 10)];
    }
    const Moments m = moments_of(y);
    const double n = static_cast<double>(kSamples);
    const double variance = (high - low) * (high - low) / 12;
    EXPECT_NEAR(m.mean, (low + high) / 2, kStandardErrors * std::sqrt(variance / n));
    // The variance of a uniform's squared deviation, (h - l)^4 / 80 - ((h - l)^2 / 12)^2, is (h - l)^4 / 180.
    EXPECT_NEAR(m.variance, variance, kStandardErrors * std::sqrt(std::pow(high - low, 4) / 180 / n));
    for (size_t b = 0; b < bins.size(); ++b) {
      expect_frequency(bins[b], kSamples, 0.1,
                       "bin " + std::to_string(b) + " dtype " + std::to_string(dtype));
    }
  }
}

TEST(RandomUniform, RoundingToTheOutputTypeStaysBelowHigh) {
  // float16 has 2^-11 steps below 1, float32 0.0625 steps at 1e6: a draw just below high rounds up
  // to it unless the kernel steps back.
  struct Case {
    int64_t dtype;
    float low;
    float high;
  };
  for (const Case& c :
       {Case{kOnnxFloat16, 0, 1}, Case{kOnnxFloat, 1e6f, 1e6f + 1}, Case{kOnnxFloat16, -1, -0.5f}}) {
    Attributes attributes = random_attrs({2 * kSamples}, c.dtype, 3.0f);
    attributes.set("low", float_attr(c.low));
    attributes.set("high", float_attr(c.high));
    const Tensor y = run_op(op("RandomUniform", {}, attributes)).at(0);
    for (int64_t i = 0; i < y.numel(); ++i) {
      ASSERT_GE(y.double_at(i), c.low);
      ASSERT_LT(y.double_at(i), c.high) << "dtype " << c.dtype;
    }
  }
  // low == high is the one point.
  Attributes attributes = random_attrs({5}, kOnnxFloat, std::nullopt);
  attributes.set("low", float_attr(4));
  attributes.set("high", float_attr(4));
  const Tensor y = run_op(op("RandomUniform", {}, attributes)).at(0);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(y.double_at(i), 4.0);
}

TEST(RandomLike, ShapeAndDtypeFromTheInputUnlessGiven) {
  const Tensor ints = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor doubles = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  for (const std::string type : {"RandomNormalLike", "RandomUniformLike"}) {
    const Tensor like_doubles = run_op(op(type, {doubles})).at(0);
    EXPECT_EQ(like_doubles.shape(), (Shape{3, 2}));
    EXPECT_EQ(like_doubles.dtype(), DType::f64);
    Attributes as_half;
    as_half.set("dtype", int_attr(kOnnxFloat16));
    const Tensor like_ints = run_op(op(type, {ints}, as_half)).at(0);
    EXPECT_EQ(like_ints.shape(), (Shape{2, 3}));
    EXPECT_EQ(like_ints.dtype(), DType::f16);
    expect_error(
        op(type, {ints}), ErrorKind::type_mismatch,
        "output must be float16, float32 or float64, got int64 (the input's dtype; set the dtype attribute)");
    expect_error(op(type, {}), ErrorKind::invalid_model, "expects 1 inputs, got 0");
  }
  // The uniform range holds for the Like form too.
  Attributes range;
  range.set("low", float_attr(10));
  range.set("high", float_attr(11));
  const Tensor y = run_op(op("RandomUniformLike", {Tensor::zeros(DType::f32, {1000})}, range)).at(0);
  for (int64_t i = 0; i < y.numel(); ++i) {
    EXPECT_GE(y.double_at(i), 10);
    EXPECT_LT(y.double_at(i), 11);
  }
}

TEST(RandomBernoulli, FrequenciesFollowTheProbabilities) {
  const std::vector<double> probabilities = {0, 0.1, 0.5, 0.9, 1, 0.25};
  const int64_t per = 20000;
  std::vector<double> input;
  for (double p : probabilities) input.insert(input.end(), per, p);
  const Tensor p = Tensor::from_vector(input, {static_cast<int64_t>(probabilities.size()), per});
  Attributes seeded;
  seeded.set("seed", float_attr(5));
  const Tensor y = run_op(op("Bernoulli", {p}, seeded)).at(0);
  ASSERT_EQ(y.dtype(), DType::f64);  // the input's dtype by default
  ASSERT_EQ(y.shape(), p.shape());
  for (size_t row = 0; row < probabilities.size(); ++row) {
    int64_t ones = 0;
    for (int64_t i = 0; i < per; ++i) {
      const double value = y.double_at(static_cast<int64_t>(row) * per + i);
      ASSERT_TRUE(value == 0 || value == 1);
      ones += value == 1;
    }
    if (probabilities[row] == 0) {
      EXPECT_EQ(ones, 0);
    }
    if (probabilities[row] == 1) {
      EXPECT_EQ(ones, per);
    }
    expect_frequency(ones, per, probabilities[row], "p " + std::to_string(probabilities[row]));
  }
  // Other output types, from float32 and float16 probabilities.
  for (int64_t dtype : {kOnnxBool, kOnnxInt32, kOnnxFloat}) {
    Attributes attributes;
    attributes.set("dtype", int_attr(dtype));
    const Tensor half_p = [&] {
      Tensor t = Tensor::empty(DType::f16, {kSamples});
      for (int64_t i = 0; i < kSamples; ++i) t.data<Float16>()[i] = float_to_float16(0.3f);
      return t;
    }();
    const Tensor draws = run_op(op("Bernoulli", {half_p}, attributes)).at(0);
    int64_t ones = 0;
    for (int64_t i = 0; i < draws.numel(); ++i) ones += draws.double_at(i) == 1;
    expect_frequency(ones, kSamples, float16_to_float(float_to_float16(0.3f)),
                     "dtype " + std::to_string(dtype));
  }
}

TEST(RandomBernoulli, ProbabilitiesOutsideZeroToOneAreErrors) {
  for (double bad : {1.5, -0.25, std::numeric_limits<double>::quiet_NaN()}) {
    expect_error(op("Bernoulli", {Tensor::from_vector<double>({0.5, bad}, {2})}), ErrorKind::invalid_argument,
                 "Bernoulli input[1] = ");
  }
  expect_error(op("Bernoulli", {Tensor::from_vector<int64_t>({0, 1}, {2})}), ErrorKind::type_mismatch,
               "must be a floating-point tensor");
  Attributes bad_dtype;
  bad_dtype.set("dtype", int_attr(8));  // STRING
  expect_error(op("Bernoulli", {Tensor::from_vector<float>({0.5f}, {1})}, bad_dtype),
               ErrorKind::not_implemented, "Bernoulli dtype STRING (8) is not supported");
}

TEST(RandomMultinomial, FrequenciesFollowTheSoftmaxOfTheLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> rows = {
      {1, 2, 3, 0}, {0, -inf, 5, 5}, {-1000, -1000, -1000, -1000}, {50, 0, 0, 0}};
  std::vector<float> flat;
  for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
  const Tensor logits = Tensor::from_vector(flat, {4, 4});
  Attributes attributes;
  attributes.set("sample_size", int_attr(kSamples));
  attributes.set("seed", float_attr(1));
  const Tensor y = run_op(op("Multinomial", {logits}, attributes)).at(0);
  ASSERT_EQ(y.dtype(), DType::i32);
  ASSERT_EQ(y.shape(), (Shape{4, kSamples}));
  for (size_t row = 0; row < rows.size(); ++row) {
    double max_logit = -inf;
    for (float logit : rows[row]) max_logit = std::max<double>(max_logit, logit);
    double total = 0;
    for (float logit : rows[row]) total += std::exp(logit - max_logit);
    std::vector<int64_t> counts(4, 0);
    for (int64_t s = 0; s < kSamples; ++s) {
      const int64_t chosen = y.int_at(static_cast<int64_t>(row) * kSamples + s);
      ASSERT_GE(chosen, 0);
      ASSERT_LT(chosen, 4);
      ++counts[chosen];
    }
    for (size_t c = 0; c < 4; ++c) {
      const double p = std::exp(rows[row][c] - max_logit) / total;
      if (p == 0) {
        EXPECT_EQ(counts[c], 0) << "row " << row << " class " << c;
      }
      expect_frequency(counts[c], kSamples, p, "row " + std::to_string(row) + " class " + std::to_string(c));
    }
  }
  attributes.set("dtype", int_attr(kOnnxInt64));
  EXPECT_EQ(run_op(op("Multinomial", {logits}, attributes)).at(0).dtype(), DType::i64);
}

TEST(RandomMultinomial, MalformedNodesAreErrors) {
  const Tensor logits = Tensor::from_vector<float>({0, 1, 2, 3}, {2, 2});
  expect_error(op("Multinomial", {Tensor::from_vector<float>({0, 1}, {2})}), ErrorKind::invalid_argument,
               "Multinomial input must have rank 2 ([batch_size, class_size])");
  Attributes zero_samples;
  zero_samples.set("sample_size", int_attr(0));
  expect_error(op("Multinomial", {logits}, zero_samples), ErrorKind::invalid_model,
               "'sample_size' must be >= 1, got 0");
  Attributes float_output;
  float_output.set("dtype", int_attr(kOnnxFloat));
  expect_error(op("Multinomial", {logits}, float_output), ErrorKind::type_mismatch,
               "Multinomial dtype must be int32 (6) or int64 (7), got float32");
  expect_error(op("Multinomial", {Tensor::zeros(DType::f32, {2, 0})}), ErrorKind::invalid_argument,
               "no classes to sample from");
  const float inf = std::numeric_limits<float>::infinity();
  expect_error(op("Multinomial", {Tensor::from_vector<float>({0, 1, -inf, -inf}, {2, 2})}),
               ErrorKind::invalid_argument, "row 1 gives every class probability 0");
  expect_error(op("Multinomial", {Tensor::from_vector<float>({0, std::nanf("")}, {1, 2})}),
               ErrorKind::invalid_argument, "Multinomial input[0, 1] = nan is not a log-probability");
}

TEST(RandomOps, MalformedAttributesAreErrors) {
  Attributes no_shape;
  expect_error(op("RandomNormal", {}, no_shape), ErrorKind::invalid_model,
               "RandomNormal needs the attribute 'shape'");
  expect_error(op("RandomUniform", {}, random_attrs({2, -1}, kOnnxFloat, std::nullopt)),
               ErrorKind::invalid_model, "has a negative dim");
  expect_error(op("RandomNormal", {}, random_attrs({2}, kOnnxInt32, std::nullopt)), ErrorKind::type_mismatch,
               "RandomNormal output must be float16, float32 or float64, got int32");
  expect_error(op("RandomNormal", {}, random_attrs({2}, 99, std::nullopt)), ErrorKind::not_implemented,
               "RandomNormal dtype UNKNOWN (99) is not supported");
  Attributes negative_scale = random_attrs({2}, kOnnxFloat, std::nullopt);
  negative_scale.set("scale", float_attr(-1));
  expect_error(op("RandomNormal", {}, negative_scale), ErrorKind::invalid_model,
               "'scale' (a standard deviation) must be >= 0");
  Attributes reversed = random_attrs({2}, kOnnxFloat, std::nullopt);
  reversed.set("low", float_attr(2));
  reversed.set("high", float_attr(1));
  expect_error(op("RandomUniform", {}, reversed), ErrorKind::invalid_model,
               "attribute 'low' (2) must not exceed 'high' (1)");
  Attributes infinite_high = random_attrs({2}, kOnnxFloat, std::nullopt);
  infinite_high.set("high", float_attr(std::numeric_limits<float>::infinity()));
  expect_error(op("RandomUniform", {}, infinite_high), ErrorKind::invalid_model,
               "attribute 'high' must be finite");
  expect_error(op("RandomNormal", {}, random_attrs({2}, kOnnxFloat, std::numeric_limits<float>::quiet_NaN())),
               ErrorKind::invalid_model, "attribute 'seed' must be finite");
  expect_error(
      op("RandomNormal", {Tensor::zeros(DType::f32, {2})}, random_attrs({2}, kOnnxFloat, std::nullopt)),
      ErrorKind::invalid_model, "RandomNormal expects 0 inputs, got 1");
}

// One draw of each op, with `seed` or unseeded.
std::vector<Tensor> draw_each_op(std::optional<float> seed) {
  const auto with_seed = [&](Attributes attributes) {
    if (seed) attributes.set("seed", float_attr(*seed));
    return attributes;
  };
  const int64_t big = 1 << 16;  // large enough for parallel_for to split it
  Attributes multinomial;
  multinomial.set("sample_size", int_attr(big));
  return {
      run_op(op("RandomNormal", {}, random_attrs({big}, kOnnxFloat, seed))).at(0),
      run_op(op("RandomUniform", {}, random_attrs({big + 1}, kOnnxDouble, seed))).at(0),
      run_op(op("RandomNormalLike", {Tensor::zeros(DType::f32, {7, 9})}, with_seed({}))).at(0),
      run_op(op("RandomUniformLike", {Tensor::zeros(DType::f16, {big})}, with_seed({}))).at(0),
      run_op(op("Bernoulli", {Tensor::from_vector(std::vector<float>(big, 0.5f), {big})}, with_seed({})))
          .at(0),
      run_op(
          op("Multinomial", {Tensor::from_vector<float>({0, 0, 0, 0, 1, 2}, {2, 3})}, with_seed(multinomial)))
          .at(0),
  };
}

TEST(RandomSeeds, ASeedReproducesBitsOnEveryRunAndThreadCount) {
  const std::vector<Tensor> first = draw_each_op(42.0f);
  std::vector<Tensor> one_thread;
  {
    ScopedIntraOpThreads threads(1);
    one_thread = draw_each_op(42.0f);
  }
  std::vector<Tensor> two_threads;
  {
    ScopedIntraOpThreads threads(2);
    two_threads = draw_each_op(42.0f);
  }
  const std::vector<Tensor> other_seed = draw_each_op(43.0f);
  const std::vector<Tensor> fractional_seed = draw_each_op(42.5f);
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(same_bits(first[i], one_thread[i])) << "op " << i;
    EXPECT_TRUE(same_bits(first[i], two_threads[i])) << "op " << i;
    EXPECT_FALSE(same_bits(first[i], other_seed[i])) << "op " << i;
    EXPECT_FALSE(same_bits(first[i], fractional_seed[i])) << "op " << i;
  }
}

TEST(RandomSeeds, UnseededDrawsDifferOnEveryRun) {
  const std::vector<Tensor> first = draw_each_op(std::nullopt);
  const std::vector<Tensor> second = draw_each_op(std::nullopt);
  for (size_t i = 0; i < first.size(); ++i) EXPECT_FALSE(same_bits(first[i], second[i])) << "op " << i;
}

// A model with no inputs: an unseeded RandomNormal, a seeded one, and an unseeded RandomUniformLike of
// an initializer (every input a constant, which a foldable op would have folded).
Model random_model() {
  Model model;
  model.opsets[""] = 17;
  model.graph.initializers["zeros"] = Tensor::zeros(DType::f32, {64, 64});
  const auto add = [&](const std::string& type, std::vector<std::string> inputs, Attributes attributes,
                       const std::string& output) {
    Node node;
    node.name = output + "_node";
    node.op_type = type;
    node.inputs = std::move(inputs);
    node.outputs = {output};
    node.attributes = std::move(attributes);
    model.graph.nodes.push_back(node);
    model.graph.outputs.push_back(ValueInfo{output, DType::f32, false, {}});
  };
  add("RandomNormal", {}, random_attrs({64, 64}, kOnnxFloat, std::nullopt), "unseeded");
  add("RandomNormal", {}, random_attrs({64, 64}, kOnnxFloat, 9.0f), "seeded");
  add("RandomUniformLike", {"zeros"}, {}, "like_constant");
  return model;
}

TEST(RandomSessions, DrawsAreNotFoldedIntoThePlan) {
  Session session(random_model());
  const TensorMap first = session.run({});
  const TensorMap second = session.run({});
  EXPECT_FALSE(same_bits(first.at("unseeded"), second.at("unseeded")));
  EXPECT_FALSE(same_bits(first.at("like_constant"), second.at("like_constant")));
  EXPECT_TRUE(same_bits(first.at("seeded"), second.at("seeded")));
  // Another session plans the same seeded draw.
  Session other(random_model());
  EXPECT_TRUE(same_bits(other.run({}).at("seeded"), first.at("seeded")));
}

TEST(RandomSessions, ConcurrentRunsDrawTheirOwnNumbers) {
  Session session(random_model());
  constexpr int kCallers = 4;
  std::vector<TensorMap> results(kCallers);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] { results[c] = session.run({}); });
  }
  for (std::thread& caller : callers) caller.join();
  for (int a = 0; a < kCallers; ++a) {
    EXPECT_TRUE(same_bits(results[a].at("seeded"), results[0].at("seeded")));
    for (int b = a + 1; b < kCallers; ++b) {
      EXPECT_FALSE(same_bits(results[a].at("unseeded"), results[b].at("unseeded"))) << a << " vs " << b;
      EXPECT_FALSE(same_bits(results[a].at("like_constant"), results[b].at("like_constant")))
          << a << " vs " << b;
    }
  }
}

TEST(RandomSessions, DeterministicModeRefusesUnseededDraws) {
  const ScopedSettings deterministic(Settings().set(SettingKey("deterministic"), 1));
  Session session(random_model());
  try {
    session.run({});
    FAIL() << "deterministic mode ran an unseeded RandomNormal";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what())
                  .find("deterministic mode: RandomNormal without a seed draws new numbers on "
                        "every run (give the node a seed attribute)"),
              std::string::npos)
        << error.what();
  }
  // Seeded draws are the same on every run, so deterministic mode runs them.
  Model seeded;
  seeded.opsets[""] = 17;
  Node node;
  node.name = "draw";
  node.op_type = "RandomUniform";
  node.outputs = {"y"};
  node.attributes = random_attrs({8}, kOnnxFloat, 1.0f);
  seeded.graph.nodes.push_back(node);
  seeded.graph.outputs = {ValueInfo{"y", DType::f32, false, {}}};
  Session seeded_session(seeded);
  EXPECT_TRUE(same_bits(seeded_session.run({}).at("y"), seeded_session.run({}).at("y")));
}

}  // namespace
}  // namespace kiln
