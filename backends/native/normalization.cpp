// Native BatchNormalization (inference), LayerNormalization, InstanceNormalization and kiln's
// ResidualLayerNorm (the MHA fast path's residual Add + LayerNorm, ops/residual_layer_norm.h).
// Statistics are two-pass (mean, then the mean of squared deviations), so inputs far from zero keep
// their variance. float LayerNorm rows (the transformer's case) use GCC vectors of the widest ISA the
// CPU has, with float partial sums flushed into double every kFlushElements; the other types and ops
// accumulate in double in independent lanes that GCC vectorizes.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/isa_variant.h"
#include "backends/native/element_visit.h"
#include "backends/native/native_backend.h"
#include "backends/native/simd.h"
#include "ops/normalization.h"
#include "ops/residual_layer_norm.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

// ONNX's default epsilon for all three ops.
constexpr float kDefaultEpsilon = 1e-5f;
// Independent double accumulators in the portable sums: hides add latency, and GCC vectorizes them.
constexpr int kLanes = 8;
// Float partial sums move into a double accumulator after this many elements.
constexpr int64_t kFlushElements = 1024;
// Rough scalar operations per element, for parallel_for's inline threshold.
constexpr int64_t kAffineCost = 2;
constexpr int64_t kNormalizeCost = 8;


KernelOrReason not_floating() {
  return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                  "native normalization supports floating types only");
}

// ---- portable statistics -----------------------------------------------------------------------

// Sum of (x - center)^kPower over n elements, in double lanes.
template <int kPower, typename T>
double lane_sum(const T* src, int64_t n, double center) {
  double lanes[kLanes] = {};
  int64_t i = 0;
  const auto term = [center](T value) {
    const double x = static_cast<double>(to_compute(value)) - center;
    return kPower == 1 ? x : x * x;
  };
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lanes[j] += term(src[i + j]);
  }
  for (int j = 0; i < n; ++i, ++j) lanes[j] += term(src[i]);
  double result = 0;
  for (double lane : lanes) result += lane;
  return result;
}

struct Moments {
  double mean;
  double inv_std;  // 1 / sqrt(variance + epsilon)
};

template <typename T>
Moments moments(const T* src, int64_t n, double epsilon) {
  const double mean = lane_sum<1>(src, n, 0.0) / static_cast<double>(n);
  const double variance = lane_sum<2>(src, n, mean) / static_cast<double>(n);
  return {mean, 1.0 / std::sqrt(variance + epsilon)};
}

// ---- float LayerNorm rows with GCC vectors ------------------------------------------------------

template <typename S>
[[gnu::always_inline]] inline double horizontal_sum(typename S::F v) {
  double result = 0;
  for (size_t j = 0; j < sizeof(v) / sizeof(float); ++j) result += v[j];
  return result;
}

struct DeviationSums {
  double sum = 0;          // of d = x - center
  double sum_squares = 0;  // of d * d
};

// Sums of the deviations d = x - center and of d^2, in float vectors flushed into double. The center
// is a float pair high + low (high = a mean rounded to float, low = the rest): x - high is exact for
// x near the mean, so deviations keep their digits even when |mean| >> std.
template <typename S, bool kSquares>
[[gnu::always_inline]] inline DeviationSums deviation_sums(const float* src, int64_t n, float high, float low) {
  using F = typename S::F;
  constexpr int64_t kWidth = sizeof(F) / sizeof(float);
  DeviationSums sums;
  int64_t i = 0;
  while (i + kWidth <= n) {
    F s0{}, s1{}, q0{}, q1{};
    const int64_t flush = std::min(n, i + kFlushElements);
    for (; i + 2 * kWidth <= flush; i += 2 * kWidth) {
      const F d0 = (load<S>(src + i) - high) - low;
      const F d1 = (load<S>(src + i + kWidth) - high) - low;
      s0 += d0;
      s1 += d1;
      if constexpr (kSquares) {
        q0 += d0 * d0;
        q1 += d1 * d1;
      }
    }
    for (; i + kWidth <= flush; i += kWidth) {
      const F d = (load<S>(src + i) - high) - low;
      s0 += d;
      if constexpr (kSquares) q0 += d * d;
    }
    sums.sum += horizontal_sum<S>(s0 + s1);
    sums.sum_squares += horizontal_sum<S>(q0 + q1);
  }
  for (; i < n; ++i) {
    const double d = (static_cast<double>(src[i]) - high) - low;
    sums.sum += d;
    sums.sum_squares += d * d;
  }
  return sums;
}

