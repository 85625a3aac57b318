// Native kernels for the shape ops. Reshape-like ops are views: they cost nothing at run time.
#include <cmath>
#include <cstring>

#include "backends/native/broadcast_loop.h"
#include "backends/native/element_math.h"
#include "backends/native/kernel_util.h"
#include "backends/native/native_backend.h"
#include "backends/native/strided_copy.h"
#include "core/error.h"
#include "ops/broadcast.h"

namespace kiln::native {
namespace {

// Shape, Size and Constant have values known at plan time; their kernel hands the value out.
KernelOrReason make_known_value(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const Tensor value = outputs[0].value;
  KILN_ASSERT(value.defined());
  return make_kernel("native:constant", [value](std::span<const Tensor>, std::span<Tensor> dst) {
    std::memcpy(dst[0].raw_data(), value.raw_data(), value.nbytes());
  });
}

// Reshape, Flatten, Squeeze, Unsqueeze, Identity: the output is the input with a new shape.
KernelOrReason make_reshape_view(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const Shape shape = outputs[0].shape;
  return make_view_kernel("native:view", [shape](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    dst[0] = inputs[0].reshaped(shape);
  });
}

KernelOrReason make_dropout(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const Shape shape = outputs[0].shape;
  return make_view_kernel("native:dropout_inference", [shape](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    dst[0] = inputs[0];
    if (dst.size() > 1) {
      dst[1] = Tensor::empty(DType::boolean, shape);
      std::memset(dst[1].raw_data(), 1, dst[1].nbytes());
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
  Tensor value = Tensor::zeros(DType::f32, {1});
  if (const Attribute* attribute = spec.attrs().find("value")) value = attribute->t;
  return make_kernel("native:constant_of_shape", [value](std::span<const Tensor>, std::span<Tensor> dst) {
    const size_t size = value.nbytes();
    char* out = static_cast<char*>(dst[0].raw_data());
    for (int64_t i = 0; i < dst[0].numel(); ++i) std::memcpy(out + i * size, value.raw_data(), size);
  });
}

KernelOrReason make_range(const OpSpec& spec, std::span<const TensorInfo>) {
  return visit_dtype(spec.input(0).dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    if constexpr (is_half_v<T> || std::is_same_v<T, bool>) {
      return KernelOrReason::rejected("native Range does not support this dtype");
    } else {
      return make_kernel("native:range", [](std::span<const Tensor> inputs, std::span<Tensor> dst) {
        const T start = inputs[0].data<T>()[0];
        const T delta = inputs[2].data<T>()[0];
        T* out = dst[0].data<T>();
        for (int64_t i = 0; i < dst[0].numel(); ++i) out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
      });
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
};

}  // namespace

std::span<const KernelEntry> shape_kernels() { return kKernels; }

}  // namespace kiln::native
