// Native data-movement kernels. They copy bytes (dtype_size wide), so one kernel serves every dtype.
#include <cstring>

#include "backends/native/kernel_util.h"
#include "backends/native/native_backend.h"
#include "backends/native/strided_copy.h"
#include "core/error.h"
#include "ops/data_movement.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

int64_t product(const Shape& shape, size_t begin, size_t end) {
  int64_t result = 1;
  for (size_t d = begin; d < end; ++d) result *= shape[d];
  return result;
}

KernelOrReason make_concat(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const Shape& out = outputs[0].shape;
  const size_t axis = static_cast<size_t>(normalize_axis(spec.attrs().require_int("axis"), static_cast<int64_t>(out.size())));
  const int64_t outer = product(out, 0, axis);
  const int64_t inner_bytes = product(out, axis + 1, out.size()) * static_cast<int64_t>(dtype_size(outputs[0].dtype));
  std::vector<int64_t> block_bytes;  // per input: bytes it contributes to each outer step
  for (const TensorInfo& input : spec.inputs) block_bytes.push_back(input.shape[axis] * inner_bytes);
  int64_t row_bytes = 0;
  for (int64_t bytes : block_bytes) row_bytes += bytes;
  return make_kernel("native:concat", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    char* out_bytes = static_cast<char*>(dst[0].raw_data());
    parallel_for(0, outer, row_bytes / 4 + 1, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        char* to = out_bytes + o * row_bytes;
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (block_bytes[i] == 0) continue;
          std::memcpy(to, static_cast<const char*>(inputs[i].raw_data()) + o * block_bytes[i],
                      static_cast<size_t>(block_bytes[i]));
          to += block_bytes[i];
        }
      }
    });
  });
}

KernelOrReason make_split(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const Shape& in = spec.input(0).shape;
  const size_t axis = static_cast<size_t>(normalize_axis(spec.attrs().get_int("axis", 0), static_cast<int64_t>(in.size())));
  const int64_t outer = product(in, 0, axis);
  const int64_t inner_bytes = product(in, axis + 1, in.size()) * static_cast<int64_t>(dtype_size(spec.input(0).dtype));
  std::vector<int64_t> block_bytes;
  for (const TensorInfo& output : outputs) block_bytes.push_back(output.shape[axis] * inner_bytes);
  const int64_t row_bytes = in[axis] * inner_bytes;
  return make_kernel("native:split", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    const char* in_bytes = static_cast<const char*>(inputs[0].raw_data());
    parallel_for(0, outer, row_bytes / 4 + 1, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const char* from = in_bytes + o * row_bytes;
        for (size_t i = 0; i < dst.size(); ++i) {
          if (block_bytes[i] > 0) {
            std::memcpy(static_cast<char*>(dst[i].raw_data()) + o * block_bytes[i], from,
                        static_cast<size_t>(block_bytes[i]));
          }
          from += block_bytes[i];
        }
      }
    });
  });
}

KernelOrReason make_slice(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const SliceParams params = slice_params(spec);
  const std::vector<int64_t> in_strides = contiguous_strides(spec.input(0).shape);
  std::vector<int64_t> strides;
  int64_t offset = 0;
  for (size_t d = 0; d < in_strides.size(); ++d) {
    strides.push_back(in_strides[d] * params.steps[d]);
    offset += params.starts[d] * in_strides[d];
  }
  const size_t element_size = dtype_size(spec.input(0).dtype);
  const Shape out = outputs[0].shape;
  return make_kernel("native:slice", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    strided_copy(dst[0].raw_data(), inputs[0].raw_data(), element_size, out, strides, offset);
  });
}

KernelOrReason make_transpose(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const std::vector<int64_t> perm = transpose_perm(spec);
  const std::vector<int64_t> in_strides = contiguous_strides(spec.input(0).shape);
  std::vector<int64_t> strides;
  for (int64_t axis : perm) strides.push_back(in_strides[static_cast<size_t>(axis)]);
  const size_t element_size = dtype_size(spec.input(0).dtype);
  const Shape out = outputs[0].shape;
  return make_kernel("native:transpose", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    strided_copy(dst[0].raw_data(), inputs[0].raw_data(), element_size, out, strides, 0);
  });
}

KernelOrReason make_tile(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  // Output viewed as [r0, d0, r1, d1, ...]: repeats step with stride 0 over the input.
  const Shape& in = spec.input(0).shape;
  const std::vector<int64_t> in_strides = contiguous_strides(in);
  const std::vector<int64_t> repeats = spec.constant_input(1, "repeats").to_int64_vector();
  Shape view;
  std::vector<int64_t> strides;
  for (size_t d = 0; d < in.size(); ++d) {
    view.push_back(repeats[d]);
    strides.push_back(0);
    view.push_back(in[d]);
    strides.push_back(in_strides[d]);
  }
  const size_t element_size = dtype_size(spec.input(0).dtype);
  return make_kernel("native:tile", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    strided_copy(dst[0].raw_data(), inputs[0].raw_data(), element_size, view, strides, 0);
  });
}

// Reads index i of an int32 or int64 tensor.
int64_t index_at(const Tensor& indices, int64_t i) {
  return indices.dtype() == DType::i64 ? indices.data<int64_t>()[i] : indices.data<int32_t>()[i];
}

// Negative indices count from the end; anything else out of range is an error naming the index.
int64_t checked_index(int64_t index, int64_t dim, const char* op) {
  KILN_CHECK(index >= -dim && index < dim, invalid_argument, op, " index ", index, " is out of range for a dim of size ",
             dim);
  return index < 0 ? index + dim : index;
}

