// The signal ops through shape inference and the native kernels: DFT and STFT against an O(n^2)
// DFT summed in double here (lengths that are powers of two, short odd ones and long primes, so each
// of the FFT's methods runs), the windows against their formulas, MelWeightMatrix against ONNX's
// construction written out in plain loops; plus every malformed node's error.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <numbers>
#include <string>
#include <vector>

#include "backends/native/fft.h"
#include "core/error.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "graph/session.h"
#include "op_test_util.h"
#include "ops/op_spec.h"

namespace kiln {
namespace {

using testing::int_attr;
using testing::OpRun;
using testing::run_op;
using testing::sample_values;

using Complex = std::complex<double>;

// Lengths covering the FFT's methods: powers of two (radix 2), products of primes up to 13 (mixed
// radix: 400 = 4 4 5 5, 441 = 3 3 7 7, 1001 = 7 11 13), short lengths with a larger prime factor
// (direct sums: 17, 31, 34, 61) and long ones (Bluestein: 97, 211, 1009, 202 = 2 101).
const std::vector<int64_t> kLengths = {1,  2,  3,  5,   6,   7,   8,   12,  16,  17,  31,   34,   61,
                                       64, 65, 97, 100, 128, 202, 211, 256, 400, 441, 1000, 1001, 1009};

OpRun op(std::string type, std::vector<Tensor> inputs, Attributes attributes = {}, int64_t opset = 17) {
  OpRun run;
  run.op_type = std::move(type);
  run.inputs = std::move(inputs);
  run.attributes = std::move(attributes);
  run.opset = opset;
  return run;
}

Attributes attrs(std::initializer_list<std::pair<const char*, int64_t>> values) {
  Attributes attributes;
  for (const auto& [name, value] : values) attributes.set(name, int_attr(value));
  return attributes;
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

// The definition, summed in double: X[k] = sum_j x[j] e^{-+2 pi i jk / n}, over n for the inverse.
std::vector<Complex> plain_dft(const std::vector<Complex>& x, bool inverse) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<Complex> result(x.size());
  const double sign = inverse ? 1.0 : -1.0;
  std::vector<Complex> roots;  // e^{-+2 pi i t / n}: the sum's factor for jk = t mod n
  for (int64_t t = 0; t < n; ++t) {
    const double angle = sign * 2.0 * std::numbers::pi * static_cast<double>(t) / static_cast<double>(n);
    roots.emplace_back(std::cos(angle), std::sin(angle));
  }
  for (int64_t k = 0; k < n; ++k) {
    Complex sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += x[j] * roots[(j * k) % n];
    result[k] = inverse ? sum / static_cast<double>(n) : sum;
  }
  return result;
}

// A tensor of `dtype` (f32 or f64) with the given values.
Tensor make_tensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  if (dtype == DType::f64) return Tensor::from_vector(values, shape);
  std::vector<float> narrow(values.begin(), values.end());
  return Tensor::from_vector(narrow, shape);
}

std::vector<double> sample_doubles(int64_t count, uint32_t seed) {
  const std::vector<float> values = sample_values(count, -3, 3, seed);
  return {values.begin(), values.end()};
}

// |actual - expected| <= tolerance x the largest |expected|, element by element.
void expect_matches(const Tensor& actual, const std::vector<double>& expected, double tolerance,
                    const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(actual.numel()), expected.size()) << what;
  double scale = 1;
  for (double value : expected) scale = std::max(scale, std::fabs(value));
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_NEAR(actual.double_at(static_cast<int64_t>(i)), expected[i], tolerance * scale)
        << what << " [" << i << "]";
  }
}

// ---- FFT plans -----------------------------------------------------------------------------------

