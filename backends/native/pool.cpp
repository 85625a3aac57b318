// Native pooling: MaxPool (with optional Indices), AveragePool, GlobalAveragePool, GlobalMaxPool.
// Each (image, channel) plane is independent, so planes are the unit of parallel work.
#include <cmath>
#include <limits>

#include "backends/native/element_math.h"
#include "backends/native/kernel_util.h"
#include "backends/native/native_backend.h"
#include "backends/native/spatial3d.h"
#include "ops/pool.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

enum class PoolKind { max, average };

template <typename T, PoolKind kKind>
void pool_planes(const Tensor& src, Tensor& dst, Tensor* indices, const Window3d& w, bool count_include_pad,
                 bool column_major_indices) {
  const int64_t planes = src.dim(0) * src.dim(1);
  const T* x = src.data<T>();
  T* y = dst.data<T>();
  parallel_for(0, planes, w.out_size() * w.kernel_size(), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* in = x + plane * w.in_size();
      T* out = y + plane * w.out_size();
      int64_t* index_out = indices ? indices->data<int64_t>() + plane * w.out_size() : nullptr;
      for (int64_t od = 0; od < w.out[0]; ++od) {
        for (int64_t oh = 0; oh < w.out[1]; ++oh) {
          for (int64_t ow = 0; ow < w.out[2]; ++ow) {
            const int64_t starts[3] = {od * w.stride[0] - w.pad[0], oh * w.stride[1] - w.pad[1],
                                       ow * w.stride[2] - w.pad[2]};
            double sum = 0;
            double best = -std::numeric_limits<double>::infinity();
            int64_t best_index = -1;
            int64_t valid = 0;
            int64_t padded = 1;  // window taps inside the padded input, for count_include_pad
            for (int d = 0; d < 3; ++d) {
              const int64_t last = starts[d] + (w.kernel[d] - 1) * w.dilation[d];
              const int64_t limit = w.in[d] + w.pad_end[d] - 1;
              padded *= (std::min(last, limit) - starts[d]) / w.dilation[d] + 1;
            }
            for (int64_t kd = 0; kd < w.kernel[0]; ++kd) {
              const int64_t id = starts[0] + kd * w.dilation[0];
              if (id < 0 || id >= w.in[0]) continue;
              for (int64_t kh = 0; kh < w.kernel[1]; ++kh) {
                const int64_t ih = starts[1] + kh * w.dilation[1];
                if (ih < 0 || ih >= w.in[1]) continue;
                for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
                  const int64_t iw = starts[2] + kw * w.dilation[2];
                  if (iw < 0 || iw >= w.in[2]) continue;
                  const int64_t offset = (id * w.in[1] + ih) * w.in[2] + iw;
                  const double value = to_compute(in[offset]);
                  ++valid;
                  if constexpr (kKind == PoolKind::max) {
                    if (value > best || best_index < 0) {
                      best = value;
                      best_index = column_major_indices ? (iw * w.in[1] + ih) * w.in[0] + id : offset;
                    }
                  } else {
                    sum += value;
                  }
                }
              }
            }
            const int64_t o = (od * w.out[1] + oh) * w.out[2] + ow;
            if constexpr (kKind == PoolKind::max) {
              out[o] = from_compute<T>(best);
              if (index_out) index_out[o] = plane * w.in_size() + best_index;
            } else {
              const int64_t divisor = count_include_pad ? padded : valid;
              out[o] = from_compute<T>(divisor > 0 ? sum / static_cast<double>(divisor) : 0.0);
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
    return KernelOrReason::rejected("native pooling supports up to 3 spatial dims");
  }
  const bool include_pad = params.count_include_pad;
  const bool column_major = params.storage_order == 1;
  auto make = [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    return make_kernel(kKind == PoolKind::max ? "native:maxpool" : "native:averagepool",
                       [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
                         Tensor* indices = outputs.size() > 1 && outputs[1].defined() ? &outputs[1] : nullptr;
                         pool_planes<T, kKind>(inputs[0], outputs[0], indices, w, include_pad, column_major);
                       });
  };
  switch (spec.input(0).dtype) {
    case DType::u8: return make(uint8_t{});
    case DType::i8: return make(int8_t{});
    default: break;
  }
  return visit_floating(spec.input(0).dtype, make,
                        [&] { return KernelOrReason::rejected("native pooling supports floating and 8-bit types"); });
}

template <PoolKind kKind>
KernelOrReason make_global_pool(const OpSpec& spec, std::span<const TensorInfo>) {
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel(kKind == PoolKind::max ? "native:global_maxpool" : "native:global_averagepool",
                           [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
                             const Tensor& src = inputs[0];
                             const int64_t planes = src.dim(0) * src.dim(1);
                             const int64_t size = planes == 0 ? 0 : src.numel() / planes;
                             const T* x = src.data<T>();
                             T* y = outputs[0].data<T>();
                             parallel_for(0, planes, size, [&](int64_t begin, int64_t end) {
                               for (int64_t p = begin; p < end; ++p) {
                                 const T* in = x + p * size;
                                 double acc = kKind == PoolKind::max ? -std::numeric_limits<double>::infinity() : 0.0;
                                 for (int64_t i = 0; i < size; ++i) {
                                   const double value = to_compute(in[i]);
                                   acc = kKind == PoolKind::max ? std::max(acc, value) : acc + value;
                                 }
                                 y[p] = from_compute<T>(kKind == PoolKind::max ? acc : acc / static_cast<double>(size));
                               }
                             });
                           });
      },
      [&] { return KernelOrReason::rejected("native pooling supports floating types only"); });
}

constexpr KernelEntry kKernels[] = {
    {"MaxPool", make_pool<PoolKind::max>},
    {"AveragePool", make_pool<PoolKind::average>},
    {"GlobalAveragePool", make_global_pool<PoolKind::average>},
    {"GlobalMaxPool", make_global_pool<PoolKind::max>},
};

}  // namespace

std::span<const KernelEntry> pool_kernels() { return kKernels; }

}  // namespace kiln::native
