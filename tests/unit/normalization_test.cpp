// BatchNormalization (inference), LayerNormalization and InstanceNormalization through shape
// inference, kernel selection and the native kernels, checked against straightforward loops in
// double (the formulas as the ONNX spec writes them).
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

using testing::float_attr;
using testing::int_attr;
using testing::OpRun;
using testing::run_op;
using testing::sample_values;

using testing::sample_tensor;

void expect_matches(const Tensor& actual, const std::vector<double>& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(actual.numel()), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double value = actual.dtype() == DType::f64 ? actual.data<double>()[i] : actual.data<float>()[i];
    EXPECT_NEAR(value, expected[i], tolerance * std::max(1.0, std::fabs(expected[i]))) << what << " [" << i << "]";
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

// ---- BatchNormalization ------------------------------------------------------------------------

OpRun batch_norm(const Tensor& x, int64_t opset, float epsilon = 1e-5f) {
  const int64_t channels = x.dim(1);
  OpRun run;
  run.op_type = "BatchNormalization";
  run.opset = opset;
  run.attributes.set("epsilon", float_attr(epsilon));
  run.inputs = {x, sample_tensor({channels}, 0.5f, 2.0f, 2), sample_tensor({channels}, -1.0f, 1.0f, 3),
                sample_tensor({channels}, -1.0f, 1.0f, 4), sample_tensor({channels}, 0.1f, 3.0f, 5)};
  return run;
}

// y = scale * (x - mean) / sqrt(var + epsilon) + B, per channel (axis 1).
std::vector<double> reference_batch_norm(const OpRun& run, double epsilon) {
  const Tensor& x = run.inputs[0];
  const int64_t channels = x.dim(1);
  const int64_t plane = x.numel() / (x.dim(0) * channels);
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = (i / plane) % channels;
    const auto param = [&](int input) { return run.inputs[input].double_at(c); };
    y[i] = param(1) * (x.double_at(i) - param(3)) / std::sqrt(param(4) + epsilon) + param(2);
  }
  return y;
}

TEST(NormBatchNorm, MatchesTheFormulaAcrossRanksAndOpsets) {
  const Shape shapes[] = {{4, 3}, {2, 3, 7}, {2, 3, 4, 5}, {1, 2, 3, 2, 2}};
  for (const Shape& shape : shapes) {
    for (int64_t opset : {7, 9, 14, 15}) {
      const OpRun run = batch_norm(sample_tensor(shape, -3, 3), opset, 0.01f);
      expect_matches(run_op(run).at(0), reference_batch_norm(run, 0.01f), 1e-6,
                     shape_to_string(shape) + " opset " + std::to_string(opset));
    }
  }
}

TEST(NormBatchNorm, DoubleAndMixedParameterTypes) {
  OpRun run = batch_norm(sample_tensor({2, 3, 4}, -3, 3), 15);
  const std::vector<double> expected = reference_batch_norm(run, 1e-5);
  std::vector<double> wide(expected.size());
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = run.inputs[0].double_at(static_cast<int64_t>(i));
  // Opset 15 lets scale/B and mean/var have their own floating types.
  OpRun mixed = run;
  std::vector<double> mean(3), var(3);
  for (int c = 0; c < 3; ++c) {
    mean[c] = run.inputs[3].double_at(c);
    var[c] = run.inputs[4].double_at(c);
  }
  mixed.inputs[3] = Tensor::from_vector(mean, {3});
  mixed.inputs[4] = Tensor::from_vector(var, {3});
  expect_matches(run_op(mixed).at(0), expected, 1e-6, "float X, double mean/var");
  OpRun as_double = mixed;
  as_double.inputs[0] = Tensor::from_vector(wide, {2, 3, 4});
  const Tensor y = run_op(as_double).at(0);
  ASSERT_EQ(y.dtype(), DType::f64);
  expect_matches(y, expected, 1e-6, "double X");
}

