// Layout conversions between plain (NCHW) and channels-last (NHWC) float32 and integer values (int8
// and uint8 flowing between quantized convolutions, ConvInteger's int32 accumulators), for plans whose
// channels-last producers and readers run without oneDNN (whose reorders are asked first): the
// Winograd backend reads and writes channels-last, and may run beside the native kernels alone.
// A blocked transpose per image: tiles of kBlock channels x kBlock positions, so both sides are
// read and written in cache lines.
#include <algorithm>
#include <memory>

#include "backends/native/native_backend.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

constexpr int64_t kBlock = 16;

// dst[j, i] = src[i, j] for one image's rows x columns matrix.
template <typename T>
void transpose(const T* src, int64_t rows, int64_t columns, T* dst) {
  for (int64_t i0 = 0; i0 < rows; i0 += kBlock) {
    const int64_t i1 = std::min(rows, i0 + kBlock);
    for (int64_t j0 = 0; j0 < columns; j0 += kBlock) {
      const int64_t j1 = std::min(columns, j0 + kBlock);
      for (int64_t i = i0; i < i1; ++i) {
        for (int64_t j = j0; j < j1; ++j) dst[j * rows + i] = src[i * columns + j];
      }
    }
  }
}

class ReorderKernel final : public Kernel {
 public:
  ReorderKernel(const Shape& shape, DType dtype, Layout from, Layout to)
      : images_(shape[0]),
        channels_(shape[1]),
        positions_(shape[2] * shape[3]),
        one_byte_(dtype_size(dtype) == 1),
        from_(from),
        to_(to) {
    name_ = std::string("native:reorder_") + layout_name(from) + "_to_" + layout_name(to);
  }

  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    if (one_byte_) {
      convert(inputs[0].data<uint8_t>(), outputs[0].data<uint8_t>());
    } else {
      convert(inputs[0].data<uint32_t>(), outputs[0].data<uint32_t>());
    }
  }
  std::string_view name() const override { return name_; }
  Layout input_layout(size_t) const override { return from_; }
  Layout output_layout(size_t) const override { return to_; }

 private:
  template <typename T>
  void convert(const T* src, T* dst) const {
    const int64_t image = channels_ * positions_;
    // Plain to channels-last transposes each image's [C, HW] matrix; the way back its [HW, C].
    const int64_t rows = from_ == Layout::plain ? channels_ : positions_;
    const int64_t columns = from_ == Layout::plain ? positions_ : channels_;
    parallel_for(0, images_, image, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) transpose(src + n * image, rows, columns, dst + n * image);
    });
  }

  int64_t images_, channels_, positions_;
  bool one_byte_;  // uint8 or int8; otherwise 4 bytes (float32, int32), moved as their bits
  Layout from_, to_;
  std::string name_;
};

}  // namespace

KernelOrReason create_reorder_kernel(const KernelRequest& request, std::span<const TensorInfo>) {
  const TensorInfo& value = request.op.input(0);
  if (!request.wants_output_layout(0))
    return KernelOrReason::rejected(RefusalKind::unsupported_layout, "a Reorder needs its target layout");
  const Layout from = request.input_layout(0);
  const Layout to = request.output_layouts[0];
  const bool plain_and_nhwc =
      (from == Layout::plain && to == Layout::nhwc) || (from == Layout::nhwc && to == Layout::plain);
  const bool supported_dtype = value.dtype == DType::f32 || value.dtype == DType::i32 ||
                               value.dtype == DType::u8 || value.dtype == DType::i8;
  if (!plain_and_nhwc || !supported_dtype)
    return KernelOrReason::rejected(
        RefusalKind::unsupported_layout,
        "native converts float32, int32, uint8 and int8 values between plain and nhwc only");
  if (value.shape.size() != 4)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                    "channels-last layouts hold rank-4 values only");
  return {std::make_unique<ReorderKernel>(value.shape, value.dtype, from, to), {}, {}};
}

}  // namespace kiln::native