TEST(SignalFft, LongTransformsOfEachMethodStayWithinRoundingOfTheSum) {
  // 4096: radix 2; 4000 = 4 4 4 2 5 5 5: mixed radix; 4099 (prime) and 4100 = 4 25 41: Bluestein.
  for (int64_t n : {4096, 4000, 4099, 4100}) {
    const std::vector<double> values = sample_doubles(2 * n, static_cast<uint32_t>(n));
    std::vector<Complex> x(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) x[j] = {values[2 * j], values[2 * j + 1]};
    const native::FftPlan plan(n);
    std::vector<Complex> scratch(static_cast<size_t>(plan.scratch_size()));
    for (bool inverse : {false, true}) {
      std::vector<Complex> y = x;
      plan.transform(y.data(), inverse, scratch.data());
      std::vector<Complex> expected = plain_dft(x, inverse);
      double scale = 0;
      double error = 0;
      for (int64_t k = 0; k < n; ++k) {
        if (inverse) expected[k] *= static_cast<double>(n);  // transform() leaves the 1 / n to its caller
        scale = std::max(scale, std::abs(expected[k]));
        error = std::max(error, std::abs(y[k] - expected[k]));
      }
      EXPECT_LT(error, 1e-12 * scale) << "n " << n << (inverse ? " inverse" : "");
    }
  }
}

// ---- DFT -----------------------------------------------------------------------------------------

// A [batch, n, components] signal, transformed along axis 1, against plain_dft per batch item.
void check_dft_1d(int64_t n, int64_t components, bool inverse, bool onesided, DType dtype, double tolerance) {
  const int64_t batch = 2;
  const std::vector<double> values =
      sample_doubles(batch * n * components, static_cast<uint32_t>(n + components));
  Attributes attributes = attrs({{"inverse", inverse}, {"onesided", onesided}});
  const Tensor y = run_op(op("DFT", {make_tensor(values, {batch, n, components}, dtype)}, attributes)).at(0);
  const int64_t bins = onesided ? n / 2 + 1 : n;
  ASSERT_EQ(y.shape(), (Shape{batch, bins, 2}));
  ASSERT_EQ(y.dtype(), dtype);
  std::vector<double> expected;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Complex> x(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      const double* v = values.data() + (b * n + j) * components;
      x[j] = {v[0], components == 2 ? v[1] : 0.0};
    }
    const std::vector<Complex> transform = plain_dft(x, inverse);
    for (int64_t k = 0; k < bins; ++k) {
      expected.push_back(transform[k].real());
      expected.push_back(transform[k].imag());
    }
  }
  expect_matches(y, expected, tolerance,
                 "n " + std::to_string(n) + (components == 2 ? " complex" : " real") +
                     (inverse ? " inverse" : "") + (onesided ? " onesided" : ""));
}

TEST(SignalDft, RealAndComplexForwardAndInverseAgainstThePlainSum) {
  for (int64_t n : kLengths) {
    for (int64_t components : {1, 2}) {
      for (bool inverse : {false, true}) {
        // float32 stores the result: its rounding, not the sums (done in double), bounds the error.
        check_dft_1d(n, components, inverse, false, DType::f32, 1e-6);
        check_dft_1d(n, components, inverse, false, DType::f64, 1e-12);
      }
    }
  }
}

TEST(SignalDft, OnesidedKeepsTheFirstHalfOfARealSignalsTransform) {
  for (int64_t n : kLengths) {
    check_dft_1d(n, 1, false, true, DType::f32, 1e-6);
    // ONNX's reference cuts the inverse transform the same way.
    check_dft_1d(n, 1, true, true, DType::f64, 1e-12);
  }
}

TEST(SignalDft, AxisAndStridedLines) {
  // [2, 3, n, 2]: transforms along axis 1 (lines strided by n * 2) and 2 (negative: -2), checked
  // against the same lines gathered by hand.
  const int64_t n = 6;
  const Shape shape = {2, 3, n, 2};
  const std::vector<double> values = sample_doubles(2 * 3 * n * 2, 11);
  const Tensor x = make_tensor(values, shape, DType::f64);
  const auto at = [&](int64_t a, int64_t b, int64_t c) {
    return Complex(values[((a * 3 + b) * n + c) * 2], values[((a * 3 + b) * n + c) * 2 + 1]);
  };
  for (int64_t axis : {1, 2, -2, -3, 0}) {
    const Tensor y = run_op(op("DFT", {x}, attrs({{"axis", axis}}))).at(0);
    ASSERT_EQ(y.shape(), shape);
    const int64_t dim = axis < 0 ? axis + 4 : axis;
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t b = 0; b < 3; ++b) {
        for (int64_t c = 0; c < n; ++c) {
          // The line through (a, b, c) along dim, and the index of (a, b, c) in it.
          std::vector<Complex> line;
          for (int64_t k = 0; k < shape[dim]; ++k) {
            line.push_back(dim == 0 ? at(k, b, c) : dim == 1 ? at(a, k, c) : at(a, b, k));
          }
          const int64_t position = dim == 0 ? a : dim == 1 ? b : c;
          const Complex expected = plain_dft(line, false)[position];
          const int64_t flat = ((a * 3 + b) * n + c) * 2;
          EXPECT_NEAR(y.double_at(flat), expected.real(), 1e-12) << "axis " << axis;
          EXPECT_NEAR(y.double_at(flat + 1), expected.imag(), 1e-12) << "axis " << axis;
        }
      }
    }
  }
}