struct LayerNormArgs {
  const float* src;
  const float* scale;
  const float* bias;  // null when absent
  float* dst;
  float* mean;     // optional outputs, null when not requested
  float* inv_std;
  int64_t size;    // elements per row
  double epsilon;
};

template <typename S>
[[gnu::always_inline]] inline void layer_norm_rows_simd(const LayerNormArgs& a, int64_t begin, int64_t end) {
  using F = typename S::F;
  constexpr int64_t kWidth = sizeof(F) / sizeof(float);
  const int64_t n = a.size;
  for (int64_t row = begin; row < end; ++row) {
    const float* x = a.src + row * n;
    float* y = a.dst + row * n;
    // A rough mean first, whose float sums may be off in the last digits of a large |mean|; then
    // deviations from it give the exact correction and the variance (the shifted-data formula,
    // which does not cancel because the shift is within rounding of the mean).
    const double n_double = static_cast<double>(n);
    const double rough = deviation_sums<S, false>(x, n, 0.0f, 0.0f).sum / n_double;
    const float rough_high = static_cast<float>(rough);
    const DeviationSums sums = deviation_sums<S, true>(x, n, rough_high, static_cast<float>(rough - rough_high));
    const double shift = sums.sum / n_double;
    const double mean = rough + shift;
    const double variance = std::max(0.0, sums.sum_squares / n_double - shift * shift);
    const float mean_high = static_cast<float>(mean);
    const float mean_low = static_cast<float>(mean - mean_high);
    const double inv_std = 1.0 / std::sqrt(variance + a.epsilon);
    const float inv_std_f = static_cast<float>(inv_std);
    int64_t i = 0;
    if (a.bias != nullptr) {
      for (; i + kWidth <= n; i += kWidth) {
        const F deviation = (load<S>(x + i) - mean_high) - mean_low;
        store<S>(y + i, deviation * (inv_std_f * load<S>(a.scale + i)) + load<S>(a.bias + i));
      }
      for (; i < n; ++i) y[i] = ((x[i] - mean_high) - mean_low) * (inv_std_f * a.scale[i]) + a.bias[i];
    } else {
      for (; i + kWidth <= n; i += kWidth) {
        const F deviation = (load<S>(x + i) - mean_high) - mean_low;
        store<S>(y + i, deviation * (inv_std_f * load<S>(a.scale + i)));
      }
      for (; i < n; ++i) y[i] = ((x[i] - mean_high) - mean_low) * (inv_std_f * a.scale[i]);
    }
    if (a.mean != nullptr) a.mean[row] = mean_high;
    if (a.inv_std != nullptr) a.inv_std[row] = inv_std_f;
  }
}

using LayerNormRowsFn = void (*)(const LayerNormArgs& args, int64_t begin, int64_t end);

__attribute__((target("avx512f"))) void layer_norm_rows_avx512(const LayerNormArgs& args, int64_t begin, int64_t end) {
  layer_norm_rows_simd<Simd<16>>(args, begin, end);
}
__attribute__((target("avx2,fma"))) void layer_norm_rows_avx2(const LayerNormArgs& args, int64_t begin, int64_t end) {
  layer_norm_rows_simd<Simd<8>>(args, begin, end);
}
void layer_norm_rows_baseline(const LayerNormArgs& args, int64_t begin, int64_t end) {
  layer_norm_rows_simd<Simd<4>>(args, begin, end);
}

IsaVariant<LayerNormRowsFn> float_layer_norm_rows() {
  return pick_isa_variant<LayerNormRowsFn>(layer_norm_rows_avx512, layer_norm_rows_avx2,
                                           layer_norm_rows_baseline);
}

// ---- kernels -----------------------------------------------------------------------------------