TEST(NormBatchNorm, SpatialZeroBeforeOpset9HasPerActivationStatistics) {
  const Shape shape = {2, 3, 4};
  OpRun run;
  run.op_type = "BatchNormalization";
  run.opset = 7;
  run.attributes.set("spatial", int_attr(0));
  run.inputs = {sample_tensor(shape, -3, 3), sample_tensor({3, 4}, 0.5f, 2, 2), sample_tensor({3, 4}, -1, 1, 3),
                sample_tensor({3, 4}, -1, 1, 4), sample_tensor({3, 4}, 0.1f, 3, 5)};
  const Tensor y = run_op(run).at(0);
  std::vector<double> expected;
  for (int64_t i = 0; i < 24; ++i) {
    const int64_t k = i % 12;  // the parameter of this (channel, position)
    const auto param = [&](int input) { return run.inputs[input].double_at(k); };
    expected.push_back(param(1) * (run.inputs[0].double_at(i) - param(3)) / std::sqrt(param(4) + 1e-5) + param(2));
  }
  expect_matches(y, expected, 1e-6, "spatial=0");
  // With spatial=0 the parameters must have X's shape without the batch dim.
  OpRun channel_params = batch_norm(sample_tensor(shape, -3, 3), 7);
  channel_params.attributes.set("spatial", int_attr(0));
  expect_error(channel_params, ErrorKind::invalid_argument, "spatial=0");
}

TEST(NormBatchNorm, RejectsTrainingAndBadShapes) {
  OpRun training = batch_norm(sample_tensor({2, 3, 4}, -1, 1), 15);
  training.attributes.set("training_mode", int_attr(1));
  expect_error(training, ErrorKind::not_implemented, "training_mode");
  OpRun statistics = batch_norm(sample_tensor({2, 3, 4}, -1, 1), 9);
  statistics.num_outputs = 5;
  expect_error(statistics, ErrorKind::not_implemented, "training");
  OpRun wrong_scale = batch_norm(sample_tensor({2, 3, 4}, -1, 1), 15);
  wrong_scale.inputs[1] = sample_tensor({4}, 1, 2);
  expect_error(wrong_scale, ErrorKind::invalid_argument, "scale");
  OpRun rank_one = batch_norm(sample_tensor({2, 3}, -1, 1), 15);
  rank_one.inputs[0] = sample_tensor({3}, -1, 1);
  expect_error(rank_one, ErrorKind::invalid_argument, "rank");
  OpRun missing = batch_norm(sample_tensor({2, 3}, -1, 1), 15);
  missing.inputs.pop_back();
  EXPECT_THROW(run_op(missing), Error);
}

// ---- LayerNormalization ------------------------------------------------------------------------

struct LayerNormResult {
  std::vector<double> y, mean, inv_std;
};

// The spec's function body: Mean = ReduceMean(X), D = X - Mean, Var = ReduceMean(D * D),
// InvStdDev = 1 / sqrt(Var + epsilon), Y = D * InvStdDev * Scale + B.
LayerNormResult reference_layer_norm(const OpRun& run, int64_t axis, double epsilon) {
  const Tensor& x = run.inputs[0];
  if (axis < 0) axis += x.rank();
  int64_t size = 1;
  for (int64_t d = axis; d < x.rank(); ++d) size *= x.dim(d);
  const bool has_bias = run.inputs.size() > 2 && run.inputs[2].defined();
  LayerNormResult result;
  for (int64_t row = 0; row < x.numel() / size; ++row) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < size; ++i) mean += x.double_at(row * size + i);
    mean /= static_cast<double>(size);
    for (int64_t i = 0; i < size; ++i) var += std::pow(x.double_at(row * size + i) - mean, 2);
    var /= static_cast<double>(size);
    const double inv_std = 1 / std::sqrt(var + epsilon);
    for (int64_t i = 0; i < size; ++i) {
      const double bias = has_bias ? run.inputs[2].double_at(i) : 0.0;
      result.y.push_back((x.double_at(row * size + i) - mean) * inv_std * run.inputs[1].double_at(i) + bias);
    }
    result.mean.push_back(mean);
    result.inv_std.push_back(inv_std);
  }
  return result;
}

OpRun layer_norm(const Tensor& x, int64_t axis, bool with_bias) {
  const Shape normalized(x.shape().begin() + (axis < 0 ? axis + x.rank() : axis), x.shape().end());
  OpRun run;
  run.op_type = "LayerNormalization";
  run.opset = 17;
  run.attributes.set("axis", int_attr(axis));
  run.inputs = {x, sample_tensor(normalized, 0.5f, 1.5f, 2)};
  if (with_bias) run.inputs.push_back(sample_tensor(normalized, -1, 1, 3));
  return run;
}