TEST(SignalDft, DftLengthPadsWithZerosOrTruncates) {
  const int64_t dim = 10;
  const std::vector<double> values = sample_doubles(dim, 5);
  const Tensor x = make_tensor(values, {1, dim, 1}, DType::f64);
  for (int64_t length : {4, 7, 10, 16, 23}) {
    for (DType length_dtype : {DType::i64, DType::i32}) {
      const Tensor dft_length = length_dtype == DType::i64
                                    ? Tensor::scalar<int64_t>(length)
                                    : Tensor::scalar<int32_t>(static_cast<int32_t>(length));
      const Tensor y = run_op(op("DFT", {x, dft_length})).at(0);
      ASSERT_EQ(y.shape(), (Shape{1, length, 2}));
      std::vector<Complex> line(static_cast<size_t>(length), 0.0);
      for (int64_t j = 0; j < std::min(length, dim); ++j) line[j] = values[j];
      std::vector<double> expected;
      for (const Complex& value : plain_dft(line, false)) {
        expected.push_back(value.real());
        expected.push_back(value.imag());
      }
      expect_matches(y, expected, 1e-12, "dft_length " + std::to_string(length));
    }
  }
}

TEST(SignalDft, InverseUndoesForward) {
  for (int64_t n : {12, 128, 97, 1000}) {
    const std::vector<double> values = sample_doubles(2 * n * 2, 3);
    const Tensor x = make_tensor(values, {2, n, 2}, DType::f64);
    const Tensor forward = run_op(op("DFT", {x})).at(0);
    const Tensor back = run_op(op("DFT", {forward}, attrs({{"inverse", 1}}))).at(0);
    expect_matches(back, values, 1e-13, "round trip n " + std::to_string(n));
  }
}

TEST(SignalDft, Float16IsComputedInDoubleAndStoredAsHalf) {
  const int64_t n = 24;
  const std::vector<float> values = sample_values(n, -1, 1, 9);
  Tensor x = Tensor::empty(DType::f16, {1, n, 1});
  std::vector<Complex> line;
  for (int64_t j = 0; j < n; ++j) {
    x.data<Float16>()[j] = float_to_float16(values[j]);
    line.push_back(float16_to_float(x.data<Float16>()[j]));
  }
  const Tensor y = run_op(op("DFT", {x})).at(0);
  ASSERT_EQ(y.dtype(), DType::f16);
  std::vector<double> expected;
  for (const Complex& value : plain_dft(line, false)) {
    expected.push_back(value.real());
    expected.push_back(value.imag());
  }
  expect_matches(y, expected, 1e-3, "float16");
}

TEST(SignalDft, Opset20TakesTheAxisAsAnInput) {
  const std::vector<double> values = sample_doubles(4 * 6, 2);
  const Tensor x = make_tensor(values, {4, 6, 1}, DType::f64);
  const Tensor by_attribute = run_op(op("DFT", {x}, attrs({{"axis", 1}}))).at(0);
  const Tensor by_input = run_op(op("DFT", {x, Tensor{}, Tensor::scalar<int64_t>(1)}, {}, 20)).at(0);
  const Tensor by_default = run_op(op("DFT", {x}, {}, 20)).at(0);  // -2: the last signal dim
  for (int64_t i = 0; i < by_attribute.numel(); ++i) {
    EXPECT_EQ(by_input.double_at(i), by_attribute.double_at(i));
    EXPECT_EQ(by_default.double_at(i), by_attribute.double_at(i));
  }
}

