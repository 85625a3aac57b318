// Native Resize and Upsample. Every dim is resized independently, so each dim's mapping from output
// to input is a table of taps (input offset, weight) fixed at plan time; an output element is the
// weighted sum over the product of its dims' taps. Nearest has one tap per dim and copies elements
// of any dtype; linear and cubic compute in float32.
#include "ops/resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/base/function_kernel.h"
#include "backends/native/element_visit.h"
#include "backends/native/native_backend.h"
#include "backends/native/thread_scratch.h"
#include "core/memory_limit.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

// One dim's taps: output coordinate x reads offset[x * count + k] with weight[x * count + k] for
// k < count. Every coordinate has the same count (ONNX's window for the filter, so some weigh
// zero), so the loops over a row need no per-coordinate bounds.
struct AxisTaps {
  int64_t count = 1;
  std::vector<int64_t> offset;  // input index times the dim's stride, in elements
  std::vector<float> weight;
  std::vector<uint8_t> outside;  // tf_crop_and_resize: x maps outside the input; extrapolate
  bool any_outside = false;
};

int64_t nearest_index(float x, NearestRounding rounding, bool shrinking) {
  const float lower = std::floor(x);
  switch (rounding) {
    case NearestRounding::round_prefer_floor:
      return static_cast<int64_t>(x == lower + 0.5f ? lower : std::round(x));
    case NearestRounding::round_prefer_ceil:
      return static_cast<int64_t>(x == lower + 0.5f ? lower + 1 : std::round(x));
    case NearestRounding::floor:
      return static_cast<int64_t>(lower);
    case NearestRounding::ceil:
      return static_cast<int64_t>(std::ceil(x));
    case NearestRounding::simple:
      return static_cast<int64_t>(shrinking ? std::ceil(x) : lower);
  }
  return 0;
}

// The interpolation kernels at distance t (in input pixels, scaled by the antialias factor).
double linear_weight(double t) {
  return std::max(0.0, 1.0 - std::abs(t));
}

double cubic_weight(double t, double a) {
  t = std::abs(t);
  if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
  if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  return 0;
}

// Shrinks every coordinate's taps to the most nonzero weights any coordinate has: a dim that is not
// resized (every coordinate maps onto an input pixel) then has one tap, and a whole plane can be
// interpolated separably.
void drop_zero_taps(AxisTaps& taps) {
  const size_t count = static_cast<size_t>(taps.count);
  const size_t coordinates = taps.outside.size();
  size_t needed = 1;
  for (size_t x = 0; x < coordinates; ++x) {
    size_t kept = 0;
    for (size_t k = 0; k < count; ++k) {
      const size_t from = x * count + k;
      if (taps.weight[from] == 0) continue;
      taps.weight[x * count + kept] = taps.weight[from];
      taps.offset[x * count + kept] = taps.offset[from];
      ++kept;
    }
    // Padding taps read the first tap's pixel with weight zero.
    for (size_t k = kept; k < count; ++k) {
      taps.weight[x * count + k] = 0;
      taps.offset[x * count + k] = taps.offset[x * count];
    }
    needed = std::max(needed, kept);
  }
  if (needed == count) return;
  for (size_t x = 0; x < coordinates; ++x) {
    for (size_t k = 0; k < needed; ++k) {
      taps.weight[x * needed + k] = taps.weight[x * count + k];
      taps.offset[x * needed + k] = taps.offset[x * count + k];
    }
  }
  taps.weight.resize(coordinates * needed);
  taps.offset.resize(coordinates * needed);
  taps.count = static_cast<int64_t>(needed);
}

// Antialiasing widens the filter by 1 / scale when shrinking; otherwise the filter has its own width.
double filter_scale(const ResizeParams& p, size_t d) {
  return p.antialias && p.scales[d] < 1 ? p.scales[d] : 1.0;
}

// ONNX's window around a coordinate along dim d is [first, 2 - first) with first = floor(-radius /
// filter scale) + 1: how many taps that is (nearest reads one pixel; the filters read the whole
// window, a tap of which may weigh zero). In double: a tiny antialiasing scale makes it huge.
double window_taps(const ResizeParams& p, size_t d) {
  if (p.mode == ResizeMode::nearest) return 1;
  const double radius = p.mode == ResizeMode::cubic ? 2.0 : 1.0;
  return 2 - 2 * (std::floor(-radius / filter_scale(p, d)) + 1);
}

