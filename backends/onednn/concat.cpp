// oneDNN Concat of bfloat16-stored values (nhwc_bf16, plain_bf16) in the first input's layout;
// values stored as float32 are left to native's copies (see make_concat).
#include "backends/onednn/onednn_common.h"

namespace kiln::onednn {
namespace {

using dnnl::memory;

class ConcatKernel final : public PrimitiveKernel {
 public:
  ConcatKernel(const KernelRequest& request, int axis, const Shape& output_shape) {
    const OpSpec& spec = request.op;
    const Layout layout = request.input_layout(0);
    std::vector<memory::desc> sources;
    for (const TensorInfo& input : spec.inputs) sources.push_back(value_desc(input.shape, layout));
    const memory::desc dst_desc = value_desc(output_shape, layout);
    const dnnl::concat::primitive_desc pd(dst_desc, axis, sources, engine(), primitive_attributes());
    name_ = "onednn:" + implementation_name(pd);
    primitive_ = Primitive(pd);
    input_layouts_.assign(spec.inputs.size(), layout);
    output_layouts_ = {layout};
    for (size_t i = 0; i < sources.size(); ++i)
      bind_input(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), i, sources[i]);
    bind_output(DNNL_ARG_DST, 0, dst_desc);
  }
};

KernelOrReason make_concat(const KernelRequest& request, std::span<const TensorInfo> outputs) {
  const OpSpec& spec = request.op;
  const Shape& shape = outputs[0].shape;
  if (shape.empty() || shape.size() > 6)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape, "oneDNN Concat here runs ranks 1 to 6");
  for (const TensorInfo& input : spec.inputs) {
    if (input.dtype != DType::f32)
      return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "oneDNN Concat here runs float32 only");
    if (checked_numel(input.shape) == 0)
      return KernelOrReason::rejected(RefusalKind::unsupported_shape, "an input is empty");
  }
  // Values stored as float32 are left to native's copies of contiguous runs, in every layout: oneDNN
  // 2.6's simple concat took 0.24 ms for squeezenet1_1's eight channels-last Concats at 1 thread and
  // 0.38 ms at 2 (native 0.14 and 0.30), and 0.15-0.73 ms for plain joins along an outer axis that
  // native copies in 0.004-0.031 ms (docs/performance.md, "Data movement"). A preference that leaves
  // native out (prefer_other onednn) therefore cannot plan them: the error gives this reason.
  if (!is_bf16(request.input_layout(0)))
    return KernelOrReason::rejected(
        RefusalKind::unsupported_layout,
        "float32 Concat runs on native (copies of contiguous runs, measured faster)");
  const int axis =
      static_cast<int>(normalize_axis(spec.attrs().require_int("axis"), static_cast<int64_t>(shape.size())));
  return create_primitive_kernel([&] { return std::make_unique<ConcatKernel>(request, axis, shape); });
}

constexpr KernelEntry kConcatKernels[] = {{"Concat", make_concat}};

}  // namespace

std::span<const KernelEntry> concat_kernels() {
  return kConcatKernels;
}

}  // namespace kiln::onednn