TEST(NormLayerNorm, EveryAxisWithAndWithoutBias) {
  const Shape shape = {2, 3, 5, 4};
  const Tensor x = sample_tensor(shape, -3, 3);
  for (int64_t axis = -4; axis < 4; ++axis) {
    for (bool with_bias : {true, false}) {
      OpRun run = layer_norm(x, axis, with_bias);
      run.num_outputs = 3;
      const std::vector<Tensor> outputs = run_op(run);
      const LayerNormResult expected = reference_layer_norm(run, axis, 1e-5);
      const std::string what = "axis " + std::to_string(axis) + (with_bias ? " with bias" : " without bias");
      expect_matches(outputs[0], expected.y, 2e-6, what);
      // Mean and InvStdDev keep the leading dims and have 1 for each normalized one.
      Shape stats = shape;
      for (int64_t d = axis < 0 ? axis + 4 : axis; d < 4; ++d) stats[d] = 1;
      EXPECT_EQ(outputs[1].shape(), stats) << what;
      EXPECT_EQ(outputs[2].shape(), stats) << what;
      ASSERT_EQ(outputs[1].dtype(), DType::f32);
      expect_matches(outputs[1], expected.mean, 1e-6, what + " Mean");
      expect_matches(outputs[2], expected.inv_std, 1e-6, what + " InvStdDev");
    }
  }
}

// Rows of every length around the vector widths and past the float sums' flush block, and the
// transformer's [batch, 128, 256] across thread counts.
TEST(NormLayerNorm, RowsOfManyLengthsAndTheTransformerShape) {
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 40; ++n) lengths.push_back(n);
  for (int64_t n : {63, 64, 65, 256, 1023, 1025, 2500}) lengths.push_back(n);
  for (int64_t n : lengths) {
    OpRun run = layer_norm(sample_tensor({3, n}, -4, 4, static_cast<uint32_t>(n)), -1, true);
    expect_matches(run_op(run).at(0), reference_layer_norm(run, -1, 1e-5).y, 3e-6, "rows of " + std::to_string(n));
  }
  const OpRun transformer = layer_norm(sample_tensor({4, 128, 256}, -2, 2, 9), -1, true);
  const std::vector<double> expected = reference_layer_norm(transformer, -1, 1e-5).y;
  Tensor one, two;
  {
    ScopedThreads threads(1);
    one = run_op(transformer).at(0);
  }
  {
    ScopedThreads threads(2);
    two = run_op(transformer).at(0);
  }
  expect_matches(one, expected, 3e-6, "transformer shape");
  EXPECT_EQ(testing::max_abs_diff(one, two), 0.0);
}

TEST(NormLayerNorm, LargeOffsetsKeepTheirVariance) {
  // Values 1000 + small noise: a one-pass E[x^2] - E[x]^2 in float would lose the variance entirely,
  // and a mean rounded to float would shift every output.
  std::vector<float> values = sample_values(2 * 300, -0.01f, 0.01f, 4);
  for (float& v : values) v += 1000.0f;
  OpRun run = layer_norm(Tensor::from_vector(values, {2, 300}), -1, false);
  run.attributes.set("epsilon", float_attr(1e-12f));
  expect_matches(run_op(run).at(0), reference_layer_norm(run, -1, 1e-12).y, 1e-5, "offset 1000");
}

TEST(NormLayerNorm, EpsilonDoubleAndHalf) {
  OpRun run = layer_norm(sample_tensor({3, 10}, -1, 1), -1, true);
  run.attributes.set("epsilon", float_attr(0.5f));
  expect_matches(run_op(run).at(0), reference_layer_norm(run, -1, 0.5).y, 1e-6, "epsilon 0.5");
  const auto to_double = [](const Tensor& t) {
    std::vector<double> values;
    for (int64_t i = 0; i < t.numel(); ++i) values.push_back(t.double_at(i));
    return Tensor::from_vector(values, t.shape());
  };
  OpRun as_double = run;
  for (Tensor& input : as_double.inputs) input = to_double(input);
  const Tensor y = run_op(as_double).at(0);
  ASSERT_EQ(y.dtype(), DType::f64);
  expect_matches(y, reference_layer_norm(as_double, -1, 0.5).y, 1e-12, "double");
  const auto to_half = [](const Tensor& t) {
    std::vector<Float16> values;
    for (int64_t i = 0; i < t.numel(); ++i) values.push_back(float_to_float16(static_cast<float>(t.double_at(i))));
    return Tensor::from_vector(values, t.shape());
  };
  OpRun as_half = run;
  for (Tensor& input : as_half.inputs) input = to_half(input);
  const Tensor h = run_op(as_half).at(0);
  ASSERT_EQ(h.dtype(), DType::f16);
  const std::vector<double> expected = reference_layer_norm(as_half, -1, 0.5).y;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(h.double_at(static_cast<int64_t>(i)), expected[i], 1e-3 * std::max(1.0, std::fabs(expected[i])));
  }
}