// Per-channel y = x * a + b with a = scale / sqrt(var + eps), b = B - mean * a. With spatial=0
// (opset 7 and 8) every element of a channel's plane has its own statistics: the parameters then
// hold channels * plane values.
KernelOrReason make_batch_norm(const OpSpec& spec, std::span<const TensorInfo>) {
  const double epsilon = spec.attrs().get_float("epsilon", kDefaultEpsilon);
  const Shape& shape = spec.input(0).shape;
  const int64_t channels = shape[1];
  const int64_t per_channel = checked_numel(spec.input(1).shape) / std::max<int64_t>(channels, 1);
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:batchnorm_inference", [epsilon, per_channel](std::span<const Tensor> inputs,
                                                                                std::span<Tensor> outputs) {
          const Tensor& x = inputs[0];
          const int64_t batch = x.dim(0);
          const int64_t channels = x.dim(1);
          const int64_t planes = batch * channels;
          const int64_t plane = planes == 0 ? 0 : x.numel() / planes;
          const int64_t params = channels * per_channel;
          std::vector<compute_t<T>> a(static_cast<size_t>(params)), b(static_cast<size_t>(params));
          for (int64_t k = 0; k < params; ++k) {
            const double scale = inputs[1].double_at(k) / std::sqrt(inputs[4].double_at(k) + epsilon);
            a[k] = static_cast<compute_t<T>>(scale);
            b[k] = static_cast<compute_t<T>>(inputs[2].double_at(k) - inputs[3].double_at(k) * scale);
          }
          const T* src = x.data<T>();
          T* dst = outputs[0].data<T>();
          parallel_for(0, planes, plane * kAffineCost, [&](int64_t begin, int64_t end) {
            for (int64_t p = begin; p < end; ++p) {
              const T* in = src + p * plane;
              T* out = dst + p * plane;
              const int64_t c = p % channels;
              if (per_channel == 1) {
                const compute_t<T> scale = a[c], shift = b[c];
                for (int64_t i = 0; i < plane; ++i) out[i] = from_compute<T>(to_compute(in[i]) * scale + shift);
              } else {
                const compute_t<T>* scale = a.data() + c * plane;
                const compute_t<T>* shift = b.data() + c * plane;
                for (int64_t i = 0; i < plane; ++i) out[i] = from_compute<T>(to_compute(in[i]) * scale[i] + shift[i]);
              }
            }
          });
        });
      },
      not_floating);
}

KernelOrReason make_layer_norm(const OpSpec& spec, std::span<const TensorInfo>) {
  const double epsilon = spec.attrs().get_float("epsilon", kDefaultEpsilon);
  const Shape& shape = spec.input(0).shape;
  const int64_t axis = normalize_axis(spec.attrs().get_int("axis", -1), static_cast<int64_t>(shape.size()));
  int64_t size = 1;
  for (size_t d = static_cast<size_t>(axis); d < shape.size(); ++d) size *= shape[d];
  const bool has_bias = spec.has_input(2);
  const DType dtype = spec.input(0).dtype;
  const IsaVariant<LayerNormRowsFn> float_rows = float_layer_norm_rows();
  const std::string name = dtype == DType::f32 ? std::string("native:layernorm:") + float_rows.isa : "native:layernorm";
  return visit_floating(
      dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel(name, [=, rows_fn = float_rows.fn](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          float* mean_out = outputs.size() > 1 && outputs[1].defined() ? outputs[1].data<float>() : nullptr;
          float* inv_std_out = outputs.size() > 2 && outputs[2].defined() ? outputs[2].data<float>() : nullptr;
          if (size == 0) {  // statistics of nothing
            if (mean_out) std::fill_n(mean_out, outputs[1].numel(), std::numeric_limits<float>::quiet_NaN());
            if (inv_std_out) std::fill_n(inv_std_out, outputs[2].numel(), std::numeric_limits<float>::quiet_NaN());
            return;
          }
          const int64_t rows = inputs[0].numel() / size;
          if constexpr (std::is_same_v<T, float>) {
            const LayerNormArgs args{inputs[0].data<float>(), inputs[1].data<float>(),
                                     has_bias ? inputs[2].data<float>() : nullptr,
                                     outputs[0].data<float>(), mean_out, inv_std_out, size, epsilon};
            parallel_for(0, rows, size * kNormalizeCost, [&](int64_t begin, int64_t end) { rows_fn(args, begin, end); });
          } else {
            (void)rows_fn;  // float rows only; clang warns about the capture in the other instantiations
            const T* src = inputs[0].data<T>();
            const T* scale = inputs[1].data<T>();
            const T* bias = has_bias ? inputs[2].data<T>() : nullptr;
            T* dst = outputs[0].data<T>();
            parallel_for(0, rows, size * kNormalizeCost, [&](int64_t begin, int64_t end) {
              for (int64_t r = begin; r < end; ++r) {
                const T* x = src + r * size;
                T* y = dst + r * size;
                const Moments m = moments(x, size, epsilon);
                for (int64_t i = 0; i < size; ++i) {
                  const double normalized = (to_compute(x[i]) - m.mean) * m.inv_std * to_compute(scale[i]);
                  y[i] = from_compute<T>(bias ? normalized + to_compute(bias[i]) : normalized);
                }
                if (mean_out) mean_out[r] = static_cast<float>(m.mean);
                if (inv_std_out) inv_std_out[r] = static_cast<float>(m.inv_std);
              }
            });
          }
        });
      },
      not_floating);
}