TEST(SignalDft, MalformedNodesAreErrors) {
  const Tensor x = make_tensor(sample_doubles(8, 1), {1, 8, 1}, DType::f32);
  expect_error(op("DFT", {make_tensor(sample_doubles(8, 1), {8}, DType::f32)}), ErrorKind::invalid_argument,
               "DFT input must have rank >= 2");
  expect_error(op("DFT", {make_tensor(sample_doubles(24, 1), {1, 8, 3}, DType::f32)}),
               ErrorKind::invalid_argument, "must end in a dim of 1 (real) or 2 (real, imaginary)");
  expect_error(op("DFT", {x}, attrs({{"axis", 2}})), ErrorKind::invalid_model, "DFT axis 2 is out of range");
  expect_error(op("DFT", {x}, attrs({{"axis", -1}})), ErrorKind::invalid_model, "the last dim holds");
  expect_error(op("DFT", {x}, attrs({{"axis", -4}})), ErrorKind::invalid_model,
               "DFT axis -4 is out of range");
  expect_error(op("DFT", {x}, attrs({{"inverse", 2}})), ErrorKind::invalid_model,
               "attribute 'inverse' must be 0 or 1");
  expect_error(
      op("DFT", {make_tensor(sample_doubles(16, 1), {1, 8, 2}, DType::f32)}, attrs({{"onesided", 1}})),
      ErrorKind::invalid_model, "onesided=1 needs a real input");
  expect_error(op("DFT", {x, Tensor::scalar<int64_t>(0)}), ErrorKind::invalid_argument,
               "dft_length must be >= 1");
  expect_error(op("DFT", {x, Tensor::scalar<int64_t>(-4)}), ErrorKind::invalid_argument, "got -4");
  expect_error(op("DFT", {x, Tensor::scalar<float>(4)}), ErrorKind::type_mismatch,
               "input 1 (dft_length) must be int32 or int64");
  expect_error(op("DFT", {x, Tensor::from_vector<int64_t>({4, 4}, {2})}), ErrorKind::invalid_argument,
               "(dft_length) must be a scalar");
  expect_error(op("DFT", {Tensor::from_vector<int64_t>({1, 2}, {1, 2, 1})}), ErrorKind::type_mismatch,
               "must be a floating-point tensor");
  expect_error(op("DFT", {make_tensor({}, {1, 0, 1}, DType::f32)}), ErrorKind::invalid_argument, "is empty");
  // A transform whose tables cannot fit in memory, even with nothing to transform.
  expect_error(op("DFT", {make_tensor({}, {0, 8, 1}, DType::f32), Tensor::scalar<int64_t>(int64_t{1} << 39)}),
               ErrorKind::invalid_argument, "needs FFT tables of");
  expect_error(
      op("DFT", {make_tensor({}, {0, 8, 1}, DType::f32), Tensor::scalar<int64_t>((int64_t{1} << 62) + 1)}),
      ErrorKind::invalid_argument, "is longer than the longest transform kiln plans");
  // A dft_length only known when the model runs cannot shape the output.
  OpRun run = op("DFT", {x, Tensor::scalar<int64_t>(8)});
  run.inputs_are_constants = false;
  expect_error(run, ErrorKind::not_implemented, "(dft_length) must be known at plan time");
}

// ---- STFT ----------------------------------------------------------------------------------------

struct StftCase {
  int64_t length;
  int64_t step;
  int64_t frame;
  bool window;
  bool complex;
  bool onesided;
};