TEST(NormLayerNorm, RejectsBadNodes) {
  const Tensor x = sample_tensor({2, 3, 4}, -1, 1);
  OpRun wrong_scale = layer_norm(x, -1, true);
  wrong_scale.inputs[1] = sample_tensor({3}, 1, 2);
  expect_error(wrong_scale, ErrorKind::invalid_argument, "Scale");
  OpRun wrong_bias = layer_norm(x, -1, true);
  wrong_bias.inputs[2] = sample_tensor({5}, 1, 2);
  expect_error(wrong_bias, ErrorKind::invalid_argument, "B");
  OpRun bad_axis = layer_norm(x, -1, true);
  bad_axis.attributes.set("axis", int_attr(3));
  expect_error(bad_axis, ErrorKind::invalid_model, "axis");
  OpRun stash = layer_norm(x, -1, true);
  stash.attributes.set("stash_type", int_attr(11));
  expect_error(stash, ErrorKind::not_implemented, "stash_type");
  OpRun integers = layer_norm(x, -1, false);
  integers.inputs[0] = Tensor::zeros(DType::i32, {2, 3, 4});
  expect_error(integers, ErrorKind::type_mismatch, "floating");
  OpRun mixed = layer_norm(x, -1, false);
  mixed.inputs[1] = Tensor::zeros(DType::f64, {4});
  expect_error(mixed, ErrorKind::type_mismatch, "float");
  OpRun no_scale = layer_norm(x, -1, false);
  no_scale.inputs.pop_back();
  EXPECT_THROW(run_op(no_scale), Error);
}

// ---- InstanceNormalization ---------------------------------------------------------------------

TEST(NormInstanceNorm, EachPlaneByItsOwnStatistics) {
  const Shape shape = {2, 3, 4, 5};
  OpRun run;
  run.op_type = "InstanceNormalization";
  run.opset = 17;
  run.attributes.set("epsilon", float_attr(0.01f));
  // A large offset per plane: the kernel must subtract the mean before scaling.
  std::vector<float> values = sample_values(checked_numel(shape), -1, 1);
  for (size_t i = 0; i < values.size(); ++i) values[i] += static_cast<float>(i / 20) * 100.0f;
  run.inputs = {Tensor::from_vector(values, shape), sample_tensor({3}, 0.5f, 2, 2), sample_tensor({3}, -1, 1, 3)};
  const Tensor y = run_op(run).at(0);
  std::vector<double> expected;
  for (int64_t p = 0; p < 6; ++p) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < 20; ++i) mean += values[p * 20 + i];
    mean /= 20;
    for (int64_t i = 0; i < 20; ++i) var += std::pow(values[p * 20 + i] - mean, 2);
    var /= 20;
    for (int64_t i = 0; i < 20; ++i) {
      expected.push_back(run.inputs[1].double_at(p % 3) * (values[p * 20 + i] - mean) / std::sqrt(var + 0.01) +
                         run.inputs[2].double_at(p % 3));
    }
  }
  expect_matches(y, expected, 2e-6, "InstanceNormalization");
  OpRun wrong = run;
  wrong.inputs[1] = sample_tensor({2}, 1, 2);
  expect_error(wrong, ErrorKind::invalid_argument, "scale");
  OpRun rank_two = run;
  rank_two.inputs[0] = sample_tensor({2, 3}, -1, 1);
  expect_error(rank_two, ErrorKind::invalid_argument, "rank");
}

}  // namespace
}  // namespace kiln