// Each (n, c) plane normalized by its own statistics, then scaled and shifted per channel.
KernelOrReason make_instance_norm(const OpSpec& spec, std::span<const TensorInfo>) {
  const double epsilon = spec.attrs().get_float("epsilon", kDefaultEpsilon);
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:instancenorm", [epsilon](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          const Tensor& x = inputs[0];
          const int64_t channels = x.dim(1);
          const int64_t planes = x.dim(0) * channels;
          const int64_t size = planes == 0 ? 0 : x.numel() / planes;
          if (size == 0) return;
          const T* src = x.data<T>();
          T* dst = outputs[0].data<T>();
          parallel_for(0, planes, size * kNormalizeCost, [&](int64_t begin, int64_t end) {
            for (int64_t p = begin; p < end; ++p) {
              const T* in = src + p * size;
              T* out = dst + p * size;
              const Moments m = moments(in, size, epsilon);
              // (x - mean) * a + b in double rather than x * a + (b - mean * a): no cancellation when
              // |mean| >> std.
              const double a = inputs[1].double_at(p % channels) * m.inv_std;
              const double b = inputs[2].double_at(p % channels);
              for (int64_t i = 0; i < size; ++i) out[i] = from_compute<T>((to_compute(in[i]) - m.mean) * a + b);
            }
          });
        });
      },
      not_floating);
}

// Each (n, group) block of channels normalized by its own statistics (it is contiguous), then
// scaled and shifted per group (opset 18) or per channel (opset 21).
KernelOrReason make_group_norm(const OpSpec& spec, std::span<const TensorInfo>) {
  const double epsilon = spec.attrs().get_float("epsilon", kDefaultEpsilon);
  const int64_t groups = group_norm_groups(spec);
  const bool per_channel = spec.opset >= 21;
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:groupnorm", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          const Tensor& x = inputs[0];
          const int64_t channels = x.dim(1);
          const int64_t blocks = x.dim(0) * groups;
          const int64_t plane = x.numel() / std::max<int64_t>(1, x.dim(0) * channels);
          const int64_t group_channels = channels / groups;
          const int64_t size = group_channels * plane;
          if (size == 0) return;
          const T* src = x.data<T>();
          T* dst = outputs[0].data<T>();
          parallel_for(0, blocks, size * kNormalizeCost, [&](int64_t begin, int64_t end) {
            for (int64_t block = begin; block < end; ++block) {
              const Moments m = moments(src + block * size, size, epsilon);
              const int64_t group = block % groups;
              for (int64_t c = 0; c < group_channels; ++c) {
                const int64_t parameter = per_channel ? group * group_channels + c : group;
                const double a = inputs[1].double_at(parameter) * m.inv_std;
                const double b = inputs[2].double_at(parameter);
                const T* in = src + block * size + c * plane;
                T* out = dst + block * size + c * plane;
                for (int64_t i = 0; i < plane; ++i) out[i] = from_compute<T>((to_compute(in[i]) - m.mean) * a + b);
              }
            }
          });
        });
      },
      not_floating);
}

// LRN: each value divided by (bias + alpha / size * the sum of squares over `size` neighbouring
// channels)^beta.
KernelOrReason make_lrn(const OpSpec& spec, std::span<const TensorInfo>) {
  const double alpha = spec.attrs().get_float("alpha", 1e-4f);
  const double beta = spec.attrs().get_float("beta", 0.75f);
  const double bias = spec.attrs().get_float("bias", 1.0f);
  const int64_t size = spec.attrs().require_int("size");
  const Shape shape = spec.input(0).shape;
  const int64_t channels = shape[1];
  const int64_t plane = product(shape, 2, shape.size());
  const int64_t before = (size - 1) / 2;  // channels below c in the window; size - 1 - before above
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:lrn", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          const T* src = inputs[0].data<T>();
          T* dst = outputs[0].data<T>();
          parallel_for(0, shape[0] * channels, plane * size, [&](int64_t begin, int64_t end) {
            for (int64_t nc = begin; nc < end; ++nc) {
              const int64_t c = nc % channels;
              const int64_t first = std::max<int64_t>(0, c - before);
              const int64_t last = std::min<int64_t>(channels - 1, c + size - 1 - before);
              const T* image = src + (nc - c) * plane;
              for (int64_t i = 0; i < plane; ++i) {
                double squares = 0;
                for (int64_t k = first; k <= last; ++k) {
                  const double v = to_compute(image[k * plane + i]);
                  squares += v * v;
                }
                const double x = to_compute(src[nc * plane + i]);
                dst[nc * plane + i] = from_compute<T>(x / std::pow(bias + alpha / static_cast<double>(size) * squares, beta));
              }
            }
          });
        });
      },
      not_floating);
}