AxisTaps axis_taps(const ResizeParams& p, size_t d, int64_t in, int64_t out, int64_t stride) {
  AxisTaps taps;
  if (out == 0) return taps;  // nothing to read, whatever the scale
  const float scale = p.scales[d];
  const size_t rank = p.scales.size();
  const float roi_start = p.roi.empty() ? 0.0f : p.roi[d];
  const float roi_end = p.roi.empty() ? 1.0f : p.roi[rank + d];
  const double filter = filter_scale(p, d);
  const auto tap_begin = static_cast<int64_t>(1 - window_taps(p, d) / 2);
  const int64_t tap_end = 2 - tap_begin;
  const bool normalize = p.antialias || p.exclude_outside;
  taps.count = static_cast<int64_t>(window_taps(p, d));
  taps.offset.reserve(static_cast<size_t>(out * taps.count));
  taps.weight.reserve(static_cast<size_t>(out * taps.count));
  std::vector<double> window(static_cast<size_t>(taps.count));
  for (int64_t x = 0; x < out; ++x) {
    const float source = original_coordinate(p.transform, x, scale, in, out, roi_start, roi_end);
    const bool outside = p.transform == CoordinateTransform::tf_crop_and_resize &&
                         (source < 0 || source > static_cast<float>(in - 1));
    taps.outside.push_back(outside ? 1 : 0);
    taps.any_outside = taps.any_outside || outside;
    if (outside) {
      for (int64_t k = 0; k < taps.count; ++k) {
        taps.offset.push_back(0);
        taps.weight.push_back(0.0f);
      }
      continue;
    }
    if (p.mode == ResizeMode::nearest) {
      taps.offset.push_back(std::clamp<int64_t>(nearest_index(source, p.rounding, scale < 1), 0, in - 1) *
                            stride);
      taps.weight.push_back(1.0f);
      continue;
    }
    // Taps left of the coordinate come first; an integer coordinate counts as the right end of its
    // left interval (ratio in (0, 1]), as ONNX's reference does.
    const double base = std::ceil(static_cast<double>(source)) - 1;
    const double ratio = static_cast<double>(source) - base;
    double sum = 0;
    for (int64_t i = tap_begin; i < tap_end; ++i) {
      const int64_t j = static_cast<int64_t>(base) + i;
      const double t = (static_cast<double>(i) - ratio) * filter;
      double w = p.mode == ResizeMode::cubic ? cubic_weight(t, p.cubic_coeff_a) : linear_weight(t);
      if (p.exclude_outside && (j < 0 || j >= in)) w = 0;
      sum += w;
      window[static_cast<size_t>(i - tap_begin)] = w;
      taps.offset.push_back(std::clamp<int64_t>(j, 0, in - 1) * stride);
    }
    for (double w : window) taps.weight.push_back(static_cast<float>(normalize && sum != 0 ? w / sum : w));
  }
  drop_zero_taps(taps);
  return taps;
}

struct ResizeGeometry {
  std::vector<AxisTaps> axes;  // one per dim
  Shape out;
  std::vector<int64_t> row_strides;  // rows per step of each dim before the last
  int64_t rows = 0;                  // output elements outside the last dim
  int64_t taps_per_element = 1;
};

ResizeGeometry make_geometry(const ResizeParams& params, const Shape& in) {
  ResizeGeometry g;
  g.out = params.output;
  // Each dim's tables hold out x taps entries, which the output's size does not bound (a cubic Resize
  // to [1, 1, 3, 2^30]: 12 GB of output, 50 GB of column taps): their size is checked first.
  double table_bytes = 0;
  for (size_t d = 0; d < in.size(); ++d) {
    table_bytes += static_cast<double>(g.out[d]) *
                   (window_taps(params, d) * static_cast<double>(sizeof(int64_t) + sizeof(float)) + 1);
  }
  const uint64_t memory = planning_memory_limit_bytes();
  KILN_CHECK(memory == 0 || table_bytes <= static_cast<double>(memory), invalid_argument, "Resize to ",
             shape_to_string(g.out), " needs interpolation tables of ",
             static_cast<uint64_t>(table_bytes / (1 << 20)), " MiB, more than this machine's memory (",
             memory >> 20, " MiB)");
  int64_t stride = 1;
  g.axes.resize(in.size());
  for (size_t d = in.size(); d-- > 0;) {
    g.axes[d] = axis_taps(params, d, in[d], g.out[d], stride);
    stride *= in[d];
    g.taps_per_element *= g.axes[d].count;
  }
  g.rows = product(g.out, 0, g.out.size() - 1);
  g.row_strides.assign(g.out.size() - 1, 1);
  for (size_t d = g.row_strides.size(); d-- > 1;) g.row_strides[d - 1] = g.row_strides[d] * g.out[d];
  return g;
}

