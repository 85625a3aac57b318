// Native signal kernels: DFT and STFT transform each line (each frame) through an FftPlan made when
// the kernel is created, in double, one line per parallel_for item; the windows and MelWeightMatrix
// compute their few values in double and store them in the output dtype.
#include "ops/signal.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/fft.h"
#include "backends/native/native_backend.h"
#include "backends/native/thread_scratch.h"
#include "core/memory_limit.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

using Complex = FftPlan::Complex;

// A thread's line buffer: `count` complex values (64-byte aligned raw storage).
struct FftLineTag {};
static_assert(sizeof(Complex) == 4 * sizeof(float));
Complex* line_buffer(int64_t count) {
  return reinterpret_cast<Complex*>(thread_scratch_floats<FftLineTag>(static_cast<size_t>(count) * 4));
}

template <typename T>
double load(const T* src, int64_t index) {
  return static_cast<double>(to_compute(src[index]));
}

// The transform's plan, unless its tables would not fit in memory (a dft_length of 2^40 over an
// empty batch has no output to refuse, but its plan would still be terabytes).
std::shared_ptr<const FftPlan> plan_fft(const char* op, int64_t length) {
  KILN_CHECK(length <= FftPlan::kMaxLength, invalid_argument, op, " of length ", length,
             " is longer than the longest transform kiln plans (", FftPlan::kMaxLength, " points)");
  const uint64_t memory = planning_memory_limit_bytes();
  const double bytes = FftPlan::table_bytes(length);
  KILN_CHECK(memory == 0 || bytes <= static_cast<double>(memory), invalid_argument, op, " of length ", length,
             " needs FFT tables of ", static_cast<uint64_t>(bytes / (1 << 20)),
             " MiB, more than this machine's memory (", memory >> 20, " MiB)");
  return std::make_shared<const FftPlan>(length);
}

KernelOrReason rejected_dtype(const char* op, DType dtype) {
  return KernelOrReason::rejected(
      RefusalKind::unsupported_dtype,
      str_cat("native ", op, " supports float32, float64, float16 and bfloat16, not ", dtype_name(dtype)));
}

// ---- DFT -----------------------------------------------------------------------------------------

// The input seen as [outer, axis_dim, inner, components]: a line is one (outer, inner) pair.
struct DftGeometry {
  int64_t outer = 1;
  int64_t axis_dim = 0;
  int64_t inner = 1;
  int64_t components = 1;
  int64_t output_length = 0;
  bool inverse = false;
};

template <typename T>
void run_dft(const DftGeometry& g, const FftPlan& plan, const T* src, T* dst) {
  const int64_t n = plan.length();
  const int64_t read = std::min(n, g.axis_dim);  // truncated to dft_length, or zero-padded up to it
  const double scale = g.inverse ? 1.0 / static_cast<double>(n) : 1.0;
  parallel_for(0, g.outer * g.inner, plan.cost() + 4 * n, [&](int64_t begin, int64_t end) {
    Complex* line = line_buffer(n + plan.scratch_size());
    Complex* scratch = line + n;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t o = item / g.inner;
      const int64_t i = item % g.inner;
      const T* in = src + (o * g.axis_dim * g.inner + i) * g.components;
      const int64_t in_stride = g.inner * g.components;
      for (int64_t k = 0; k < read; ++k) {
        const T* value = in + k * in_stride;
        line[k] = {load(value, 0), g.components == 2 ? load(value, 1) : 0.0};
      }
      std::fill(line + read, line + n, Complex(0, 0));
      plan.transform(line, g.inverse, scratch);
      T* out = dst + (o * g.output_length * g.inner + i) * 2;
      for (int64_t k = 0; k < g.output_length; ++k) {
        out[k * g.inner * 2] = from_compute<T>(line[k].real() * scale);
        out[k * g.inner * 2 + 1] = from_compute<T>(line[k].imag() * scale);
      }
    }
  });
}