TEST(SignalStft, FramesWindowedAndTransformed) {
  const std::vector<StftCase> cases = {
      {128, 8, 16, false, false, true},   {128, 8, 16, true, false, true},  {100, 7, 25, true, false, true},
      {300, 50, 101, true, false, false}, {256, 64, 64, true, true, false}, {64, 1, 1, false, false, true},
      {50, 13, 50, false, false, true},   {90, 10, 31, false, true, false},
  };
  for (const StftCase& c : cases) {
    const int64_t batch = 2;
    const int64_t components = c.complex ? 2 : 1;
    const std::vector<double> signal =
        sample_doubles(batch * c.length * components, static_cast<uint32_t>(c.frame));
    const std::vector<double> window = sample_doubles(c.frame, 77);
    std::vector<Tensor> inputs = {make_tensor(signal, {batch, c.length, components}, DType::f32),
                                  Tensor::scalar<int64_t>(c.step)};
    if (c.window) {
      inputs.push_back(make_tensor(window, {c.frame}, DType::f32));
    } else {
      inputs.push_back(Tensor{});
      inputs.push_back(Tensor::scalar<int64_t>(c.frame));
    }
    const Tensor y = run_op(op("STFT", inputs, attrs({{"onesided", c.onesided}}))).at(0);
    const int64_t frames = 1 + (c.length - c.frame) / c.step;
    const int64_t bins = c.onesided ? c.frame / 2 + 1 : c.frame;
    ASSERT_EQ(y.shape(), (Shape{batch, frames, bins, 2}));
    std::vector<double> expected;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t f = 0; f < frames; ++f) {
        std::vector<Complex> line;
        for (int64_t j = 0; j < c.frame; ++j) {
          // The window is float32 like the signal: weigh with its stored values.
          const double weight = c.window ? static_cast<float>(window[j]) : 1.0;
          const double* v = signal.data() + (b * c.length + f * c.step + j) * components;
          line.emplace_back(static_cast<float>(v[0]) * weight,
                            c.complex ? static_cast<float>(v[1]) * weight : 0.0);
        }
        const std::vector<Complex> transform = plain_dft(line, false);
        for (int64_t k = 0; k < bins; ++k) {
          expected.push_back(transform[k].real());
          expected.push_back(transform[k].imag());
        }
      }
    }
    expect_matches(y, expected, 1e-6, "STFT frame " + std::to_string(c.frame));
  }
}

TEST(SignalStft, MalformedNodesAreErrors) {
  const Tensor signal = make_tensor(sample_doubles(64, 1), {1, 64, 1}, DType::f32);
  const Tensor step = Tensor::scalar<int64_t>(8);
  const Tensor window = make_tensor(sample_doubles(16, 2), {16}, DType::f32);
  expect_error(op("STFT", {make_tensor(sample_doubles(64, 1), {1, 64}, DType::f32), step}),
               ErrorKind::invalid_argument, "STFT signal must have rank 3");
  expect_error(op("STFT", {signal, Tensor::scalar<int64_t>(0), window}), ErrorKind::invalid_argument,
               "frame_step must be >= 1");
  expect_error(op("STFT", {signal, step, window, Tensor::scalar<int64_t>(32)}), ErrorKind::invalid_argument,
               "frame_length 32 differs from the window's length 16");
  expect_error(op("STFT", {signal, step, Tensor{}, Tensor::scalar<int64_t>(65)}), ErrorKind::invalid_argument,
               "STFT frame length 65 is longer than the signal (64 samples)");
  expect_error(op("STFT", {signal, step, Tensor{}, Tensor::scalar<int64_t>(-1)}), ErrorKind::invalid_argument,
               "frame length must be >= 1");
  expect_error(op("STFT", {make_tensor(sample_doubles(128, 1), {1, 64, 2}, DType::f32), step, window}),
               ErrorKind::invalid_model, "set onesided=0 for a complex signal");
  expect_error(op("STFT", {signal, step, make_tensor(sample_doubles(16, 2), {16}, DType::f64)}),
               ErrorKind::type_mismatch, "STFT window must have the signal's dtype float32");
  expect_error(op("STFT", {signal, step, make_tensor(sample_doubles(16, 2), {4, 4}, DType::f32)}),
               ErrorKind::invalid_argument, "STFT window must have rank 1");
  expect_error(op("STFT", {signal}), ErrorKind::invalid_model, "STFT expects 2..4 inputs");
  OpRun run = op("STFT", {signal, step, window});
  run.inputs_are_constants = false;
  expect_error(run, ErrorKind::not_implemented, "(frame_step) must be known at plan time");
}

// ---- Windows -------------------------------------------------------------------------------------