// Combines the taps of every dim before the last for output row `row`: `combined` gets (offset,
// weight) pairs; returns false when the row lies outside the crop region.
bool row_taps(const ResizeGeometry& g, int64_t row, std::vector<std::pair<int64_t, float>>& combined) {
  combined.assign(1, {0, 1.0f});
  for (size_t d = 0; d + 1 < g.out.size(); ++d) {
    const AxisTaps& taps = g.axes[d];
    const auto x = static_cast<size_t>((row / g.row_strides[d]) % g.out[d]);
    if (taps.outside[x]) return false;
    const auto first = x * static_cast<size_t>(taps.count);
    if (taps.count == 1) {
      for (auto& [offset, weight] : combined) {
        offset += taps.offset[first];
        weight *= taps.weight[first];
      }
      continue;
    }
    const size_t count = combined.size();
    for (size_t c = 0; c < count; ++c) {
      for (size_t k = first; k < first + static_cast<size_t>(taps.count); ++k)
        combined.emplace_back(combined[c].first + taps.offset[k], combined[c].second * taps.weight[k]);
    }
    combined.erase(combined.begin(), combined.begin() + static_cast<std::ptrdiff_t>(count));
  }
  return true;
}

// One output row of the last dim from the source rows in `combined`, kCount taps per element.
template <int64_t kCount>
void interpolate_row(float* out, const float* src, const std::vector<std::pair<int64_t, float>>& combined,
                     const AxisTaps& last, int64_t width, int64_t count) {
  const int64_t taps = kCount > 0 ? kCount : count;
  std::fill(out, out + width, 0.0f);
  for (const auto& [row_offset, row_weight] : combined) {
    const float* in = src + row_offset;
    const int64_t* offset = last.offset.data();
    const float* weight = last.weight.data();
    for (int64_t x = 0; x < width; ++x, offset += taps, weight += taps) {
      float sum = 0;
      for (int64_t k = 0; k < taps; ++k) sum += in[offset[k]] * weight[k];
      out[x] += row_weight * sum;
    }
  }
}

struct RowScratch {};

// True when only the last two dims interpolate (every dim before them has one tap) and nothing is
// cropped, and interpolating every input row of a plane along the last dim costs no more than the
// direct product: then each output plane comes from one input plane, whose rows are interpolated
// along the last dim once and blended along the other (K_h + K_w loads per output, not K_h x K_w).
bool separable(const ResizeGeometry& g, const Shape& in) {
  const size_t rank = g.out.size();
  if (rank < 2) return false;
  for (size_t d = 0; d < rank; ++d) {
    if (g.axes[d].any_outside || (d + 2 < rank && g.axes[d].count != 1)) return false;
  }
  return in[rank - 2] <= g.out[rank - 2] * g.axes[rank - 2].count;
}

void resize_planes(float* dst, const float* src, const ResizeGeometry& g, const Shape& in) {
  const size_t rank = g.out.size();
  const AxisTaps& rows = g.axes[rank - 2];
  const AxisTaps& columns = g.axes[rank - 1];
  const int64_t in_h = in[rank - 2];
  const int64_t in_w = in[rank - 1];
  const int64_t out_h = g.out[rank - 2];
  const int64_t out_w = g.out[rank - 1];
  const int64_t planes = product(g.out, 0, rank - 2);
  parallel_for(0, planes, out_h * out_w * (rows.count + columns.count), [&](int64_t begin, int64_t end) {
    float* wide = thread_scratch_floats<RowScratch>(static_cast<size_t>(in_h * out_w));
    for (int64_t plane = begin; plane < end; ++plane) {
      // The input plane: one tap in every leading dim.
      int64_t offset = 0;
      float plane_weight = 1.0f;
      for (size_t d = 0, rest = static_cast<size_t>(plane); d + 2 < rank; ++d) {
        const int64_t per = product(g.out, d + 1, rank - 2);
        const auto x = static_cast<size_t>(static_cast<int64_t>(rest) / per);
        rest %= static_cast<size_t>(per);
        offset += g.axes[d].offset[x];
        plane_weight *= g.axes[d].weight[x];
      }
      const float* in_plane = src + offset;
      for (int64_t r = 0; r < in_h; ++r) {
        const float* in_row = in_plane + r * in_w;
        float* out_row = wide + r * out_w;
        const int64_t* tap = columns.offset.data();
        const float* weight = columns.weight.data();
        for (int64_t x = 0; x < out_w; ++x, tap += columns.count, weight += columns.count) {
          float sum = 0;
          for (int64_t k = 0; k < columns.count; ++k) sum += in_row[tap[k]] * weight[k];
          out_row[x] = sum;
        }
      }
      float* out_plane = dst + plane * out_h * out_w;
      for (int64_t y = 0; y < out_h; ++y) {
        float* out_row = out_plane + y * out_w;
        std::fill(out_row, out_row + out_w, 0.0f);
        for (int64_t k = 0; k < rows.count; ++k) {
          const auto tap = static_cast<size_t>(y * rows.count + k);
          const float* wide_row = wide + rows.offset[tap] / in_w * out_w;
          const float w = rows.weight[tap] * plane_weight;
          for (int64_t x = 0; x < out_w; ++x) out_row[x] += w * wide_row[x];
        }
      }
    }
  });
}

