// Native RoiAlign and MaxRoiPool, computed as ONNX Runtime's CPU kernels compute them: ONNX's test data
// for RoiAlign came from there, and its spec leaves the sampling details to that code. Rois are data,
// so each roi's geometry is worked out at run time, once per roi and shared by its channels. Work is
// split over (roi, channel) planes; 16-bit floats are computed in float.
#include "ops/roi.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/native_backend.h"
#include "runtime/parallel.h"

namespace kiln::native {

namespace {

// Rough scalar operations per bilinear sample (four loads, their weights and products) and per
// element of a max window, for parallel_for's inline threshold.
constexpr int64_t kSampleCost = 12;
constexpr int64_t kWindowElementCost = 2;
// parallel_for's cost per item is an int64 estimate; a few absurd rois must not overflow it.
constexpr double kMaxCostPerItem = 1e15;

KernelOrReason not_floating(const char* op) {
  return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                  std::string("native ") + op + " supports floating types only");
}

int64_t cost_per_item(double total, int64_t items) {
  return static_cast<int64_t>(
      std::clamp(total / static_cast<double>(std::max<int64_t>(items, 1)), 1.0, kMaxCostPerItem));
}

// X's dims and the number of rois, fixed at plan time.
struct RoiShape {
  int64_t batch = 0;
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t num_rois = 0;
};

// ---- RoiAlign ------------------------------------------------------------------------------------

// One roi in X's pixels: where its first bin starts, the size of a bin, and how many samples each
// bin takes per side.
template <typename C>
struct RoiBox {
  C start_h = 0;
  C start_w = 0;
  C bin_h = 0;
  C bin_w = 0;
  int64_t grid_h = 0;
  int64_t grid_w = 0;
};

// The adaptive sample count of a bin side: ceil(bin size), none for an empty or inverted roi (as
// ONNX Runtime's loops run no sample then).
template <typename C>
int64_t adaptive_samples(C bin, int64_t roi, const char* side) {
  const C samples = std::ceil(bin);
  if (!(samples > 0)) return 0;
  KILN_CHECK(samples <= static_cast<C>(kMaxRoiSamplesPerSide), invalid_argument, "RoiAlign roi ", roi,
             " needs ", static_cast<double>(samples), " samples per bin ", side,
             ", more than kiln's limit of ", kMaxRoiSamplesPerSide,
             " (are its coordinates in X's pixels, after spatial_scale?)");
  return static_cast<int64_t>(samples);
}

// ONNX Runtime's order of operations, so that float results match it to the bit.
template <typename T>
RoiBox<compute_t<T>> roi_align_box(const RoiAlignParams& p, const T* rois, int64_t roi) {
  using C = compute_t<T>;
  const T* corners = rois + roi * 4;
  const auto scale = static_cast<C>(p.spatial_scale);
  const C offset = p.half_pixel ? C(0.5) : C(0);
  const C start_w = to_compute(corners[0]) * scale - offset;
  const C start_h = to_compute(corners[1]) * scale - offset;
  const C end_w = to_compute(corners[2]) * scale - offset;
  const C end_h = to_compute(corners[3]) * scale - offset;
  C height = end_h - start_h;
  C width = end_w - start_w;
  if (!p.half_pixel) {
    height = std::max(height, C(1));
    width = std::max(width, C(1));
  }
  KILN_CHECK(
      std::isfinite(start_h) && std::isfinite(start_w) && std::isfinite(height) && std::isfinite(width),
      invalid_argument, "RoiAlign roi ", roi, " (x1, y1, x2, y2) = (",
      static_cast<double>(to_compute(corners[0])), ", ", static_cast<double>(to_compute(corners[1])), ", ",
      static_cast<double>(to_compute(corners[2])), ", ", static_cast<double>(to_compute(corners[3])),
      ") is not finite once scaled by spatial_scale");
  RoiBox<C> box;
  box.start_h = start_h;
  box.start_w = start_w;
  box.bin_h = height / static_cast<C>(p.output_height);
  box.bin_w = width / static_cast<C>(p.output_width);
  box.grid_h = p.sampling_ratio > 0 ? p.sampling_ratio : adaptive_samples(box.bin_h, roi, "height");
  box.grid_w = p.sampling_ratio > 0 ? p.sampling_ratio : adaptive_samples(box.bin_w, roi, "width");
  return box;
}

// One sample coordinate along one axis, as the two input rows (or columns) it interpolates and their
// weights. A sample more than a pixel outside X contributes nothing.
template <typename C>
struct AxisSample {
  int64_t low = 0;
  int64_t high = 0;
  C low_weight = 0;
  C high_weight = 0;
  bool inside = false;
};

template <typename C>
AxisSample<C> axis_sample(C v, int64_t length) {
  AxisSample<C> s;
  if (!(v >= C(-1) && v <= static_cast<C>(length))) return s;
  if (v <= 0) v = 0;
  s.low = static_cast<int64_t>(v);
  if (s.low >= length - 1) {
    s.low = s.high = length - 1;
    v = static_cast<C>(s.low);
  } else {
    s.high = s.low + 1;
  }
  s.high_weight = v - static_cast<C>(s.low);
  s.low_weight = C(1) - s.high_weight;
  s.inside = true;
  return s;
}

// The samples of every bin along one axis: bin b's samples are samples[b * grid, (b + 1) * grid).
template <typename C>
void fill_axis_samples(std::vector<AxisSample<C>>& samples, C start, C bin, int64_t grid, int64_t bins,
                       int64_t length) {
  samples.resize(static_cast<size_t>(bins * grid));
  for (int64_t b = 0; b < bins; ++b) {
    for (int64_t i = 0; i < grid; ++i) {
      const C v = start + static_cast<C>(b) * bin +
                  static_cast<C>(static_cast<float>(i) + 0.5f) * bin / static_cast<C>(grid);
      samples[static_cast<size_t>(b * grid + i)] = axis_sample(v, length);
    }
  }
}

// One (roi, channel) plane of the output. avg averages the bilinear samples of a bin; max keeps, as
// ONNX Runtime does, the largest single weighted corner w * v of any sample, not the largest
// interpolated value.
template <RoiAlignMode kMode, typename T>
void roi_align_plane(const T* plane, int64_t width, const RoiAlignParams& p, const RoiBox<compute_t<T>>& box,
                     const std::vector<AxisSample<compute_t<T>>>& ys,
                     const std::vector<AxisSample<compute_t<T>>>& xs, T* out) {
  using C = compute_t<T>;
  const int64_t count = std::max<int64_t>(box.grid_h * box.grid_w, 1);
  for (int64_t ph = 0; ph < p.output_height; ++ph) {
    for (int64_t pw = 0; pw < p.output_width; ++pw) {
      C value = 0;
      bool first = true;
      for (int64_t iy = 0; iy < box.grid_h; ++iy) {
        const AxisSample<C>& y = ys[static_cast<size_t>(ph * box.grid_h + iy)];
        for (int64_t ix = 0; ix < box.grid_w; ++ix) {
          const AxisSample<C>& x = xs[static_cast<size_t>(pw * box.grid_w + ix)];
          // An outside sample reads element 0 with weight 0, as ONNX Runtime's does.
          const bool inside = y.inside && x.inside;
          const C w1 = inside ? y.low_weight * x.low_weight : C(0);
          const C w2 = inside ? y.low_weight * x.high_weight : C(0);
          const C w3 = inside ? y.high_weight * x.low_weight : C(0);
          const C w4 = inside ? y.high_weight * x.high_weight : C(0);
          const int64_t row_low = inside ? y.low * width : 0;
          const int64_t row_high = inside ? y.high * width : 0;
          const C v1 = to_compute(plane[row_low + (inside ? x.low : 0)]);
          const C v2 = to_compute(plane[row_low + (inside ? x.high : 0)]);
          const C v3 = to_compute(plane[row_high + (inside ? x.low : 0)]);
          const C v4 = to_compute(plane[row_high + (inside ? x.high : 0)]);
          if constexpr (kMode == RoiAlignMode::avg) {
            value += w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4;
          } else {
            const C corner = std::max(std::max(std::max(w1 * v1, w2 * v2), w3 * v3), w4 * v4);
            value = first ? corner : std::max(value, corner);
            first = false;
          }
        }
      }
      if constexpr (kMode == RoiAlignMode::avg) value /= static_cast<C>(count);
      out[ph * p.output_width + pw] = from_compute<T>(value);
    }
  }
}

template <RoiAlignMode kMode, typename T>
void roi_align(const RoiAlignParams& p, const RoiShape& shape, const T* src, const T* rois,
               const int64_t* batch_indices, T* dst) {
  using C = compute_t<T>;
  // Checked up front, so that a bad roi fails before any thread starts; the totals size the chunks.
  double samples = 0;
  for (int64_t r = 0; r < shape.num_rois; ++r) {
    const int64_t batch = batch_indices[r];
    KILN_CHECK(batch >= 0 && batch < shape.batch, invalid_argument, "RoiAlign batch_indices[", r,
               "] = ", batch, " is outside [0, ", shape.batch, "), X's batch size");
    const RoiBox<C> box = roi_align_box(p, rois, r);
    samples += static_cast<double>(box.grid_h) * static_cast<double>(box.grid_w);
  }
  const int64_t plane_in = shape.height * shape.width;
  const int64_t plane_out = p.output_height * p.output_width;
  const int64_t items = shape.num_rois * shape.channels;
  const int64_t cost = cost_per_item(
      samples * static_cast<double>(plane_out * kSampleCost) * static_cast<double>(shape.channels), items);
  parallel_for(0, items, cost, [&](int64_t begin, int64_t end) {
    std::vector<AxisSample<C>> ys;
    std::vector<AxisSample<C>> xs;
    RoiBox<C> box;
    int64_t current_roi = -1;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t roi = item / shape.channels;
      const int64_t channel = item % shape.channels;
      if (roi != current_roi) {
        box = roi_align_box(p, rois, roi);
        fill_axis_samples(ys, box.start_h, box.bin_h, box.grid_h, p.output_height, shape.height);
        fill_axis_samples(xs, box.start_w, box.bin_w, box.grid_w, p.output_width, shape.width);
        current_roi = roi;
      }
      const T* plane = src + (batch_indices[roi] * shape.channels + channel) * plane_in;
      roi_align_plane<kMode>(plane, shape.width, p, box, ys, xs, dst + item * plane_out);
    }
  });
}