double window_formula(const std::string& op, int64_t n, int64_t size, bool periodic) {
  const double big_n = static_cast<double>(periodic ? size : size - 1);
  if (big_n == 0) return 1.0;
  const double x = 2.0 * std::numbers::pi * static_cast<double>(n) / big_n;
  if (op == "HannWindow") return 0.5 - 0.5 * std::cos(x);
  if (op == "HammingWindow") return 25.0 / 46.0 - 21.0 / 46.0 * std::cos(x);
  return 0.42 - 0.5 * std::cos(x) + 0.08 * std::cos(2.0 * x);
}

TEST(SignalWindow, HannHammingBlackmanPeriodicAndSymmetric) {
  for (const std::string kind : {"HannWindow", "HammingWindow", "BlackmanWindow"}) {
    for (int64_t size : {0, 1, 2, 5, 10, 17, 64}) {
      for (bool periodic : {true, false}) {
        std::vector<double> expected;
        for (int64_t n = 0; n < size; ++n) expected.push_back(window_formula(kind, n, size, periodic));
        const std::string what =
            kind + " size " + std::to_string(size) + (periodic ? " periodic" : " symmetric");
        // The default output is float32; output_datatype 11 is double, 10 float16.
        const Tensor y =
            run_op(op(kind, {Tensor::scalar<int64_t>(size)}, attrs({{"periodic", periodic}}))).at(0);
        ASSERT_EQ(y.dtype(), DType::f32);
        ASSERT_EQ(y.shape(), (Shape{size}));
        expect_matches(y, expected, 1e-7, what);
        const Tensor wide = run_op(op(kind, {Tensor::scalar<int32_t>(static_cast<int32_t>(size))},
                                      attrs({{"periodic", periodic}, {"output_datatype", 11}})))
                                .at(0);
        ASSERT_EQ(wide.dtype(), DType::f64);
        expect_matches(wide, expected, 1e-15, what + " double");
        const Tensor half = run_op(op(kind, {Tensor::scalar<int64_t>(size)},
                                      attrs({{"periodic", periodic}, {"output_datatype", 10}})))
                                .at(0);
        ASSERT_EQ(half.dtype(), DType::f16);
        expect_matches(half, expected, 1e-3, what + " float16");
      }
    }
  }
  // A symmetric window's ends are its minimum and it is symmetric; the periodic one is the
  // symmetric one of size + 1 without its last point.
  const Tensor symmetric =
      run_op(op("HannWindow", {Tensor::scalar<int64_t>(11)}, attrs({{"periodic", 0}}))).at(0);
  const Tensor periodic = run_op(op("HannWindow", {Tensor::scalar<int64_t>(10)})).at(0);
  for (int64_t n = 0; n < 10; ++n) EXPECT_NEAR(periodic.double_at(n), symmetric.double_at(n), 1e-7);
  for (int64_t n = 0; n < 11; ++n) EXPECT_NEAR(symmetric.double_at(n), symmetric.double_at(10 - n), 1e-7);
}

TEST(SignalWindow, MalformedNodesAreErrors) {
  expect_error(op("HannWindow", {Tensor::scalar<int64_t>(-3)}), ErrorKind::invalid_argument,
               "HannWindow size must be >= 0, got -3");
  expect_error(op("HammingWindow", {Tensor::from_vector<int64_t>({3, 4}, {2})}), ErrorKind::invalid_argument,
               "HammingWindow input 0 (size) must be a scalar");
  expect_error(op("BlackmanWindow", {Tensor::scalar<float>(4)}), ErrorKind::type_mismatch,
               "input 0 (size) must be int32 or int64, got float32");
  expect_error(op("HannWindow", {Tensor::scalar<int64_t>(4)}, attrs({{"output_datatype", 9}})),
               ErrorKind::invalid_model, "attribute 'output_datatype' must name a number type");
  expect_error(op("HannWindow", {Tensor::scalar<int64_t>(4)}, attrs({{"output_datatype", 99}})),
               ErrorKind::invalid_model, "output_datatype");
  expect_error(op("HannWindow", {Tensor::scalar<int64_t>(4)}, attrs({{"periodic", 3}})),
               ErrorKind::invalid_model, "attribute 'periodic' must be 0 or 1");
  // Integer windows are valid ONNX, but the native kernels write floating point only.
  expect_error(op("HannWindow", {Tensor::scalar<int64_t>(4)}, attrs({{"output_datatype", 7}})),
               ErrorKind::not_implemented,
               "native HannWindow supports float32, float64, float16 and bfloat16");
  OpRun run = op("HannWindow", {Tensor::scalar<int64_t>(4)});
  run.inputs_are_constants = false;
  expect_error(run, ErrorKind::not_implemented, "(size) must be known at plan time");
}

