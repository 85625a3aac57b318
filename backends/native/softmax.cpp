// Native Softmax, LogSoftmax and Hardmax over [outer, axis, inner] views of the input.
#include <cmath>
#include <limits>

#include "backends/native/element_math.h"
#include "backends/native/kernel_util.h"
#include "backends/native/native_backend.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

enum class SoftmaxKind { softmax, log_softmax, hardmax };

template <typename T, SoftmaxKind kKind>
void softmax_rows(const T* src, T* dst, int64_t outer, int64_t dim, int64_t inner) {
  parallel_for(0, outer * inner, dim * 8, [&](int64_t begin, int64_t end) {
    std::vector<double> values(static_cast<size_t>(dim));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t base = (row / inner) * dim * inner + row % inner;
      double max_value = -std::numeric_limits<double>::infinity();
      int64_t argmax = 0;
      for (int64_t i = 0; i < dim; ++i) {
        values[i] = to_compute(src[base + i * inner]);
        if (values[i] > max_value) {
          max_value = values[i];
          argmax = i;
        }
      }
      if constexpr (kKind == SoftmaxKind::hardmax) {
        for (int64_t i = 0; i < dim; ++i) dst[base + i * inner] = from_compute<T>(i == argmax ? 1.0 : 0.0);
        continue;
      }
      double sum = 0;
      for (int64_t i = 0; i < dim; ++i) sum += std::exp(values[i] - max_value);
      for (int64_t i = 0; i < dim; ++i) {
        const double shifted = values[i] - max_value;
        dst[base + i * inner] =
            from_compute<T>(kKind == SoftmaxKind::softmax ? std::exp(shifted) / sum : shifted - std::log(sum));
      }
    }
  });
}

template <SoftmaxKind kKind>
KernelOrReason make_softmax(const OpSpec& spec, std::span<const TensorInfo>) {
  const Shape& shape = spec.input(0).shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t axis = normalize_axis(spec.attrs().get_int("axis", spec.opset < 13 ? 1 : -1), rank);
  int64_t outer = 1, dim = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t size = shape[static_cast<size_t>(d)];
    if (d < axis) {
      outer *= size;
    } else if (spec.opset < 13 || d == axis) {
      dim *= size;  // before opset 13 everything from axis on is one normalized block
    } else {
      inner *= size;
    }
  }
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:softmax", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          softmax_rows<T, kKind>(inputs[0].data<T>(), outputs[0].data<T>(), outer, dim, inner);
        });
      },
      [] { return KernelOrReason::rejected("native softmax supports floating types only"); });
}

constexpr KernelEntry kKernels[] = {
    {"Softmax", make_softmax<SoftmaxKind::softmax>},
    {"LogSoftmax", make_softmax<SoftmaxKind::log_softmax>},
    {"Hardmax", make_softmax<SoftmaxKind::hardmax>},
};

}  // namespace

std::span<const KernelEntry> softmax_kernels() { return kKernels; }

}  // namespace kiln::native
