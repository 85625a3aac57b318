// Native pooling: MaxPool (with optional Indices), AveragePool, LpPool and their global forms, whose
// (image, channel) planes are independent and so the unit of parallel work; and MaxUnpool.
#include "ops/pool.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/element_visit.h"
#include "backends/native/native_backend.h"
#include "backends/native/spatial3d.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

enum class PoolKind { max, average, lp };

// LpPool's p = 2 (the default, and what models use) squares and takes a square root instead of
// calling pow for every tap.
constexpr double kSquareOrder = 2;

// What one tap adds to an Lp window's sum: |x|^p.
template <typename C>
C lp_power(C value, double p) {
  return p == kSquareOrder ? static_cast<C>(value * value)
                           : static_cast<C>(std::pow(std::abs(static_cast<double>(value)), p));
}

// An Lp window's result from its sum: sum^(1/p).
template <typename C>
C lp_root(C sum, double p) {
  return p == kSquareOrder ? static_cast<C>(std::sqrt(sum)) : static_cast<C>(std::pow(sum, 1 / p));
}

// For every output index along one dim, the window taps [lo, hi) that land inside the input and
// how many land inside the padded input (AveragePool's count_include_pad divisor), fixed at plan
// time so the per-output loops need neither bounds checks nor divisions.
struct DimTaps {
  std::vector<int64_t> lo;
  std::vector<int64_t> hi;
  std::vector<int64_t> padded;
};

struct PoolGeometry {
  Window3d w;
  std::array<DimTaps, 3> taps;
};

PoolGeometry make_geometry(const Window3d& w) {
  PoolGeometry geometry{w, {}};
  for (int d = 0; d < 3; ++d) {
    DimTaps& taps = geometry.taps[d];
    for (int64_t o = 0; o < w.out[d]; ++o) {
      const int64_t start = o * w.stride[d] - w.pad[d];
      int64_t lo = 0;
      while (lo < w.kernel[d] && start + lo * w.dilation[d] < 0) ++lo;
      int64_t hi = lo;
      while (hi < w.kernel[d] && start + hi * w.dilation[d] < w.in[d]) ++hi;
      const int64_t last = start + (w.kernel[d] - 1) * w.dilation[d];
      const int64_t limit = w.in[d] + w.pad_end[d] - 1;  // last index of the padded input
      taps.lo.push_back(lo);
      taps.hi.push_back(hi);
      taps.padded.push_back((std::min(last, limit) - start) / w.dilation[d] + 1);
    }
  }
  return geometry;
}

// What a max over nothing yields: -inf for floating types, the lowest value for integers.
template <typename T>
T lowest_value() {
  if constexpr (std::is_integral_v<T>) {
    return std::numeric_limits<T>::lowest();
  } else {
    return from_compute<T>(-std::numeric_limits<float>::infinity());
  }
}

