// Native kernels for the shape ops. Reshape-like ops are views: they cost nothing at run time.
#include <cstring>
#include <type_traits>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/native_backend.h"
#include "backends/native/strided_copy.h"
#include "core/error.h"
#include "ops/broadcast.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

// A one-element tensor holding 1 in `dtype` (true for bool): EyeLike's diagonal, Dropout's mask.
Tensor one_of(DType dtype) {
  return visit_dtype(dtype, [](auto tag) {
    using T = decltype(tag);
    return Tensor::scalar<T>(from_compute<T>(1));
  });
}

// Writes `count` copies of the element at `value` (element_size bytes) to `dst`. Each thread fills
// its chunk by doubling the part already written, so the copies are long memcpys, not per element.
void fill_elements(void* dst, const void* value, size_t element_size, int64_t count) {
  char* dst_bytes = static_cast<char*>(dst);
  parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
    char* chunk = dst_bytes + begin * static_cast<int64_t>(element_size);
    const size_t total = static_cast<size_t>(end - begin) * element_size;
    std::memcpy(chunk, value, element_size);
    for (size_t filled = element_size; filled < total;) {
      const size_t step = std::min(filled, total - filled);
      std::memcpy(chunk + filled, chunk, step);
      filled += step;
    }
  });
}

// Shape, Size and Constant have values known at plan time; their kernel hands the value out.
KernelOrReason make_known_value(const OpSpec&, std::span<const TensorInfo> outputs) {
  const Tensor value = outputs[0].value;
  KILN_ASSERT(value.defined());
  return make_kernel("native:constant", [value](std::span<const Tensor>, std::span<Tensor> dst) {
    if (value.nbytes() > 0) std::memcpy(dst[0].raw_data(), value.raw_data(), value.nbytes());
  });
}

// Reshape, Flatten, Squeeze, Unsqueeze, Identity: the output is the input with a new shape.
KernelOrReason make_reshape_view(const OpSpec&, std::span<const TensorInfo> outputs) {
  const Shape shape = outputs[0].shape;
  return make_view_kernel("native:view", [shape](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    dst[0] = inputs[0].reshaped(shape);
  });
}

// Inference Dropout is Identity; the optional mask says every element was kept. View kernels get
// undefined outputs, so the mask is allocated here.
KernelOrReason make_dropout(const OpSpec&, std::span<const TensorInfo> outputs) {
  const Shape shape = outputs[0].shape;
  const bool wants_mask = outputs.size() > 1;
  const DType mask_dtype = wants_mask ? outputs[1].dtype : DType::boolean;
  const Tensor kept = one_of(mask_dtype);
  return make_view_kernel(
      "native:dropout_inference", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
        dst[0] = inputs[0].reshaped(shape);
        if (wants_mask && dst.size() > 1) {
          dst[1] = Tensor::empty(mask_dtype, shape);
          fill_elements(dst[1].raw_data(), kept.raw_data(), kept.nbytes(), dst[1].numel());
        }
      });
}

KernelOrReason make_expand(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const Shape out = outputs[0].shape;
  const std::vector<int64_t> strides = broadcast_strides(spec.input(0).shape, out);
  const size_t element_size = dtype_size(spec.input(0).dtype);
  return make_kernel("native:expand", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    strided_copy(dst[0].raw_data(), inputs[0].raw_data(), element_size, out, strides, 0);
  });
}

KernelOrReason make_constant_of_shape(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  Tensor value = Tensor::zeros(outputs[0].dtype, {});
  if (const Attribute* attribute = spec.attrs().find("value")) value = attribute->t.clone();
  return make_kernel("native:constant_of_shape", [value](std::span<const Tensor>, std::span<Tensor> dst) {
    fill_elements(dst[0].raw_data(), value.raw_data(), value.nbytes(), dst[0].numel());
  });
}

KernelOrReason make_range(const OpSpec& spec, std::span<const TensorInfo>) {
  return visit_dtype(spec.input(0).dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    if constexpr (is_half_v<T> || std::is_same_v<T, bool>) {
      return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                      "native Range supports float, double and integer types");
    } else {
      return make_kernel("native:range", [](std::span<const Tensor> inputs, std::span<Tensor> dst) {
        const T start = inputs[0].data<T>()[0];
        const T delta = inputs[2].data<T>()[0];
        T* out = dst[0].data<T>();
        // start + i * delta rather than a running sum, so float error does not accumulate.
        for (int64_t i = 0; i < dst[0].numel(); ++i)
          out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
      });
    }
  });
}

// EyeLike: zeros with ones on diagonal k (k > 0 above the main diagonal, k < 0 below).
KernelOrReason make_eye_like(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const int64_t rows = outputs[0].shape[0];
  const int64_t cols = outputs[0].shape[1];
  const int64_t k = spec.attrs().get_int("k", 0);
  const Tensor one = one_of(outputs[0].dtype);
  return make_kernel("native:eye_like", [=](std::span<const Tensor>, std::span<Tensor> dst) {
    const size_t element_size = one.nbytes();
    char* out = static_cast<char*>(dst[0].raw_data());
    std::memset(out, 0, dst[0].nbytes());
    for (int64_t row = std::max<int64_t>(0, -k); row < rows; ++row) {
      const int64_t col = row + k;
      if (col >= cols) break;
      std::memcpy(out + (row * cols + col) * static_cast<int64_t>(element_size), one.raw_data(),
                  element_size);
    }
  });
}

constexpr KernelEntry kKernels[] = {
    {"Shape", make_known_value},
    {"Size", make_known_value},
    {"Constant", make_known_value},
    {"Reshape", make_reshape_view},
    {"Flatten", make_reshape_view},
    {"Squeeze", make_reshape_view},
    {"Unsqueeze", make_reshape_view},
    {"Identity", make_reshape_view},
    {"Dropout", make_dropout},
    {"Expand", make_expand},
    {"ConstantOfShape", make_constant_of_shape},
    {"Range", make_range},
    {"EyeLike", make_eye_like},
};

}  // namespace

std::span<const KernelEntry> shape_kernels() {
  return kKernels;
}

}  // namespace kiln::native
