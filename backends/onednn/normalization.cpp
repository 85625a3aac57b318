// oneDNN LayerNormalization over the last axis, with constant scale and bias copied at plan time.
#include "backends/onednn/onednn_common.h"

namespace kiln::onednn {
namespace {

using dnnl::memory;

class LayerNormKernel final : public PrimitiveKernel {
 public:
  LayerNormKernel(const OpSpec& spec, float epsilon) {
    const TensorInfo& x = spec.input(0);
    const memory::desc data = plain_desc(x.shape);
    const int64_t channels = x.shape.back();
    const bool has_bias = spec.has_input(2);
    auto flags = dnnl::normalization_flags::use_scale;
    if (has_bias) flags = flags | dnnl::normalization_flags::use_shift;
    const dnnl::layer_normalization_forward::desc desc(dnnl::prop_kind::forward_inference, data, epsilon,
                                                       flags);
    const dnnl::layer_normalization_forward::primitive_desc pd(desc, primitive_attributes(), engine());
    name_ = "onednn:" + implementation_name(pd);
    primitive_ = Primitive(pd);
    const memory::desc per_channel = plain_desc({channels});
    constant_args_[DNNL_ARG_SCALE] =
        reorder_constant(per_channel, spec.input(1).value.reshaped({channels}), per_channel);
    mark_copied(1);
    if (has_bias) {
      constant_args_[DNNL_ARG_SHIFT] =
          reorder_constant(per_channel, spec.input(2).value.reshaped({channels}), per_channel);
      mark_copied(2);
    }
    bind_input(DNNL_ARG_SRC, 0, data);
    bind_output(DNNL_ARG_DST, 0, data);
  }
};

KernelOrReason make_layer_norm(const KernelRequest& request, std::span<const TensorInfo>) {
  const OpSpec& spec = request.op;
  const TensorInfo& x = spec.input(0);
  if (x.dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                    "oneDNN LayerNormalization here runs float32 only");
  if (x.shape.empty() || x.shape.size() > 5)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                    "oneDNN LayerNormalization runs ranks 1 to 5");
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (normalize_axis(spec.attrs().get_int("axis", -1), rank, "LayerNormalization axis") != rank - 1) {
    return KernelOrReason::rejected(RefusalKind::unsupported_attribute,
                                    "oneDNN normalizes over the last axis only");
  }
  if (spec.num_outputs > 1)
    return KernelOrReason::rejected(RefusalKind::unsupported_attribute,
                                    "the Mean and InvStdDev outputs are not supported");
  for (int index : {1, 2}) {
    if (index == 2 && !spec.has_input(2)) continue;
    const TensorInfo& parameter = spec.input(index);
    if (!parameter.is_constant() || parameter.dtype != DType::f32 ||
        checked_numel(parameter.shape) != x.shape.back()) {
      return KernelOrReason::rejected(
          RefusalKind::not_constant, "scale and bias must be float32 plan-time constants over the last axis");
    }
  }
  if (checked_numel(x.shape) == 0)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape, "empty input");
  const float epsilon = spec.attrs().get_float("epsilon", 1e-5f);
  return create_primitive_kernel([&] { return std::make_unique<LayerNormKernel>(spec, epsilon); });
}

constexpr KernelEntry kNormalizationKernels[] = {
    {"LayerNormalization", make_layer_norm},
};

}  // namespace

std::span<const KernelEntry> normalization_kernels() {
  return kNormalizationKernels;
}

}  // namespace kiln::onednn