KernelOrReason make_roi_align(const OpSpec& spec, std::span<const TensorInfo>) {
  const RoiAlignParams params = roi_align_params(spec);
  const Shape& x = spec.input(0).shape;
  const RoiShape shape{x[0], x[1], x[2], x[3], spec.input(1).shape[0]};
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel(
            "native:roi_align", [params, shape](std::span<const Tensor> inputs, std::span<Tensor> dst) {
              if (dst[0].numel() == 0) return;
              const T* src = inputs[0].data<T>();
              const T* rois = inputs[1].data<T>();
              const int64_t* batch_indices = inputs[2].data<int64_t>();
              if (params.mode == RoiAlignMode::avg) {
                roi_align<RoiAlignMode::avg>(params, shape, src, rois, batch_indices, dst[0].data<T>());
              } else {
                roi_align<RoiAlignMode::max>(params, shape, src, rois, batch_indices, dst[0].data<T>());
              }
            });
      },
      [] { return not_floating("RoiAlign"); });
}

// ---- MaxRoiPool ----------------------------------------------------------------------------------

// Rounded roi corners are clamped to this magnitude before they become integers: every bin of a roi
// reaching past it is clipped to X anyway, and the conversion stays defined.
constexpr double kMaxCornerMagnitude = 0x1p40;