// ---- MelWeightMatrix -----------------------------------------------------------------------------

struct MelCase {
  int64_t bins;
  int64_t dft_length;
  int64_t sample_rate;
  double lower;
  double upper;
};

// ONNX's construction, in plain loops: num_mel_bins + 2 points evenly spaced in mel (a step of the
// range over num_mel_bins + 2), each at spectrogram bin floor((dft_length + 1) hz / sample_rate),
// and a triangle per band.
std::vector<double> mel_formula(const MelCase& c) {
  const auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
  const auto hz = [](double m) { return 700.0 * (std::pow(10.0, m / 2595.0) - 1.0); };
  const int64_t rows = c.dft_length / 2 + 1;
  std::vector<int64_t> points;
  const double step = (mel(c.upper) - mel(c.lower)) / static_cast<double>(c.bins + 2);
  for (int64_t i = 0; i < c.bins + 2; ++i) {
    points.push_back(static_cast<int64_t>(
        std::floor(static_cast<double>(c.dft_length + 1) * hz(mel(c.lower) + step * static_cast<double>(i)) /
                   static_cast<double>(c.sample_rate))));
  }
  std::vector<double> matrix(static_cast<size_t>(rows * c.bins), 0.0);
  for (int64_t band = 0; band < c.bins; ++band) {
    const int64_t left = points[band], center = points[band + 1], right = points[band + 2];
    if (center == left) matrix[center * c.bins + band] = 1;
    for (int64_t j = left; j <= center && center > left; ++j)
      matrix[j * c.bins + band] = static_cast<double>(j - left) / static_cast<double>(center - left);
    for (int64_t j = center; j < right; ++j)
      matrix[j * c.bins + band] = static_cast<double>(right - j) / static_cast<double>(right - center);
  }
  return matrix;
}

std::vector<Tensor> mel_inputs(const MelCase& c) {
  return {Tensor::scalar<int64_t>(c.bins), Tensor::scalar<int64_t>(c.dft_length),
          Tensor::scalar<int64_t>(c.sample_rate), Tensor::scalar<float>(static_cast<float>(c.lower)),
          Tensor::scalar<float>(static_cast<float>(c.upper))};
}

TEST(SignalMel, MatchesOnnxsConstruction) {
  const std::vector<MelCase> cases = {
      {8, 16, 8192, 0, 4096},  // ONNX's conformance case
      {40, 512, 16000, 20, 8000}, {10, 255, 22050, 100, 11025}, {128, 1024, 16000, 0, 8000},
      {80, 400, 16000, 0, 8000},  {3, 7, 100, 10, 50},          {64, 2048, 44100, 30, 15000},
  };
  for (const MelCase& c : cases) {
    const std::vector<double> expected = mel_formula(c);
    const Tensor y = run_op(op("MelWeightMatrix", mel_inputs(c))).at(0);
    ASSERT_EQ(y.dtype(), DType::f32);
    ASSERT_EQ(y.shape(), (Shape{c.dft_length / 2 + 1, c.bins}));
    expect_matches(y, expected, 1e-7,
                   "mel " + std::to_string(c.bins) + " bins, dft " + std::to_string(c.dft_length));
    const Tensor wide = run_op(op("MelWeightMatrix", mel_inputs(c), attrs({{"output_datatype", 11}}))).at(0);
    ASSERT_EQ(wide.dtype(), DType::f64);
    expect_matches(wide, expected, 0, "mel double");
  }
  // Every band peaks at 1, as the spec says.
  const MelCase c = {40, 512, 16000, 20, 8000};
  const Tensor y = run_op(op("MelWeightMatrix", mel_inputs(c))).at(0);
  for (int64_t band = 0; band < c.bins; ++band) {
    double peak = 0;
    for (int64_t row = 0; row < y.dim(0); ++row) peak = std::max(peak, y.double_at(row * c.bins + band));
    EXPECT_EQ(peak, 1.0) << "band " << band;
  }
}

