// oneDNN ConvTranspose (its deconvolution primitive: 2-D, float32, any group count), activations
// channels-last like its Conv, weights reordered once at plan time. The native kernel takes what
// this one refuses (other ranks, negative pads, output_padding beyond the end pads).
#include "backends/onednn/onednn_common.h"
#include "ops/conv.h"

namespace kiln::onednn {
namespace {

using dnnl::memory;

class ConvTransposeKernel final : public PrimitiveKernel {
 public:
  ConvTransposeKernel(const KernelRequest& request, const ConvTransposeParams& p, const Shape& output_shape) {
    const OpSpec& spec = request.op;
    const Tensor& weights = spec.input(1).value;
    const int64_t group = p.group;
    const int64_t in_per_group = p.in_channels / group;
    const int64_t out_per_group = p.out_channels / group;
    // oneDNN's dims are (g, O, I, kh, kw); ONNX stores W as [I, O / g, kh, kw], which is (g)iohw.
    const Shape weight_dims = group == 1
                                  ? Shape{p.out_channels, p.in_channels, p.kernel[0], p.kernel[1]}
                                  : Shape{group, out_per_group, in_per_group, p.kernel[0], p.kernel[1]};
    const memory::desc src_desc = value_desc(spec.input(0).shape, Layout::nhwc);
    const memory::desc dst_desc = value_desc(output_shape, Layout::nhwc);
    const memory::desc any_weights(weight_dims, memory::data_type::f32, memory::format_tag::any);
    const memory::desc bias_desc = p.has_bias ? plain_desc({p.out_channels}) : memory::desc();
    memory::dims dilations;
    memory::dims pads_end;
    for (size_t d = 0; d < 2; ++d) {
      dilations.push_back(p.dilations[d] - 1);  // oneDNN counts the gaps
      pads_end.push_back(p.pads_end[d] - p.output_padding[d]);
    }
    const dnnl::deconvolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, src_desc, any_weights,
        bias_desc, dst_desc, p.strides, dilations, p.pads_begin, pads_end);
    dnnl::deconvolution_forward::primitive_desc pd(desc, primitive_attributes(), engine());
    name_ = "onednn:" + implementation_name(pd);
    primitive_ = Primitive(pd);
    const memory::desc user_weights(weight_dims, memory::data_type::f32,
                                    group == 1 ? memory::format_tag::iohw : memory::format_tag::giohw);
    constant_args_[DNNL_ARG_WEIGHTS] = prepack(user_weights, weights, pd.weights_desc());
    mark_copied(1);
    if (p.has_bias) {
      constant_args_[DNNL_ARG_BIAS] = reorder_constant(bias_desc, spec.input(2).value, bias_desc);
      mark_copied(2);
    }
    input_layouts_ = {Layout::nhwc, Layout::plain, Layout::plain};
    output_layouts_ = {Layout::nhwc};
    bind_input(DNNL_ARG_SRC, 0, src_desc);
    bind_output(DNNL_ARG_DST, 0, dst_desc);
  }
};

KernelOrReason make_conv_transpose(const KernelRequest& request, std::span<const TensorInfo> outputs) {
  const OpSpec& spec = request.op;
  if (spec.input(0).dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                    "oneDNN ConvTranspose here runs float32 only");
  if (spec.input(0).shape.size() != 4)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                    "oneDNN ConvTranspose here runs 2-D deconvolutions only");
  if (!spec.input(1).is_constant())
    return KernelOrReason::rejected(RefusalKind::not_constant, "weights are not a plan-time constant");
  if (spec.has_input(2) && !spec.input(2).is_constant())
    return KernelOrReason::rejected(RefusalKind::not_constant, "bias is not a plan-time constant");
  const ConvTransposeParams params = conv_transpose_params(spec);
  for (size_t d = 0; d < 2; ++d) {
    if (params.pads_begin[d] < 0 || params.pads_end[d] < params.output_padding[d])
      return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                      "the output reaches past the input's patches (negative pads or "
                                      "output_padding beyond the end pads), which oneDNN does not pad");
  }
  return create_primitive_kernel(
      [&] { return std::make_unique<ConvTransposeKernel>(request, params, outputs[0].shape); });
}

constexpr KernelEntry kKernels[] = {{"ConvTranspose", make_conv_transpose}};

}  // namespace

std::span<const KernelEntry> conv_transpose_kernels() {
  return kKernels;
}

}  // namespace kiln::onednn