// Caffe's RoiPool: a roi's corners rounded to whole pixels (its size at least 1x1), and in a bin
// covering rows [floor(ph * bin_h), ceil((ph + 1) * bin_h)) of the roi, clipped to X, the largest
// element; an empty bin is 0.
template <typename T>
struct PooledRoi {
  int64_t batch = 0;
  int64_t start_w = 0;
  int64_t start_h = 0;
  compute_t<T> bin_h = 0;
  compute_t<T> bin_w = 0;
};

template <typename T>
PooledRoi<T> pooled_roi(const MaxRoiPoolParams& p, const T* rois, int64_t roi, int64_t batch_size) {
  using C = compute_t<T>;
  const T* row = rois + roi * 5;
  const C batch = to_compute(row[0]);
  // ONNX Runtime truncates the batch index towards zero.
  KILN_CHECK(batch > -1 && batch < static_cast<C>(batch_size), invalid_argument, "MaxRoiPool roi ", roi,
             " has batch_index ", static_cast<double>(batch), ", outside [0, ", batch_size,
             "), X's batch size");
  int64_t corner[4];
  for (int k = 0; k < 4; ++k) {
    const C scaled = to_compute(row[k + 1]) * static_cast<C>(p.spatial_scale);
    KILN_CHECK(std::isfinite(scaled), invalid_argument, "MaxRoiPool roi ", roi, " coordinate ", k + 1, " (",
               static_cast<double>(to_compute(row[k + 1])), ") is not finite once scaled by spatial_scale");
    corner[k] = static_cast<int64_t>(
        std::clamp(static_cast<double>(std::round(scaled)), -kMaxCornerMagnitude, kMaxCornerMagnitude));
  }
  PooledRoi<T> pooled;
  pooled.batch = static_cast<int64_t>(batch);
  pooled.start_w = corner[0];
  pooled.start_h = corner[1];
  const int64_t height = std::max<int64_t>(corner[3] - corner[1] + 1, 1);
  const int64_t width = std::max<int64_t>(corner[2] - corner[0] + 1, 1);
  pooled.bin_h = static_cast<C>(height) / static_cast<C>(p.pooled_height);
  pooled.bin_w = static_cast<C>(width) / static_cast<C>(p.pooled_width);
  return pooled;
}