template <typename T, PoolKind kKind>
void pool_planes(const Tensor& src, Tensor& dst, Tensor* indices, const PoolGeometry& geometry,
                 bool count_include_pad, bool column_major_indices) {
  using Compute = compute_t<T>;
  const Window3d& w = geometry.w;
  const auto& taps = geometry.taps;
  const int64_t planes = src.dim(0) * src.dim(1);
  const T* x = src.data<T>();
  T* y = dst.data<T>();
  parallel_for(0, planes, w.out_size() * w.kernel_size(), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* in = x + plane * w.in_size();
      T* out = y + plane * w.out_size();
      int64_t* index_out = indices ? indices->data<int64_t>() + plane * w.out_size() : nullptr;
      int64_t o = 0;
      for (int64_t od = 0; od < w.out[0]; ++od) {
        const int64_t start_d = od * w.stride[0] - w.pad[0];
        for (int64_t oh = 0; oh < w.out[1]; ++oh) {
          const int64_t start_h = oh * w.stride[1] - w.pad[1];
          for (int64_t ow = 0; ow < w.out[2]; ++ow, ++o) {
            const int64_t start_w = ow * w.stride[2] - w.pad[2];
            const int64_t kw_lo = taps[2].lo[ow];
            const int64_t kw_hi = taps[2].hi[ow];
            Compute best{};
            Compute sum{};
            int64_t best_offset = -1;
            int64_t valid = 0;
            for (int64_t kd = taps[0].lo[od]; kd < taps[0].hi[od]; ++kd) {
              const int64_t id = start_d + kd * w.dilation[0];
              for (int64_t kh = taps[1].lo[oh]; kh < taps[1].hi[oh]; ++kh) {
                const int64_t ih = start_h + kh * w.dilation[1];
                const int64_t row = (id * w.in[1] + ih) * w.in[2] + start_w;
                valid += kw_hi - kw_lo;
                for (int64_t kw = kw_lo; kw < kw_hi; ++kw) {
                  const int64_t offset = row + kw * w.dilation[2];
                  const Compute value = to_compute(in[offset]);
                  if constexpr (kKind == PoolKind::max) {
                    // The first maximum wins, as in ONNX's reference.
                    if (best_offset < 0 || value > best) {
                      best = value;
                      best_offset = offset;
                    }
                  } else {
                    sum += value;
                  }
                }
              }
            }
            if constexpr (kKind == PoolKind::max) {
              // A window entirely in the padding (possible with ceil_mode) has no maximum.
              out[o] = best_offset < 0 ? lowest_value<T>() : from_compute<T>(best);
              if (index_out) {
                int64_t index = std::max<int64_t>(best_offset, 0);
                if (column_major_indices) {
                  const int64_t iw = index % w.in[2];
                  const int64_t ih = index / w.in[2] % w.in[1];
                  const int64_t id = index / (w.in[1] * w.in[2]);
                  index = (iw * w.in[1] + ih) * w.in[0] + id;
                }
                index_out[o] = plane * w.in_size() + index;
              }
            } else {
              const int64_t divisor =
                  count_include_pad ? taps[0].padded[od] * taps[1].padded[oh] * taps[2].padded[ow] : valid;
              out[o] = from_compute<T>(divisor > 0 ? static_cast<double>(sum) / static_cast<double>(divisor) : 0.0);
            }
          }
        }
      }
    }
  });
}