TEST(SignalMel, MalformedNodesAreErrors) {
  const MelCase good = {8, 16, 8192, 0, 4096};
  const auto with = [&](int index, Tensor value) {
    std::vector<Tensor> inputs = mel_inputs(good);
    inputs[index] = std::move(value);
    return op("MelWeightMatrix", inputs);
  };
  expect_error(with(0, Tensor::scalar<int64_t>(0)), ErrorKind::invalid_argument, "num_mel_bins must be >= 1");
  expect_error(with(1, Tensor::scalar<int64_t>(-16)), ErrorKind::invalid_argument, "dft_length must be >= 1");
  expect_error(with(2, Tensor::scalar<int64_t>(0)), ErrorKind::invalid_argument, "sample_rate must be > 0");
  expect_error(with(4, Tensor::scalar<float>(5000)), ErrorKind::invalid_argument,
               "0 <= lower_edge_hertz < upper_edge_hertz <= sample_rate / 2 (4096 Hz)");
  expect_error(with(3, Tensor::scalar<float>(-1)), ErrorKind::invalid_argument, "got lower_edge_hertz -1");
  expect_error(with(3, Tensor::scalar<float>(4096)), ErrorKind::invalid_argument,
               "lower_edge_hertz < upper_edge_hertz");
  expect_error(with(0, Tensor::scalar<float>(8)), ErrorKind::type_mismatch,
               "(num_mel_bins) must be int32 or int64");
  expect_error(with(2, Tensor::scalar<float>(8192)), ErrorKind::type_mismatch,
               "(sample_rate) must be int32 or int64");
  expect_error(with(3, Tensor::scalar<int64_t>(0)), ErrorKind::type_mismatch,
               "(lower_edge_hertz) must be floating point");
  expect_error(with(4, Tensor::from_vector<float>({1, 2}, {2})), ErrorKind::invalid_argument,
               "input 4 must be a scalar");
  // The edges may be run-time values; the kernel checks them when it runs.
  OpRun run = with(4, Tensor::scalar<float>(5000));
  run.inputs_are_constants = false;
  expect_error(run, ErrorKind::not_implemented, "(num_mel_bins) must be known at plan time");
}

TEST(SignalMel, EdgesKnownOnlyAtRunTimeAreCheckedWhenItRuns) {
  // num_mel_bins and dft_length shape the output (initializers); the rate and edges are graph inputs.
  Model model;
  model.opsets[""] = 17;
  model.graph.initializers["num_mel_bins"] = Tensor::scalar<int64_t>(8);
  model.graph.initializers["dft_length"] = Tensor::scalar<int64_t>(16);
  model.graph.inputs = {ValueInfo{"sample_rate", DType::i64, true, {}},
                        ValueInfo{"lower", DType::f32, true, {}}, ValueInfo{"upper", DType::f32, true, {}}};
  Node node;
  node.name = "mel";
  node.op_type = "MelWeightMatrix";
  node.inputs = {"num_mel_bins", "dft_length", "sample_rate", "lower", "upper"};
  node.outputs = {"matrix"};
  model.graph.nodes.push_back(node);
  model.graph.outputs = {ValueInfo{"matrix", DType::f32, false, {}}};
  Session session(model);
  const MelCase good = {8, 16, 8192, 0, 4096};
  const TensorMap outputs = session.run({{"sample_rate", Tensor::scalar<int64_t>(good.sample_rate)},
                                         {"lower", Tensor::scalar<float>(0)},
                                         {"upper", Tensor::scalar<float>(4096)}});
  expect_matches(outputs.at("matrix"), mel_formula(good), 1e-7, "run-time edges");
  try {
    session.run({{"sample_rate", Tensor::scalar<int64_t>(good.sample_rate)},
                 {"lower", Tensor::scalar<float>(0)},
                 {"upper", Tensor::scalar<float>(5000)}});
    FAIL() << "an upper edge above the Nyquist frequency ran";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::invalid_argument) << error.what();
    EXPECT_NE(std::string(error.what()).find("upper_edge_hertz <= sample_rate / 2 (4096 Hz)"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace kiln