// LpNormalization: each line along the axis divided by its L1 or L2 norm (a zero line stays zero).
KernelOrReason make_lp_norm(const OpSpec& spec, std::span<const TensorInfo>) {
  const Shape shape = spec.input(0).shape;
  const auto axis = static_cast<size_t>(
      normalize_axis(spec.attrs().get_int("axis", -1), static_cast<int64_t>(shape.size())));
  const bool l1 = spec.attrs().get_int("p", 2) == 1;
  const int64_t dim = shape[axis];
  const int64_t inner = product(shape, axis + 1, shape.size());
  const int64_t lines = dim == 0 ? 0 : product(shape, 0, shape.size()) / dim;
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:lpnorm", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          const T* src = inputs[0].data<T>();
          T* dst = outputs[0].data<T>();
          parallel_for(0, lines, dim * kNormalizeCost, [&](int64_t begin, int64_t end) {
            for (int64_t line = begin; line < end; ++line) {
              const int64_t base = (line / inner) * dim * inner + line % inner;
              double norm = 0;
              for (int64_t j = 0; j < dim; ++j) {
                const double v = to_compute(src[base + j * inner]);
                norm += l1 ? std::abs(v) : v * v;
              }
              if (!l1) norm = std::sqrt(norm);
              const double scale = norm == 0 ? 0.0 : 1.0 / norm;
              for (int64_t j = 0; j < dim; ++j)
                dst[base + j * inner] = from_compute<T>(to_compute(src[base + j * inner]) * scale);
            }
          });
        });
      },
      not_floating);
}

// MeanVarianceNormalization: (x - mean) / (std + 1e-9) with the statistics taken over `axes`, as
// ONNX's function body computes them.
KernelOrReason make_mean_variance_norm(const OpSpec& spec, std::span<const TensorInfo>) {
  constexpr double kEpsilon = 1e-9;
  const Shape shape = spec.input(0).shape;
  const std::vector<bool> reduced = mean_variance_axes(spec);
  // Each element's statistics slot: its coordinates in the dims that are not reduced.
  std::vector<int64_t> slot_strides(shape.size(), 0);
  int64_t slots = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (reduced[d]) continue;
    slot_strides[d] = slots;
    slots *= shape[d];
  }
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:mvn", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          const T* src = inputs[0].data<T>();
          T* dst = outputs[0].data<T>();
          const int64_t count = inputs[0].numel();
          if (count == 0) return;
          std::vector<double> sum(static_cast<size_t>(slots), 0.0);
          std::vector<double> squares(static_cast<size_t>(slots), 0.0);
          auto slot_of = [&](int64_t i) {
            int64_t slot = 0;
            for (size_t d = shape.size(); d-- > 0; i /= shape[d]) slot += (i % shape[d]) * slot_strides[d];
            return static_cast<size_t>(slot);
          };
          for (int64_t i = 0; i < count; ++i) sum[slot_of(i)] += to_compute(src[i]);
          const double per_slot = static_cast<double>(count / slots);
          for (double& s : sum) s /= per_slot;  // now the means
          for (int64_t i = 0; i < count; ++i) {
            const size_t slot = slot_of(i);
            const double d = to_compute(src[i]) - sum[slot];
            squares[slot] += d * d;
          }
          for (int64_t i = 0; i < count; ++i) {
            const size_t slot = slot_of(i);
            const double std_dev = std::sqrt(squares[slot] / per_slot);
            dst[i] = from_compute<T>((to_compute(src[i]) - sum[slot]) / (std_dev + kEpsilon));
          }
        });
      },
      not_floating);
}

// ---- ResidualLayerNorm ---------------------------------------------------------------------------