KernelOrReason make_gather(const OpSpec& spec, std::span<const TensorInfo>) {
  const Shape& data = spec.input(0).shape;
  const size_t axis = static_cast<size_t>(normalize_axis(spec.attrs().get_int("axis", 0), static_cast<int64_t>(data.size())));
  const int64_t outer = product(data, 0, axis);
  const int64_t dim = data[axis];
  const int64_t inner_bytes = product(data, axis + 1, data.size()) * static_cast<int64_t>(dtype_size(spec.input(0).dtype));
  return make_kernel("native:gather", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    const Tensor& indices = inputs[1];
    const int64_t count = indices.numel();
    std::vector<int64_t> resolved(static_cast<size_t>(count));
    for (int64_t j = 0; j < count; ++j) resolved[static_cast<size_t>(j)] = checked_index(index_at(indices, j), dim, "Gather");
    const char* src = static_cast<const char*>(inputs[0].raw_data());
    char* out = static_cast<char*>(dst[0].raw_data());
    parallel_for(0, outer * count, inner_bytes / 4 + 1, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const int64_t o = k / count;
        const int64_t j = k % count;
        std::memcpy(out + k * inner_bytes, src + (o * dim + resolved[static_cast<size_t>(j)]) * inner_bytes,
                    static_cast<size_t>(inner_bytes));
      }
    });
  });
}

KernelOrReason make_gather_elements(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const Shape data = spec.input(0).shape;
  const size_t axis = static_cast<size_t>(normalize_axis(spec.attrs().get_int("axis", 0), static_cast<int64_t>(data.size())));
  const std::vector<int64_t> data_strides = contiguous_strides(data);
  const Shape out = outputs[0].shape;
  const size_t element_size = dtype_size(spec.input(0).dtype);
  return make_kernel("native:gather_elements", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    const char* src = static_cast<const char*>(inputs[0].raw_data());
    char* to = static_cast<char*>(dst[0].raw_data());
    std::vector<int64_t> coordinate(out.size(), 0);
    for (int64_t i = 0; i < dst[0].numel(); ++i) {
      int64_t offset = 0;
      for (size_t d = 0; d < out.size(); ++d) {
        const int64_t c = d == axis ? checked_index(index_at(inputs[1], i), data[d], "GatherElements") : coordinate[d];
        KILN_CHECK(c < data[d], invalid_argument, "GatherElements indices shape exceeds data shape");
        offset += c * data_strides[d];
      }
      std::memcpy(to + i * element_size, src + offset * static_cast<int64_t>(element_size), element_size);
      for (size_t d = out.size(); d-- > 0;) {
        if (++coordinate[d] < out[d]) break;
        coordinate[d] = 0;
      }
    }
  });
}

KernelOrReason make_pad(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const PadParams params = pad_params(spec);
  const Shape in = spec.input(0).shape;
  const Shape out = outputs[0].shape;
  const std::vector<int64_t> in_strides = contiguous_strides(in);
  const size_t rank = in.size();
  const size_t element_size = dtype_size(spec.input(0).dtype);
  const int opset = static_cast<int>(spec.opset);
  const float value_attribute = spec.attrs().get_float("value", 0.0f);
  const DType dtype = spec.input(0).dtype;
  return make_kernel("native:pad", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    // The fill value, as bytes of the element type.
    Tensor fill = Tensor::zeros(dtype, {});
    if (opset >= 11 && inputs.size() > 2 && inputs[2].defined()) {
      std::memcpy(fill.raw_data(), inputs[2].raw_data(), element_size);
    } else if (opset < 11 && value_attribute != 0.0f) {
      KILN_CHECK(dtype == DType::f32, not_implemented, "Pad value attribute on non-float32 data");
      fill.data<float>()[0] = value_attribute;
    }
    const char* src = static_cast<const char*>(inputs[0].raw_data());
    char* to = static_cast<char*>(dst[0].raw_data());
    std::vector<int64_t> coordinate(rank, 0);
    for (int64_t i = 0; i < dst[0].numel(); ++i) {
      int64_t offset = 0;
      bool inside = true;
      for (size_t d = 0; d < rank; ++d) {
        int64_t c = coordinate[d] - params.pads[d];
        if (c < 0 || c >= in[d]) {
          if (params.mode == "constant") {
            inside = false;
            break;
          }
          if (params.mode == "edge") {
            c = c < 0 ? 0 : in[d] - 1;
          } else {  // reflect, pads < dim (checked at plan time)
            c = c < 0 ? -c : 2 * (in[d] - 1) - c;
          }
        }
        offset += c * in_strides[d];
      }
      std::memcpy(to + i * static_cast<int64_t>(element_size),
                  inside ? src + offset * static_cast<int64_t>(element_size) : static_cast<const char*>(fill.raw_data()),
                  element_size);
      for (size_t d = rank; d-- > 0;) {
        if (++coordinate[d] < out[d]) break;
        coordinate[d] = 0;
      }
    }
  });
}

constexpr KernelEntry kKernels[] = {
    {"Concat", make_concat},
    {"Split", make_split},
    {"Slice", make_slice},
    {"Transpose", make_transpose},
    {"Gather", make_gather},
    {"GatherElements", make_gather_elements},
    {"Tile", make_tile},
    {"Pad", make_pad},
};

}  // namespace

std::span<const KernelEntry> data_movement_kernels() { return kKernels; }

}  // namespace kiln::native