KernelOrReason make_dft(const OpSpec& spec, std::span<const TensorInfo>) {
  const DftParams params = dft_params(spec);
  const Shape& shape = spec.input(0).shape;
  DftGeometry geometry;
  for (int64_t d = 0; d < params.axis; ++d) geometry.outer *= shape[d];
  geometry.axis_dim = shape[params.axis];
  for (size_t d = params.axis + 1; d + 1 < shape.size(); ++d) geometry.inner *= shape[d];
  geometry.components = shape.back();
  geometry.output_length = params.output_length;
  geometry.inverse = params.inverse;
  const auto plan = plan_fft("DFT", params.length);
  const DType dtype = spec.input(0).dtype;
  return visit_floating(
      dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:dft", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          if (outputs[0].numel() == 0) return;
          run_dft(geometry, *plan, inputs[0].data<T>(), outputs[0].data<T>());
        });
      },
      [&] { return rejected_dtype("DFT", dtype); });
}

// ---- STFT ----------------------------------------------------------------------------------------

struct StftGeometry {
  int64_t length = 0;  // samples per batch item
  int64_t components = 1;
  StftParams params;
};

template <typename T>
void run_stft(const StftGeometry& g, const FftPlan& plan, const T* signal, const T* window, int64_t batch,
              T* dst) {
  const StftParams& p = g.params;
  const int64_t n = p.frame_length;
  parallel_for(0, batch * p.frames, plan.cost() + 6 * n, [&](int64_t begin, int64_t end) {
    Complex* line = line_buffer(n + plan.scratch_size());
    Complex* scratch = line + n;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / p.frames;
      const int64_t frame = item % p.frames;
      const T* in = signal + (b * g.length + frame * p.frame_step) * g.components;
      for (int64_t k = 0; k < n; ++k) {
        const double weight = window != nullptr ? load(window, k) : 1.0;
        const T* value = in + k * g.components;
        line[k] = {load(value, 0) * weight, g.components == 2 ? load(value, 1) * weight : 0.0};
      }
      plan.transform(line, false, scratch);
      T* out = dst + item * p.bins * 2;
      for (int64_t k = 0; k < p.bins; ++k) {
        out[2 * k] = from_compute<T>(line[k].real());
        out[2 * k + 1] = from_compute<T>(line[k].imag());
      }
    }
  });
}

KernelOrReason make_stft(const OpSpec& spec, std::span<const TensorInfo>) {
  StftGeometry geometry;
  geometry.params = stft_params(spec);
  geometry.length = spec.input(0).shape[1];
  geometry.components = spec.input(0).shape[2];
  const auto plan = plan_fft("STFT", geometry.params.frame_length);
  const DType dtype = spec.input(0).dtype;
  return visit_floating(
      dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:stft", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          if (outputs[0].numel() == 0) return;
          const T* window = geometry.params.has_window ? inputs[2].data<T>() : nullptr;
          run_stft(geometry, *plan, inputs[0].data<T>(), window, inputs[0].dim(0), outputs[0].data<T>());
        });
      },
      [&] { return rejected_dtype("STFT", dtype); });
}

// ---- Windows -------------------------------------------------------------------------------------

// ONNX's windows (the formulas of its reference and of PyTorch's *_window), with N = size when
// periodic and size - 1 when symmetric. Hamming uses ONNX's alpha = 25/46 (PyTorch's default is
// 0.54). ONNX 1.12's test data was made with pi rounded to 3.1415; kiln uses pi, which is within
// the suite's tolerance of it.
double window_value(WindowKind kind, int64_t n, int64_t denominator) {
  // A symmetric window of one point divides by zero; like PyTorch and SciPy, it is the single 1.
  if (denominator == 0) return 1.0;
  const double phase = 2.0 * std::numbers::pi * static_cast<double>(n) / static_cast<double>(denominator);
  switch (kind) {
    case WindowKind::hann:
      return 0.5 - 0.5 * std::cos(phase);
    case WindowKind::hamming: {
      constexpr double kAlpha = 25.0 / 46.0;
      return kAlpha - (1.0 - kAlpha) * std::cos(phase);
    }
    case WindowKind::blackman:
      return 0.42 - 0.5 * std::cos(phase) + 0.08 * std::cos(2.0 * phase);
  }
  return 0.0;
}