struct ResidualRows {
  const float* x;
  const float* residual;
  LayerNormArgs norm;  // src == dst: each row is normalized where the sum was written
  int64_t d0 = 1;      // output rows are [d0, d1]; x's are [d1, d0] when swapped
  int64_t d1 = 1;
  bool swapped = false;
};

// Each row: dst = x + residual while both are read once, then the row normalized in place (it is
// in L1 by then). Rows of a swapped x are read in [d1, d0] order.
template <typename S>
[[gnu::always_inline]] inline void residual_rows_simd(const ResidualRows& a, int64_t begin, int64_t end) {
  using F = typename S::F;
  constexpr int64_t kWidth = sizeof(F) / sizeof(float);
  const int64_t n = a.norm.size;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t x_row = a.swapped ? (row % a.d1) * a.d0 + row / a.d1 : row;
    const float* x = a.x + x_row * n;
    const float* r = a.residual + row * n;
    float* y = a.norm.dst + row * n;
    int64_t i = 0;
    for (; i + kWidth <= n; i += kWidth) store<S>(y + i, load<S>(x + i) + load<S>(r + i));
    for (; i < n; ++i) y[i] = x[i] + r[i];
    LayerNormArgs one = a.norm;
    one.src = y;
    one.dst = y;
    layer_norm_rows_simd<S>(one, 0, 1);
  }
}

using ResidualRowsFn = void (*)(const ResidualRows& args, int64_t begin, int64_t end);

__attribute__((target("avx512f"))) void residual_rows_avx512(const ResidualRows& args, int64_t begin,
                                                             int64_t end) {
  residual_rows_simd<Simd<16>>(args, begin, end);
}
__attribute__((target("avx2,fma"))) void residual_rows_avx2(const ResidualRows& args, int64_t begin,
                                                            int64_t end) {
  residual_rows_simd<Simd<8>>(args, begin, end);
}
void residual_rows_baseline(const ResidualRows& args, int64_t begin, int64_t end) {
  residual_rows_simd<Simd<4>>(args, begin, end);
}

KernelOrReason make_residual_layer_norm(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const Shape& shape = outputs[0].shape;
  for (int i = 0; i < 4; ++i) {
    if (spec.input(i).dtype != DType::f32)
      return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "ResidualLayerNorm runs float32 only");
  }
  if (shape.empty() || shape.back() == 0)
    return KernelOrReason::rejected(RefusalKind::unsupported_attribute,
                                    "ResidualLayerNorm needs a last axis");
  const bool swapped = spec.attrs().get_int("swap_leading", 0) != 0;
  if (swapped && shape.size() != 3)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape, "swapped rows need rank 3");
  const double epsilon = spec.attrs().get_float("epsilon", kDefaultEpsilon);
  const int64_t size = shape.back();
  const int64_t rows = checked_numel(shape) / size;
  const int64_t d0 = swapped ? shape[0] : 1;
  const int64_t d1 = swapped ? shape[1] : 1;
  const IsaVariant<ResidualRowsFn> variant =
      pick_isa_variant<ResidualRowsFn>(residual_rows_avx512, residual_rows_avx2, residual_rows_baseline);
  return make_kernel(str_cat("native:residual_layernorm:", variant.isa),
                     [=, rows_fn = variant.fn](std::span<const Tensor> inputs, std::span<Tensor> outs) {
                       ResidualRows args;
                       args.x = inputs[0].data<float>();
                       args.residual = inputs[1].data<float>();
                       args.norm = LayerNormArgs{nullptr,
                                                 inputs[2].data<float>(),
                                                 inputs[3].data<float>(),
                                                 outs[0].data<float>(),
                                                 nullptr,
                                                 nullptr,
                                                 size,
                                                 epsilon};
                       args.d0 = d0;
                       args.d1 = d1;
                       args.swapped = swapped;
                       parallel_for(0, rows, size * kNormalizeCost,
                                    [&](int64_t begin, int64_t end) { rows_fn(args, begin, end); });
                     });
}

constexpr KernelEntry kKernels[] = {
    {"BatchNormalization", make_batch_norm},
    {"LayerNormalization", make_layer_norm},
    {kResidualLayerNormOp, make_residual_layer_norm},
    {"InstanceNormalization", make_instance_norm},
    {"GroupNormalization", make_group_norm},
    {"LRN", make_lrn},
    {"LpNormalization", make_lp_norm},
    {"MeanVarianceNormalization", make_mean_variance_norm},
};

}  // namespace

std::span<const KernelEntry> normalization_kernels() { return kKernels; }

}  // namespace kiln::native
