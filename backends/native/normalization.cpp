// Native normalization kernels. Statistics accumulate in double: the transformer's LayerNorm over
// 256 values and parity with PyTorch to 1e-4 need it more than they need speed here.
#include <cmath>

#include "backends/native/element_math.h"
#include "backends/native/kernel_util.h"
#include "backends/native/native_backend.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

KernelOrReason not_floating() { return KernelOrReason::rejected("native normalization supports floating types only"); }

KernelOrReason make_batch_norm(const OpSpec& spec, std::span<const TensorInfo>) {
  const double epsilon = spec.attrs().get_float("epsilon", 1e-5f);
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:batchnorm_inference", [epsilon](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          const Tensor& x = inputs[0];
          const int64_t batch = x.dim(0);
          const int64_t channels = x.dim(1);
          const int64_t plane = batch * channels == 0 ? 0 : x.numel() / (batch * channels);
          // y = x * a + b per channel, with a = scale / sqrt(var + eps), b = B - mean * a.
          std::vector<double> a(static_cast<size_t>(channels)), b(static_cast<size_t>(channels));
          for (int64_t c = 0; c < channels; ++c) {
            const double scale = to_compute(inputs[1].data<T>()[c]);
            const double mean = to_compute(inputs[3].data<T>()[c]);
            const double var = to_compute(inputs[4].data<T>()[c]);
            a[c] = scale / std::sqrt(var + epsilon);
            b[c] = to_compute(inputs[2].data<T>()[c]) - mean * a[c];
          }
          const T* src = x.data<T>();
          T* dst = outputs[0].data<T>();
          parallel_for(0, batch * channels, plane * 2, [&](int64_t begin, int64_t end) {
            for (int64_t p = begin; p < end; ++p) {
              const auto scale = static_cast<compute_t<T>>(a[p % channels]);
              const auto shift = static_cast<compute_t<T>>(b[p % channels]);
              for (int64_t i = p * plane; i < (p + 1) * plane; ++i) dst[i] = from_compute<T>(to_compute(src[i]) * scale + shift);
            }
          });
        });
      },
      not_floating);
}

KernelOrReason make_layer_norm(const OpSpec& spec, std::span<const TensorInfo>) {
  const double epsilon = spec.attrs().get_float("epsilon", 1e-5f);
  const Shape& shape = spec.input(0).shape;
  const int64_t axis = normalize_axis(spec.attrs().get_int("axis", -1), static_cast<int64_t>(shape.size()));
  int64_t size = 1;
  for (size_t d = static_cast<size_t>(axis); d < shape.size(); ++d) size *= shape[d];
  const bool has_bias = spec.has_input(2);
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:layernorm", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          const T* src = inputs[0].data<T>();
          const T* scale = inputs[1].data<T>();
          const T* bias = has_bias ? inputs[2].data<T>() : nullptr;
          T* dst = outputs[0].data<T>();
          float* mean_out = outputs.size() > 1 && outputs[1].defined() ? outputs[1].data<float>() : nullptr;
          float* inv_std_out = outputs.size() > 2 && outputs[2].defined() ? outputs[2].data<float>() : nullptr;
          const int64_t rows = size == 0 ? 0 : inputs[0].numel() / size;
          parallel_for(0, rows, size * 4, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
              const T* x = src + r * size;
              double sum = 0;
              for (int64_t i = 0; i < size; ++i) sum += to_compute(x[i]);
              const double mean = sum / static_cast<double>(size);
              double squares = 0;
              for (int64_t i = 0; i < size; ++i) {
                const double centered = to_compute(x[i]) - mean;
                squares += centered * centered;
              }
              const double inv_std = 1.0 / std::sqrt(squares / static_cast<double>(size) + epsilon);
              T* y = dst + r * size;
              for (int64_t i = 0; i < size; ++i) {
                const double normalized = (to_compute(x[i]) - mean) * inv_std * to_compute(scale[i]);
                y[i] = from_compute<T>(bias ? normalized + to_compute(bias[i]) : normalized);
              }
              if (mean_out) mean_out[r] = static_cast<float>(mean);
              if (inv_std_out) inv_std_out[r] = static_cast<float>(inv_std);
            }
          });
        });
      },
      not_floating);
}

KernelOrReason make_instance_norm(const OpSpec& spec, std::span<const TensorInfo>) {
  const double epsilon = spec.attrs().get_float("epsilon", 1e-5f);
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:instancenorm", [epsilon](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          const Tensor& x = inputs[0];
          const int64_t channels = x.dim(1);
          const int64_t planes = x.dim(0) * channels;
          const int64_t size = planes == 0 ? 0 : x.numel() / planes;
          const T* src = x.data<T>();
          T* dst = outputs[0].data<T>();
          parallel_for(0, planes, size * 4, [&](int64_t begin, int64_t end) {
            for (int64_t p = begin; p < end; ++p) {
              const T* in = src + p * size;
              double sum = 0, squares = 0;
              for (int64_t i = 0; i < size; ++i) sum += to_compute(in[i]);
              const double mean = sum / static_cast<double>(size);
              for (int64_t i = 0; i < size; ++i) squares += (to_compute(in[i]) - mean) * (to_compute(in[i]) - mean);
              const double inv_std = 1.0 / std::sqrt(squares / static_cast<double>(size) + epsilon);
              const double scale = to_compute(inputs[1].data<T>()[p % channels]);
              const double shift = to_compute(inputs[2].data<T>()[p % channels]);
              for (int64_t i = 0; i < size; ++i) {
                dst[p * size + i] = from_compute<T>((to_compute(in[i]) - mean) * inv_std * scale + shift);
              }
            }
          });
        });
      },
      not_floating);
}

constexpr KernelEntry kKernels[] = {
    {"BatchNormalization", make_batch_norm},
    {"LayerNormalization", make_layer_norm},
    {"InstanceNormalization", make_instance_norm},
};

}  // namespace

std::span<const KernelEntry> normalization_kernels() { return kKernels; }

}  // namespace kiln::native