// The same without indices, a row of outputs at a time: for each input row under the window, every
// tap kw updates all outputs whose window holds it fully in a tight loop over ow (the interior
// [full_lo, full_hi) of the row), and the few border outputs take the checked path.
template <typename T, PoolKind kKind>
void pool_rows(const Tensor& src, Tensor& dst, const PoolGeometry& geometry, bool count_include_pad, double p) {
  using Compute = compute_t<T>;
  const Window3d& w = geometry.w;
  const auto& taps = geometry.taps;
  const int64_t planes = src.dim(0) * src.dim(1);
  const int64_t out_w = w.out[2];
  int64_t full_lo = 0;  // outputs along w whose window lies entirely inside the input row
  while (full_lo < out_w && taps[2].lo[full_lo] != 0) ++full_lo;
  int64_t full_hi = full_lo;
  while (full_hi < out_w && taps[2].lo[full_hi] == 0 && taps[2].hi[full_hi] == w.kernel[2]) ++full_hi;
  const T* x = src.data<T>();
  T* y = dst.data<T>();
  parallel_for(0, planes, w.out_size() * w.kernel_size(), [&](int64_t begin, int64_t end) {
    std::vector<Compute> acc(static_cast<size_t>(out_w));
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* in = x + plane * w.in_size();
      T* out = y + plane * w.out_size();
      for (int64_t od = 0; od < w.out[0]; ++od) {
        const int64_t start_d = od * w.stride[0] - w.pad[0];
        for (int64_t oh = 0; oh < w.out[1]; ++oh, out += out_w) {
          const int64_t start_h = oh * w.stride[1] - w.pad[1];
          const Compute init = kKind == PoolKind::max ? to_compute(lowest_value<T>()) : Compute{};
          std::fill(acc.begin(), acc.end(), init);
          for (int64_t kd = taps[0].lo[od]; kd < taps[0].hi[od]; ++kd) {
            const int64_t id = start_d + kd * w.dilation[0];
            for (int64_t kh = taps[1].lo[oh]; kh < taps[1].hi[oh]; ++kh) {
              const int64_t ih = start_h + kh * w.dilation[1];
              const T* row = in + (id * w.in[1] + ih) * w.in[2] - w.pad[2];  // + ow * stride + kw * dilation
              auto update = [&](int64_t ow, int64_t kw) {
                const Compute value = to_compute(row[ow * w.stride[2] + kw * w.dilation[2]]);
                if constexpr (kKind == PoolKind::max) {
                  acc[ow] = value > acc[ow] ? value : acc[ow];
                } else if constexpr (kKind == PoolKind::lp) {
                  acc[ow] += lp_power(value, p);
                } else {
                  acc[ow] += value;
                }
              };
              for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
                for (int64_t ow = full_lo; ow < full_hi; ++ow) update(ow, kw);
              }
              for (int64_t ow = 0; ow < out_w; ++ow) {
                if (ow == full_lo) ow = full_hi;
                if (ow >= out_w) break;
                for (int64_t kw = taps[2].lo[ow]; kw < taps[2].hi[ow]; ++kw) update(ow, kw);
              }
            }
          }
          for (int64_t ow = 0; ow < out_w; ++ow) {
            if constexpr (kKind == PoolKind::max) {
              out[ow] = from_compute<T>(acc[ow]);
            } else if constexpr (kKind == PoolKind::lp) {
              out[ow] = from_compute<T>(lp_root(acc[ow], p));
            } else {
              const int64_t valid = (taps[0].hi[od] - taps[0].lo[od]) * (taps[1].hi[oh] - taps[1].lo[oh]) *
                                    (taps[2].hi[ow] - taps[2].lo[ow]);
              const int64_t divisor =
                  count_include_pad ? taps[0].padded[od] * taps[1].padded[oh] * taps[2].padded[ow] : valid;
              out[ow] = from_compute<T>(divisor > 0 ? static_cast<double>(acc[ow]) / static_cast<double>(divisor)
                                                    : 0.0);
            }
          }
        }
      }
    }
  });
}

template <PoolKind kKind>
KernelOrReason make_pool(const OpSpec& spec, std::span<const TensorInfo>) {
  const PoolParams params = pool_params(spec);
  Window3d w;
  if (!lift_to_3d(params.input_spatial, params.window, w)) {
    return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                    "native pooling supports up to 3 spatial dims");
  }
  const PoolGeometry geometry = make_geometry(w);
  const bool include_pad = params.count_include_pad;
  const bool column_major = params.storage_order == 1;
  const double p = params.p;
  const char* name = kKind == PoolKind::max       ? "native:maxpool"
                     : kKind == PoolKind::average ? "native:averagepool"
                                                  : "native:lppool";
  auto make = [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    return make_kernel(name, [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
      // LpPool has no Indices output, so pool_planes knows no Lp norm.
      if constexpr (kKind != PoolKind::lp) {
        if (outputs.size() > 1 && outputs[1].defined()) {
          pool_planes<T, kKind>(inputs[0], outputs[0], &outputs[1], geometry, include_pad, column_major);
          return;
        }
      }
      pool_rows<T, kKind>(inputs[0], outputs[0], geometry, include_pad, p);
    });
  };
  switch (spec.input(0).dtype) {
    case DType::u8: return make(uint8_t{});
    case DType::i8: return make(int8_t{});
    default: break;
  }
  return visit_floating(spec.input(0).dtype, make, [&] {
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                    "native pooling supports floating and 8-bit types");
  });
}

