// Native GridSample over 4-D X, computed as ONNX Runtime's CPU kernel computes it: each grid point is
// mapped to X's pixels, and every input pixel an interpolation reads is resolved by the padding mode
// (zero outside X, the nearest edge pixel, or the pixel mirrored back into X). Padding pixels one at a
// time, rather than moving the point into X first, is what keeps bicubic right near the border (and
// it is what PyTorch does). The grid is data, so points are mapped at run time; work is split over
// (n, c) planes, and 16-bit floats are computed in float.
#include <algorithm>
#include <cmath>
#include <string>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/native_backend.h"
#include "runtime/parallel.h"

namespace kiln::native {

namespace {

enum class SampleMode { nearest, linear, cubic };
enum class Padding { zeros, border, reflection };

// Input pixels read per axis for one output point.
constexpr int taps_of(SampleMode mode) {
  return mode == SampleMode::nearest ? 1 : mode == SampleMode::linear ? 2 : 4;
}

// Rough scalar operations per output point (mapping the point, its weights, the taps), for
// parallel_for's inline threshold.
constexpr int64_t kPointCost = 16;
constexpr int64_t kTapCost = 3;

// Keys' cubic convolution with A = -0.75, the coefficient ONNX Runtime and PyTorch use.
constexpr double kCubicA = -0.75;

// A grid point is data: one further out than this (in pixels), or not a number, is pinned here (NaN
// to the negative side). No float or double has a fractional part this far out, so zeros and border
// padding give what they would have, and integer conversions stay defined.
constexpr double kMaxCoordinate = 0x1p52;

// Shape inference accepted only the spelling of the model's opset (bilinear and bicubic before 20),
// so either spelling here names the same mode.
SampleMode sample_mode(const OpSpec& spec) {
  const std::string mode = spec.attrs().get_string("mode", spec.opset >= 20 ? "linear" : "bilinear");
  if (mode == "nearest") return SampleMode::nearest;
  return mode == "cubic" || mode == "bicubic" ? SampleMode::cubic : SampleMode::linear;
}

Padding padding_mode(const OpSpec& spec) {
  const std::string padding = spec.attrs().get_string("padding_mode", "zeros");
  if (padding == "border") return Padding::border;
  return padding == "reflection" ? Padding::reflection : Padding::zeros;
}

// One spatial axis of X: its length, and what the padding mode makes of pixels outside it.
template <typename C>
struct Axis {
  int64_t length = 0;
  bool align_corners = false;
  Padding padding = Padding::zeros;
  // Reflection mirrors at the centres of the edge pixels (align_corners) or at their outer edges.
  C low = 0;
  C high = 0;
};

template <typename C>
Axis<C> make_axis(int64_t length, bool align_corners, Padding padding) {
  Axis<C> axis;
  axis.length = length;
  axis.align_corners = align_corners;
  axis.padding = padding;
  axis.low = align_corners ? C(0) : C(-0.5);
  axis.high = align_corners ? static_cast<C>(length) - 1 : static_cast<C>(length) - C(0.5);
  return axis;
}

// From [-1, 1] to pixels: -1 and 1 are the centres of the edge pixels with align_corners, their outer
// edges without.
template <typename C>
C denormalize(C n, const Axis<C>& axis) {
  const C x = axis.align_corners ? (n + 1) / C(2) * static_cast<C>(axis.length - 1)
                                 : ((n + 1) * static_cast<C>(axis.length) - 1) / C(2);
  if (std::abs(x) <= static_cast<C>(kMaxCoordinate)) return x;
  return x > 0 ? static_cast<C>(kMaxCoordinate) : static_cast<C>(-kMaxCoordinate);
}

// Mirrors x at low and high until it lies between them.
template <typename C>
C reflect(C x, C low, C high) {
  const C range = high - low;
  if (range <= 0) return low;  // a single pixel with align_corners: every point is that pixel
  if (x >= low && x <= high) return x;
  const bool below = x < low;
  const C distance = below ? low - x : x - high;
  const C flips = std::floor(distance / range);
  const C rest = distance - flips * range;
  const bool even = std::fmod(flips, C(2)) == 0;
  return below == even ? low + rest : high - rest;
}

// The pixel that integer coordinate i reads along `axis`, or -1 for a zero.
template <typename C>
int64_t resolve(int64_t i, const Axis<C>& axis) {
  switch (axis.padding) {
    case Padding::zeros:
      return i >= 0 && i < axis.length ? i : -1;
    case Padding::border:
      return std::clamp<int64_t>(i, 0, axis.length - 1);
    case Padding::reflection:
      // The clamp only guards against rounding far out; a mirrored pixel always lies inside.
      return std::clamp<int64_t>(static_cast<int64_t>(reflect(static_cast<C>(i), axis.low, axis.high)), 0,
                                 axis.length - 1);
  }
  return -1;
}

template <typename C, int kTaps>
struct AxisTaps {
  int64_t index[kTaps];
  C weight[kTaps];
};

template <typename C>
void cubic_coefficients(C t, C coefficients[4]) {
  constexpr auto a = static_cast<C>(kCubicA);
  t = std::abs(t);
  coefficients[0] = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a;
  coefficients[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
  coefficients[2] = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1;
  coefficients[3] = ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a;
}

// The pixels coordinate v reads along `axis` and their weights.
template <SampleMode kMode, typename C>
AxisTaps<C, taps_of(kMode)> axis_taps(C v, const Axis<C>& axis) {
  AxisTaps<C, taps_of(kMode)> taps;
  if constexpr (kMode == SampleMode::nearest) {
    taps.index[0] = resolve(static_cast<int64_t>(std::nearbyint(v)), axis);
    taps.weight[0] = 1;
  } else if constexpr (kMode == SampleMode::linear) {
    const auto first = static_cast<int64_t>(std::floor(v));
    taps.index[0] = resolve(first, axis);
    taps.index[1] = resolve(first + 1, axis);
    taps.weight[0] = static_cast<C>(first + 1) - v;
    taps.weight[1] = v - static_cast<C>(first);
  } else {
    const int64_t first = static_cast<int64_t>(std::floor(v)) - 1;
    for (int k = 0; k < 4; ++k) taps.index[k] = resolve(first + k, axis);
    cubic_coefficients(v - static_cast<C>(first) - 1, taps.weight);
  }
  return taps;
}

// Interpolates along x within each row, then along y, in ONNX Runtime's order of operations.
template <SampleMode kMode, typename T>
compute_t<T> sample(const T* plane, int64_t width, const AxisTaps<compute_t<T>, taps_of(kMode)>& ys,
                    const AxisTaps<compute_t<T>, taps_of(kMode)>& xs) {
  using C = compute_t<T>;
  constexpr int kTaps = taps_of(kMode);
  if constexpr (kMode == SampleMode::nearest) {
    return ys.index[0] < 0 || xs.index[0] < 0 ? C(0) : to_compute(plane[ys.index[0] * width + xs.index[0]]);
  } else {
    C value = 0;
    for (int i = 0; i < kTaps; ++i) {
      C row = 0;
      for (int j = 0; j < kTaps; ++j) {
        const bool zero = ys.index[i] < 0 || xs.index[j] < 0;
        row += xs.weight[j] * (zero ? C(0) : to_compute(plane[ys.index[i] * width + xs.index[j]]));
      }
      value += ys.weight[i] * row;
    }
    return value;
  }
}

struct GridSampleShape {
  int64_t batch = 0;
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t out_height = 0;
  int64_t out_width = 0;
};

template <SampleMode kMode, typename T>
void grid_sample(const GridSampleShape& s, const Axis<compute_t<T>>& y_axis, const Axis<compute_t<T>>& x_axis,
                 const T* src, const T* grid, T* dst) {
  constexpr int kTaps = taps_of(kMode);
  const int64_t plane_in = s.height * s.width;
  const int64_t plane_out = s.out_height * s.out_width;
  const int64_t cost = plane_out * (kPointCost + kTapCost * kTaps * kTaps);
  parallel_for(0, s.batch * s.channels, cost, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const T* points = grid + (item / s.channels) * plane_out * 2;
      const T* plane = src + item * plane_in;
      T* out = dst + item * plane_out;
      for (int64_t p = 0; p < plane_out; ++p) {
        const auto xs = axis_taps<kMode>(denormalize(to_compute(points[2 * p]), x_axis), x_axis);
        const auto ys = axis_taps<kMode>(denormalize(to_compute(points[2 * p + 1]), y_axis), y_axis);
        out[p] = from_compute<T>(sample<kMode, T>(plane, s.width, ys, xs));
      }
    }
  });
}

KernelOrReason make_grid_sample(const OpSpec& spec, std::span<const TensorInfo>) {
  const Shape& x = spec.input(0).shape;
  const Shape& grid = spec.input(1).shape;
  const DType dtype = spec.input(0).dtype;
  if (spec.input(1).dtype != dtype)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                    "native GridSample needs grid in X's dtype (as ONNX Runtime does)");
  const GridSampleShape shape{x[0], x[1], x[2], x[3], grid[1], grid[2]};
  const SampleMode mode = sample_mode(spec);
  const Padding padding = padding_mode(spec);
  const bool align_corners = spec.attrs().get_int("align_corners", 0) != 0;
  return visit_floating(
      dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        using C = compute_t<T>;
        const Axis<C> y_axis = make_axis<C>(shape.height, align_corners, padding);
        const Axis<C> x_axis = make_axis<C>(shape.width, align_corners, padding);
        return make_kernel("native:grid_sample", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
          if (dst[0].numel() == 0) return;
          const T* src = inputs[0].data<T>();
          const T* points = inputs[1].data<T>();
          T* out = dst[0].data<T>();
          switch (mode) {
            case SampleMode::nearest:
              grid_sample<SampleMode::nearest>(shape, y_axis, x_axis, src, points, out);
              break;
            case SampleMode::linear:
              grid_sample<SampleMode::linear>(shape, y_axis, x_axis, src, points, out);
              break;
            case SampleMode::cubic:
              grid_sample<SampleMode::cubic>(shape, y_axis, x_axis, src, points, out);
              break;
          }
        });
      },
      [] {
        return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                        "native GridSample supports floating types only");
      });
}

constexpr KernelEntry kKernels[] = {
    {"GridSample", make_grid_sample},
};

}  // namespace

std::span<const KernelEntry> grid_sample_kernels() { return kKernels; }

}  // namespace kiln::native
