// Layout conversions the planner inserts between a channels-last producer and a plain reader (and
// back), for float32 and integer values (quantized activations, ConvInteger's int32 accumulators), and
// between bfloat16 and float32 storage. When a value has one spatial position or one channel, both layouts
// order its elements the same way and the "reorder" is a free view with the other stored shape.
#include "backends/onednn/onednn_common.h"

namespace kiln::onednn {
namespace {

using dnnl::memory;

class ReorderKernel final : public PrimitiveKernel {
 public:
  ReorderKernel(const Shape& shape, DType dtype, Layout from, Layout to) {
    apply_thread_count();
    const memory::desc from_desc = value_desc(shape, dtype, from);
    const memory::desc to_desc = value_desc(shape, dtype, to);
    primitive_ = Primitive(
        dnnl::reorder::primitive_desc(engine(), from_desc, engine(), to_desc, primitive_attributes()));
    name_ = std::string("onednn:reorder_") + layout_name(from) + "_to_" + layout_name(to);
    input_layouts_ = {from};
    output_layouts_ = {to};
    bind_input(DNNL_ARG_FROM, 0, from_desc);
    bind_output(DNNL_ARG_TO, 0, to_desc);
  }
};

class ReinterpretKernel final : public Kernel {
 public:
  ReinterpretKernel(const Shape& shape, Layout from, Layout to)
      : to_shape_(stored_shape(shape, to)), from_(from), to_(to) {}

  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    outputs[0] = inputs[0].reshaped(to_shape_);
  }
  std::string_view name() const override { return "onednn:reorder_free_view"; }
  bool is_view() const override { return true; }
  Layout input_layout(size_t) const override { return from_; }
  Layout output_layout(size_t) const override { return to_; }

 private:
  Shape to_shape_;
  Layout from_;
  Layout to_;
};

KernelOrReason make_reorder(const KernelRequest& request, std::span<const TensorInfo>) {
  const TensorInfo& value = request.op.input(0);
  const Layout from = request.input_layout(0);
  if (!request.wants_output_layout(0))
    return KernelOrReason::rejected(RefusalKind::unsupported_layout, "a Reorder needs its target layout");
  const Layout to = request.output_layouts[0];
  const bool integer = value.dtype == DType::u8 || value.dtype == DType::i8 || value.dtype == DType::i32;
  if (value.dtype != DType::f32 && !(integer && !is_bf16(from) && !is_bf16(to)))
    return KernelOrReason::rejected(
        RefusalKind::unsupported_dtype,
        "layouts convert float32, int32, uint8 and int8 values only (integers not to bfloat16)");
  if ((is_channels_last(from) || is_channels_last(to)) && value.shape.size() != 4)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                    "channels-last layouts hold rank-4 values only");
  const Shape& shape = value.shape;
  return create_primitive_kernel([&]() -> std::unique_ptr<Kernel> {
    // A free view only between layouts of one dtype that order this value's elements alike.
    const bool same_order =
        is_bf16(from) == is_bf16(to) && shape.size() == 4 && (shape[1] == 1 || shape[2] * shape[3] == 1);
    if (same_order) return std::make_unique<ReinterpretKernel>(shape, from, to);
    return std::make_unique<ReorderKernel>(shape, value.dtype, from, to);
  });
}

constexpr KernelEntry kReorderKernels[] = {{"Reorder", make_reorder}};

}  // namespace

std::span<const KernelEntry> reorder_kernels() {
  return kReorderKernels;
}

}  // namespace kiln::onednn