// Where bin `b` of a roi starting at `start` lies along an axis of X of `length`: [first, last).
template <typename C>
std::pair<int64_t, int64_t> pooled_bin(int64_t b, C bin, int64_t start, int64_t length) {
  const auto first = static_cast<int64_t>(std::floor(static_cast<C>(b) * bin));
  const auto last = static_cast<int64_t>(std::ceil(static_cast<C>(b + 1) * bin));
  return {std::clamp<int64_t>(first + start, 0, length), std::clamp<int64_t>(last + start, 0, length)};
}

template <typename T>
void max_roi_pool(const MaxRoiPoolParams& p, const RoiShape& shape, const T* src, const T* rois, T* dst) {
  using C = compute_t<T>;
  double window = 0;
  for (int64_t r = 0; r < shape.num_rois; ++r) {
    const PooledRoi<T> roi = pooled_roi(p, rois, r, shape.batch);
    window += std::min(static_cast<double>(roi.bin_h) * static_cast<double>(p.pooled_height),
                       static_cast<double>(shape.height)) *
              std::min(static_cast<double>(roi.bin_w) * static_cast<double>(p.pooled_width),
                       static_cast<double>(shape.width));
  }
  const int64_t plane_in = shape.height * shape.width;
  const int64_t plane_out = p.pooled_height * p.pooled_width;
  const int64_t items = shape.num_rois * shape.channels;
  const int64_t cost =
      cost_per_item((window * kWindowElementCost + static_cast<double>(plane_out * shape.num_rois)) *
                        static_cast<double>(shape.channels),
                    items);
  parallel_for(0, items, cost, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const PooledRoi<T> roi = pooled_roi(p, rois, item / shape.channels, shape.batch);
      const T* plane = src + (roi.batch * shape.channels + item % shape.channels) * plane_in;
      T* out = dst + item * plane_out;
      for (int64_t ph = 0; ph < p.pooled_height; ++ph) {
        const auto [h_first, h_last] = pooled_bin(ph, roi.bin_h, roi.start_h, shape.height);
        for (int64_t pw = 0; pw < p.pooled_width; ++pw) {
          const auto [w_first, w_last] = pooled_bin(pw, roi.bin_w, roi.start_w, shape.width);
          const bool empty = h_last <= h_first || w_last <= w_first;
          C best = empty ? C(0) : -std::numeric_limits<C>::infinity();
          for (int64_t h = h_first; h < h_last; ++h) {
            for (int64_t w = w_first; w < w_last; ++w) {
              const C v = to_compute(plane[h * shape.width + w]);
              if (v > best) best = v;
            }
          }
          out[ph * p.pooled_width + pw] = from_compute<T>(best);
        }
      }
    }
  });
}

KernelOrReason make_max_roi_pool(const OpSpec& spec, std::span<const TensorInfo>) {
  const MaxRoiPoolParams params = max_roi_pool_params(spec);
  const Shape& x = spec.input(0).shape;
  const RoiShape shape{x[0], x[1], x[2], x[3], spec.input(1).shape[0]};
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel(
            "native:max_roi_pool", [params, shape](std::span<const Tensor> inputs, std::span<Tensor> dst) {
              if (dst[0].numel() == 0) return;
              max_roi_pool(params, shape, inputs[0].data<T>(), inputs[1].data<T>(), dst[0].data<T>());
            });
      },
      [] { return not_floating("MaxRoiPool"); });
}

constexpr KernelEntry kKernels[] = {
    {"RoiAlign", make_roi_align},
    {"MaxRoiPool", make_max_roi_pool},
};

}  // namespace

std::span<const KernelEntry> roi_kernels() { return kKernels; }

}  // namespace kiln::native