template <PoolKind kKind>
KernelOrReason make_global_pool(const OpSpec& spec, std::span<const TensorInfo>) {
  const double p = kKind == PoolKind::lp ? lp_order(spec) : 0.0;
  const char* name = kKind == PoolKind::max       ? "native:global_maxpool"
                     : kKind == PoolKind::average ? "native:global_averagepool"
                                                  : "native:global_lppool";
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel(name, [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          const Tensor& src = inputs[0];
          const int64_t planes = src.dim(0) * src.dim(1);
          const int64_t size = planes == 0 ? 0 : src.numel() / planes;
          const T* x = src.data<T>();
          T* y = outputs[0].data<T>();
          parallel_for(0, planes, size, [&](int64_t begin, int64_t end) {
            for (int64_t plane = begin; plane < end; ++plane) {
              const T* in = x + plane * size;
              double acc = kKind == PoolKind::max ? -std::numeric_limits<double>::infinity() : 0.0;
              for (int64_t i = 0; i < size; ++i) {
                const double value = to_compute(in[i]);
                if constexpr (kKind == PoolKind::max) {
                  acc = std::max(acc, value);
                } else if constexpr (kKind == PoolKind::lp) {
                  acc += lp_power(value, p);
                } else {
                  acc += value;
                }
              }
              if constexpr (kKind == PoolKind::max) {
                y[plane] = from_compute<T>(acc);
              } else if constexpr (kKind == PoolKind::lp) {
                y[plane] = from_compute<T>(lp_root(acc, p));
              } else {
                y[plane] = from_compute<T>(acc / static_cast<double>(size));
              }
            }
          });
        });
      },
      [&] {
        return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                        "native pooling supports floating types only");
      });
}

// Where flat `index` into `unpooled` lands in a larger output with strides `output_strides`.
int64_t output_offset(int64_t index, const Shape& unpooled, const std::vector<int64_t>& output_strides) {
  int64_t offset = 0;
  for (size_t d = unpooled.size(); d-- > 0;) {
    offset += index % unpooled[d] * output_strides[d];
    index /= unpooled[d];
  }
  return offset;
}

// Indices are data, so each is checked as it is read. The scatter runs in order on one thread
// because indices may repeat, and then the last write must win, as in ONNX's reference.
KernelOrReason make_max_unpool(const OpSpec& spec, std::span<const TensorInfo>) {
  const MaxUnpoolParams params = max_unpool_params(spec);
  const size_t element_size = dtype_size(spec.input(0).dtype);
  if (!is_visitable_element_size(element_size)) {
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                    "native MaxUnpool moves 1, 2, 4 or 8-byte elements");
  }
  const Shape unpooled = params.unpooled;
  const int64_t unpooled_size = checked_numel(unpooled);
  const bool padded = params.output != unpooled;
  const std::vector<int64_t> output_strides = contiguous_strides(params.output);
  return make_kernel("native:maxunpool", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
    const int64_t* indices = inputs[1].data<int64_t>();
    visit_element_size(
        element_size,
        [&](auto tag) {
          using U = decltype(tag);
          const U* src = inputs[0].data<U>();
          U* out = outputs[0].data<U>();
          std::fill_n(out, outputs[0].numel(), U{});
          for (int64_t i = 0; i < inputs[0].numel(); ++i) {
            const int64_t index = indices[i];
            KILN_CHECK(index >= 0 && index < unpooled_size, invalid_argument, "MaxUnpool index ", index,
                       " (element ", i, " of I) is outside the unpooled tensor of shape ",
                       shape_to_string(unpooled));
            out[padded ? output_offset(index, unpooled, output_strides) : index] = src[i];
          }
        },
        [] {});
  });
}

constexpr KernelEntry kKernels[] = {
    {"MaxPool", make_pool<PoolKind::max>},
    {"AveragePool", make_pool<PoolKind::average>},
    {"LpPool", make_pool<PoolKind::lp>},
    {"GlobalAveragePool", make_global_pool<PoolKind::average>},
    {"GlobalMaxPool", make_global_pool<PoolKind::max>},
    {"GlobalLpPool", make_global_pool<PoolKind::lp>},
    {"MaxUnpool", make_max_unpool},
};

}  // namespace

std::span<const KernelEntry> pool_kernels() { return kKernels; }

}  // namespace kiln::native
