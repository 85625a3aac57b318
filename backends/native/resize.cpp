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
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

// One dim's taps: output coordinate x reads offset[first[x] .. first[x + 1]) with those weights.
struct AxisTaps {
  std::vector<int64_t> first;
  std::vector<int64_t> offset;  // input index times the dim's stride, in elements
  std::vector<float> weight;
  std::vector<uint8_t> outside;  // tf_crop_and_resize: x maps outside the input; extrapolate
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
double linear_weight(double t) { return std::max(0.0, 1.0 - std::abs(t)); }

double cubic_weight(double t, double a) {
  t = std::abs(t);
  if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
  if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  return 0;
}

AxisTaps axis_taps(const ResizeParams& p, size_t d, int64_t in, int64_t out, int64_t stride) {
  AxisTaps taps;
  const float scale = p.scales[d];
  const size_t rank = p.scales.size();
  const float roi_start = p.roi.empty() ? 0.0f : p.roi[d];
  const float roi_end = p.roi.empty() ? 1.0f : p.roi[rank + d];
  // Antialiasing widens the filter by 1 / scale when shrinking; otherwise the filter has its own width.
  const double filter_scale = p.antialias && scale < 1 ? scale : 1.0;
  const double radius = p.mode == ResizeMode::cubic ? 2.0 : 1.0;
  const auto tap_begin = static_cast<int64_t>(std::floor(-radius / filter_scale) + 1);
  const int64_t tap_end = static_cast<int64_t>(2 * radius) - tap_begin;
  const bool normalize = p.antialias || p.exclude_outside;
  for (int64_t x = 0; x < out; ++x) {
    taps.first.push_back(static_cast<int64_t>(taps.offset.size()));
    const float source = original_coordinate(p.transform, x, scale, in, out, roi_start, roi_end);
    const bool outside = p.transform == CoordinateTransform::tf_crop_and_resize &&
                         (source < 0 || source > static_cast<float>(in - 1));
    taps.outside.push_back(outside ? 1 : 0);
    if (outside) continue;
    if (p.mode == ResizeMode::nearest) {
      const int64_t index = std::clamp<int64_t>(nearest_index(source, p.rounding, scale < 1), 0, in - 1);
      taps.offset.push_back(index * stride);
      taps.weight.push_back(1.0f);
      continue;
    }
    // Taps left of the coordinate come first; an integer coordinate counts as the right end of its
    // left interval (ratio in (0, 1]), as ONNX's reference does.
    const double base = std::ceil(static_cast<double>(source)) - 1;
    const double ratio = static_cast<double>(source) - base;
    const size_t start = taps.weight.size();
    double sum = 0;
    std::vector<double> weights;
    for (int64_t i = tap_begin; i < tap_end; ++i) {
      const int64_t j = static_cast<int64_t>(base) + i;
      const double t = (static_cast<double>(i) - ratio) * filter_scale;
      double w = p.mode == ResizeMode::cubic ? cubic_weight(t, p.cubic_coeff_a) : linear_weight(t);
      if (p.exclude_outside && (j < 0 || j >= in)) w = 0;
      sum += w;
      weights.push_back(w);
      taps.offset.push_back(std::clamp<int64_t>(j, 0, in - 1) * stride);
    }
    for (double w : weights) taps.weight.push_back(static_cast<float>(normalize && sum != 0 ? w / sum : w));
    // Zero weights cost a load each and change nothing: drop them.
    size_t kept = start;
    for (size_t k = start; k < taps.weight.size(); ++k) {
      if (taps.weight[k] == 0) continue;
      taps.weight[kept] = taps.weight[k];
      taps.offset[kept] = taps.offset[k];
      ++kept;
    }
    taps.weight.resize(kept);
    taps.offset.resize(kept);
  }
  taps.first.push_back(static_cast<int64_t>(taps.offset.size()));
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
  int64_t stride = 1;
  g.axes.resize(in.size());
  for (size_t d = in.size(); d-- > 0;) {
    g.axes[d] = axis_taps(params, d, in[d], g.out[d], stride);
    stride *= in[d];
    const int64_t taps = g.out[d] > 0 ? static_cast<int64_t>(g.axes[d].offset.size()) / g.out[d] + 1 : 1;
    g.taps_per_element *= taps;
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
    const size_t count = combined.size();
    const auto begin = static_cast<size_t>(taps.first[x]);
    const auto end = static_cast<size_t>(taps.first[x + 1]);
    if (end - begin == 1) {
      for (auto& [offset, weight] : combined) {
        offset += taps.offset[begin];
        weight *= taps.weight[begin];
      }
      continue;
    }
    for (size_t c = 0; c < count; ++c) {
      for (size_t k = begin; k < end; ++k)
        combined.emplace_back(combined[c].first + taps.offset[k], combined[c].second * taps.weight[k]);
    }
    combined.erase(combined.begin(), combined.begin() + static_cast<std::ptrdiff_t>(count));
  }
  return true;
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
      for (int64_t x = 0; x < width; ++x) {
        if (last.outside[static_cast<size_t>(x)]) {
          out[x] = extrapolation;
          continue;
        }
        const int64_t tap_begin = last.first[static_cast<size_t>(x)];
        const int64_t tap_end = last.first[static_cast<size_t>(x) + 1];
        float sum = 0;
        for (const auto& [offset, weight] : combined) {
          float inner = 0;
          for (int64_t k = tap_begin; k < tap_end; ++k)
            inner += src[offset + last.offset[static_cast<size_t>(k)]] * last.weight[static_cast<size_t>(k)];
          sum += weight * inner;
        }
        out[x] = sum;
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
      for (int64_t x = 0; x < width; ++x) {
        const auto xs = static_cast<size_t>(x);
        out[x] = last.outside[xs] ? extrapolation : in[last.offset[static_cast<size_t>(last.first[xs])]];
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
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                    "native Resize nearest copies 1, 2, 4 or 8-byte elements, and extrapolates "
                                    "(tf_crop_and_resize) float32 only");
  const ResizeGeometry geometry = make_geometry(params, spec.input(0).shape);
  const float extrapolation = params.extrapolation_value;
  if (params.mode != ResizeMode::nearest) {
    return make_kernel("native:resize_" + std::string(params.mode == ResizeMode::linear ? "linear" : "cubic"),
                       [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
                         if (dst[0].numel() == 0) return;
                         resize_float(dst[0].data<float>(), inputs[0].data<float>(), geometry, extrapolation);
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

std::span<const KernelEntry> resize_kernels() { return kKernels; }

}  // namespace kiln::native