void resize_float(float* dst, const float* src, const ResizeGeometry& g, float extrapolation) {
  const AxisTaps& last = g.axes.back();
  const int64_t width = g.out.back();
  parallel_for(0, g.rows, width * g.taps_per_element, [&](int64_t begin, int64_t end) {
    std::vector<std::pair<int64_t, float>> combined;
    for (int64_t row = begin; row < end; ++row) {
      float* out = dst + row * width;
      if (!row_taps(g, row, combined)) {
        std::fill(out, out + width, extrapolation);
        continue;
      }
      // Linear (2 taps) and cubic (4) unrolled; antialiased filters have more.
      if (last.count == 2) {
        interpolate_row<2>(out, src, combined, last, width, last.count);
      } else if (last.count == 4) {
        interpolate_row<4>(out, src, combined, last, width, last.count);
      } else {
        interpolate_row<0>(out, src, combined, last, width, last.count);
      }
      if (last.any_outside) {
        for (int64_t x = 0; x < width; ++x) {
          if (last.outside[static_cast<size_t>(x)]) out[x] = extrapolation;
        }
      }
    }
  });
}

template <typename U>
void resize_nearest(U* dst, const U* src, const ResizeGeometry& g, U extrapolation) {
  const AxisTaps& last = g.axes.back();
  const int64_t width = g.out.back();
  parallel_for(0, g.rows, width, [&](int64_t begin, int64_t end) {
    std::vector<std::pair<int64_t, float>> combined;
    for (int64_t row = begin; row < end; ++row) {
      U* out = dst + row * width;
      if (!row_taps(g, row, combined)) {
        std::fill(out, out + width, extrapolation);
        continue;
      }
      const U* in = src + combined[0].first;
      for (int64_t x = 0; x < width; ++x) out[x] = in[last.offset[static_cast<size_t>(x)]];
      if (last.any_outside) {
        for (int64_t x = 0; x < width; ++x) {
          if (last.outside[static_cast<size_t>(x)]) out[x] = extrapolation;
        }
      }
    }
  });
}

KernelOrReason make_resize(const OpSpec& spec, std::span<const TensorInfo>) {
  const ResizeParams params = resize_params(spec);
  const DType dtype = spec.input(0).dtype;
  const bool crops = params.transform == CoordinateTransform::tf_crop_and_resize;
  if (params.mode != ResizeMode::nearest && dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                    "native Resize interpolates float32 only (nearest copies any dtype)");
  if (!is_visitable_element_size(dtype_size(dtype)) || (crops && dtype != DType::f32))
    return KernelOrReason::rejected(
        RefusalKind::unsupported_dtype,
        "native Resize nearest copies 1, 2, 4 or 8-byte elements, and extrapolates "
        "(tf_crop_and_resize) float32 only");
  const Shape in = spec.input(0).shape;
  const ResizeGeometry geometry = make_geometry(params, in);
  const bool by_planes = separable(geometry, in);
  const float extrapolation = params.extrapolation_value;
  if (params.mode != ResizeMode::nearest) {
    return make_kernel("native:resize_" + std::string(params.mode == ResizeMode::linear ? "linear" : "cubic"),
                       [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
                         if (dst[0].numel() == 0) return;
                         if (by_planes) {
                           resize_planes(dst[0].data<float>(), inputs[0].data<float>(), geometry, in);
                         } else {
                           resize_float(dst[0].data<float>(), inputs[0].data<float>(), geometry,
                                        extrapolation);
                         }
                       });
  }
  const size_t element_size = dtype_size(dtype);
  return make_kernel("native:resize_nearest", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    if (dst[0].numel() == 0) return;
    visit_element_size(
        element_size,
        [&](auto tag) {
          using U = decltype(tag);
          U fill{};
          if (crops) std::memcpy(&fill, &extrapolation, sizeof(U));  // float32 only (checked above)
          resize_nearest(dst[0].data<U>(), inputs[0].data<U>(), geometry, fill);
        },
        [] {});
  });
}

constexpr KernelEntry kKernels[] = {
    {"Resize", make_resize},
    {"Upsample", make_resize},
};

}  // namespace

std::span<const KernelEntry> resize_kernels() {
  return kKernels;
}

}  // namespace kiln::native