KernelOrReason make_window(const OpSpec& spec, std::span<const TensorInfo>) {
  const WindowFunctionParams params = window_function_params(spec);
  const int64_t denominator = params.periodic ? params.size : params.size - 1;
  return visit_floating(
      params.dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:window", [=](std::span<const Tensor>, std::span<Tensor> outputs) {
          T* dst = outputs[0].data<T>();
          for (int64_t n = 0; n < params.size; ++n) {
            dst[n] = from_compute<T>(window_value(params.kind, n, denominator));
          }
        });
      },
      [&] { return rejected_dtype(spec.op_type.c_str(), params.dtype); });
}

// ---- MelWeightMatrix -----------------------------------------------------------------------------

// numpy's floor division of doubles (Python's float //), which ONNX's reference maps frequencies to
// bins with: floor((a - fmod(a, b)) / b) with Python's corrections, not floor(a / b), whose quotient
// may round up to the next integer.
double floor_divide(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, a / b);
  double floor_div = std::floor(div);
  if (div - floor_div > 0.5) floor_div += 1.0;
  return floor_div;
}

double hertz_to_mel(double hertz) {
  return 2595.0 * std::log10(1.0 + hertz / 700.0);
}
double mel_to_hertz(double mel) {
  return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
}

// The matrix as ONNX's reference builds it: num_mel_bins + 2 points spaced evenly in mel between the
// edges (the step is the range over num_mel_bins + 2, as the reference has it), each mapped to the
// spectrogram bin floor((dft_length + 1) * hz / sample_rate); mel band i is the triangle rising from
// point i to 1 at point i + 1 and falling to point i + 2 (a band whose rise is empty is a single 1).
// Written straight into dst ([dft_length / 2 + 1, num_mel_bins]), so a run allocates nothing.
template <typename T>
void mel_weight_matrix(const MelParams& p, double sample_rate, double lower, double upper, T* dst) {
  const int64_t rows = p.dft_length / 2 + 1;
  const int64_t points = p.num_mel_bins + 2;
  const double low_mel = hertz_to_mel(lower);
  const double mel_step = (hertz_to_mel(upper) - low_mel) / static_cast<double>(points);
  const auto bin = [&](int64_t point) {
    const double hertz = mel_to_hertz(static_cast<double>(point) * mel_step + low_mel);
    return static_cast<int64_t>(floor_divide(static_cast<double>(p.dft_length + 1) * hertz, sample_rate));
  };
  std::fill(dst, dst + rows * p.num_mel_bins, from_compute<T>(0.0));
  // check_mel_range keeps every bin a band writes inside the matrix; the guard is for rounding alone.
  const auto set = [&](int64_t row, int64_t band, double value) {
    if (row >= 0 && row < rows) dst[row * p.num_mel_bins + band] = from_compute<T>(value);
  };
  for (int64_t band = 0; band < p.num_mel_bins; ++band) {
    const int64_t left = bin(band);
    const int64_t center = bin(band + 1);
    const int64_t right = bin(band + 2);
    if (center == left) {
      set(center, band, 1.0);
    } else {
      for (int64_t j = left; j <= center; ++j) {
        set(j, band, static_cast<double>(j - left) / static_cast<double>(center - left));
      }
    }
    for (int64_t j = center; j < right; ++j) {
      set(j, band, static_cast<double>(right - j) / static_cast<double>(right - center));
    }
  }
}

KernelOrReason make_mel_weight_matrix(const OpSpec& spec, std::span<const TensorInfo>) {
  const MelParams params = mel_params(spec);
  return visit_floating(
      params.dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:mel_weight_matrix",
                           [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
                             const double sample_rate = inputs[2].double_at(0);
                             const double lower = inputs[3].double_at(0);
                             const double upper = inputs[4].double_at(0);
                             check_mel_range(sample_rate, lower, upper);
                             mel_weight_matrix(params, sample_rate, lower, upper, outputs[0].data<T>());
                           });
      },
      [&] { return rejected_dtype("MelWeightMatrix", params.dtype); });
}

constexpr KernelEntry kKernels[] = {
    {"DFT", make_dft},
    {"STFT", make_stft},
    {"HannWindow", make_window},
    {"HammingWindow", make_window},
    {"BlackmanWindow", make_window},
    {"MelWeightMatrix", make_mel_weight_matrix},
};

}  // namespace

std::span<const KernelEntry> signal_kernels() {
  return kKernels;
}

}  // namespace kiln::native
