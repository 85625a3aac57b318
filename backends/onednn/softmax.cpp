// oneDNN Softmax / LogSoftmax: float32 also under reduced precision (a bf16 input is converted
// before it), any axis; before opset 13 over the input coerced to 2-D.
#include "backends/onednn/onednn_common.h"

namespace kiln::onednn {
namespace {

using dnnl::memory;

class SoftmaxKernel final : public PrimitiveKernel {
 public:
  SoftmaxKernel(dnnl::algorithm algorithm, const memory::desc& desc, int axis, Layout layout) {
    const dnnl::softmax_v2_forward::desc softmax(dnnl::prop_kind::forward_inference, algorithm, desc, desc,
                                                 axis);
    const dnnl::softmax_v2_forward::primitive_desc pd(softmax, primitive_attributes(), engine());
    name_ = "onednn:" + implementation_name(pd);
    primitive_ = Primitive(pd);
    input_layouts_ = {layout};
    output_layouts_ = {layout};
    bind_input(DNNL_ARG_SRC, 0, desc);
    bind_output(DNNL_ARG_DST, 0, desc);
  }
};

KernelOrReason make_softmax(const KernelRequest& request, std::span<const TensorInfo>,
                            dnnl::algorithm algorithm) {
  const OpSpec& spec = request.op;
  const TensorInfo& x = spec.input(0);
  if (x.dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "oneDNN Softmax here runs float32 only");
  if (x.shape.empty() || x.shape.size() > 6)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape, "oneDNN Softmax here runs ranks 1 to 6");
  if (checked_numel(x.shape) == 0)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape, "empty input");
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t axis =
      normalize_axis(spec.attrs().get_int("axis", spec.opset < 13 ? 1 : -1), rank, "Softmax axis");
  // Softmax stays float32 under reduced precision: a bf16 input is converted before it.
  const Layout layout = float32_layout(request.input_layout(0));
  memory::desc desc = value_desc(x.shape, layout);
  int softmax_axis = static_cast<int>(axis);
  if (spec.opset < 13) {
    // Before opset 13 the input is coerced to [outer, inner] at `axis` and normalized over inner.
    if (layout != Layout::plain)
      return KernelOrReason::rejected(RefusalKind::unsupported_layout,
                                      "opset < 13 Softmax needs a plain input");
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.shape[static_cast<size_t>(d)];
    desc = plain_desc({outer, checked_numel(x.shape) / outer});
    softmax_axis = 1;
  }
  return create_primitive_kernel(
      [&] { return std::make_unique<SoftmaxKernel>(algorithm, desc, softmax_axis, layout); });
}

constexpr KernelEntry kSoftmaxKernels[] = {
    {"Softmax",
     [](const KernelRequest& request, std::span<const TensorInfo> outputs) {
       return make_softmax(request, outputs, dnnl::algorithm::softmax_accurate);
     }},
    {"LogSoftmax",
     [](const KernelRequest& request, std::span<const TensorInfo> outputs) {
       return make_softmax(request, outputs, dnnl::algorithm::softmax_log);
     }},
};

}  // namespace

std::span<const KernelEntry> softmax_kernels() {
  return kSoftmaxKernels;
}

}  // namespace kiln::onednn
