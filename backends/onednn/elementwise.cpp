// oneDNN eltwise activations and binary arithmetic (float32). Both read their first input in the
// layout it is stored in and write that layout, so activations between oneDNN ops cost no reorder.
#include "backends/onednn/onednn_common.h"
#include "backends/onednn/post_ops.h"

namespace kiln::onednn {
namespace {

using dnnl::memory;

class EltwiseKernel final : public PrimitiveKernel {
 public:
  EltwiseKernel(const Eltwise& eltwise, const TensorInfo& input, Layout layout) {
    const memory::desc data_desc = value_desc(input.shape, layout);
    const dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, eltwise.algorithm, data_desc,
                                           eltwise.alpha, eltwise.beta);
    const dnnl::eltwise_forward::primitive_desc pd(desc, primitive_attributes(), engine());
    name_ = "onednn:" + implementation_name(pd);
    primitive_ = Primitive(pd);
    input_layouts_ = {layout};
    output_layouts_ = {layout};
    bind_input(DNNL_ARG_SRC, 0, data_desc);
    bind_output(DNNL_ARG_DST, 0, data_desc);
  }
};

KernelOrReason make_activation(const KernelRequest& request, std::span<const TensorInfo>) {
  const OpSpec& spec = request.op;
  const std::optional<PostOp> activation = activation_post_op(spec);
  if (!activation) {
    if (spec.input(0).dtype != DType::f32)
      return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                      "oneDNN eltwise here runs float32 only");
    return KernelOrReason::rejected(RefusalKind::not_constant, "Clip bounds are not plan-time constants");
  }
  const Eltwise eltwise = eltwise_for(*activation);
  return create_primitive_kernel(
      [&] { return std::make_unique<EltwiseKernel>(eltwise, spec.input(0), request.input_layout(0)); });
}

class BinaryKernel final : public PrimitiveKernel {
 public:
  // a is kiln's input a_index (oneDNN's src0, of the output's shape), b the other (src1).
  BinaryKernel(dnnl::algorithm algorithm, const TensorInfo& a, Layout a_layout, size_t a_index,
               const TensorInfo& b) {
    // src1 broadcasts: its dims are right-aligned to src0's rank, missing ones are 1.
    Shape b_dims(a.shape.size() - b.shape.size(), 1);
    b_dims.insert(b_dims.end(), b.shape.begin(), b.shape.end());
    const Layout b_layout = b_dims == a.shape ? a_layout : Layout::plain;
    const memory::desc a_desc = value_desc(a.shape, a_layout);
    const memory::desc b_desc = value_desc(b_dims, b_layout);
    const dnnl::binary::desc desc(algorithm, a_desc, b_desc, a_desc);
    const dnnl::binary::primitive_desc pd(desc, primitive_attributes(), engine());
    name_ = "onednn:" + implementation_name(pd);
    primitive_ = Primitive(pd);
    const size_t b_index = 1 - a_index;
    input_layouts_ = {Layout::plain, Layout::plain};
    input_layouts_[a_index] = a_layout;
    input_layouts_[b_index] = b_layout;
    output_layouts_ = {a_layout};
    bind_input(DNNL_ARG_SRC_0, a_index, a_desc);
    bind_input(DNNL_ARG_SRC_1, b_index, b_desc);
    bind_output(DNNL_ARG_DST, 0, a_desc);
  }
};

KernelOrReason make_binary(const KernelRequest& request, std::span<const TensorInfo> outputs,
                           dnnl::algorithm algorithm) {
  const OpSpec& spec = request.op;
  if (spec.num_inputs() != 2)
    return KernelOrReason::rejected(RefusalKind::unsupported_attribute,
                                    "oneDNN binary takes exactly two inputs");
  if (spec.input(0).dtype != DType::f32 || spec.input(1).dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "oneDNN binary here runs float32 only");
  // oneDNN broadcasts only its second source; Add and Mul are commutative (bitwise, in IEEE
  // arithmetic), so a first input that broadcasts (a squeeze-excitation's scale times the
  // feature map) becomes the second.
  const bool commutative =
      algorithm == dnnl::algorithm::binary_add || algorithm == dnnl::algorithm::binary_mul;
  const size_t a_index = commutative && outputs[0].shape != spec.input(0).shape &&
                                 outputs[0].shape == spec.input(1).shape
                             ? 1
                             : 0;
  const TensorInfo& a = spec.input(a_index);
  const TensorInfo& b = spec.input(1 - a_index);
  if (a.shape.empty() || a.shape.size() > 6)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape, "oneDNN binary here runs ranks 1 to 6");
  if (outputs[0].shape != a.shape || b.shape.size() > a.shape.size()) {
    return KernelOrReason::rejected(
        RefusalKind::unsupported_shape,
        commutative ? "both inputs broadcast (oneDNN broadcasts only one)"
                    : "the second input broadcasts the first (oneDNN broadcasts only the second)");
  }
  return create_primitive_kernel([&] {
    return std::make_unique<BinaryKernel>(algorithm, a, request.input_layout(a_index), a_index, b);
  });
}

template <dnnl::algorithm kAlgorithm>
KernelOrReason make_binary_for(const KernelRequest& request, std::span<const TensorInfo> outputs) {
  return make_binary(request, outputs, kAlgorithm);
}

constexpr KernelEntry kElementwiseKernels[] = {
    {"Relu", make_activation},
    {"LeakyRelu", make_activation},
    {"Clip", make_activation},
    {"Sigmoid", make_activation},
    {"Tanh", make_activation},
    {"Add", make_binary_for<dnnl::algorithm::binary_add>},
    {"Sub", make_binary_for<dnnl::algorithm::binary_sub>},
    {"Mul", make_binary_for<dnnl::algorithm::binary_mul>},
    {"Div", make_binary_for<dnnl::algorithm::binary_div>},
};

}  // namespace

std::span<const KernelEntry> elementwise_kernels() {
  return kElementwiseKernels;
}

}  // namespace kiln::onednn
