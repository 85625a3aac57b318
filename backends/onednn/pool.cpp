// oneDNN pooling (2-D): MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool on float32, and the
// max pools on int8 and uint8 too (a maximum is exact in any type: quantized activations pool without
// leaving int8). They read their input in whatever layout it is stored (channels-last after a oneDNN
// conv) and write the same layout, so pooling between convolutions needs no reorder.
#include "ops/pool.h"

#include "backends/onednn/onednn_common.h"

namespace kiln::onednn {
namespace {

using dnnl::memory;

struct PoolGeometry {
  memory::dims kernel, strides, dilations, pads_begin, pads_end;
};

class PoolKernel final : public PrimitiveKernel {
 public:
  PoolKernel(dnnl::algorithm algorithm, const TensorInfo& input, Layout layout, const Shape& output_shape,
             const PoolGeometry& g) {
    const memory::desc src_desc = value_desc(input.shape, input.dtype, layout);
    const memory::desc dst_desc = value_desc(output_shape, input.dtype, layout);
    const dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, algorithm, src_desc,
                                              dst_desc, g.strides, g.kernel, g.dilations, g.pads_begin,
                                              g.pads_end);
    const dnnl::pooling_v2_forward::primitive_desc pd(desc, primitive_attributes(), engine());
    name_ = "onednn:" + implementation_name(pd);
    primitive_ = Primitive(pd);
    input_layouts_ = {layout};
    output_layouts_ = {layout};
    bind_input(DNNL_ARG_SRC, 0, src_desc);
    bind_output(DNNL_ARG_DST, 0, dst_desc);
  }
};

std::optional<Refusal> check_input(const OpSpec& spec, bool is_max) {
  const DType dtype = spec.input(0).dtype;
  const bool int8 = dtype == DType::u8 || dtype == DType::i8;
  if (dtype != DType::f32 && !(is_max && int8)) {
    return Refusal{{},
                   {},
                   RefusalKind::unsupported_dtype,
                   "oneDNN pooling here runs float32, and max pooling int8 and uint8 too"};
  }
  if (spec.input(0).shape.size() != 4)
    return Refusal{{}, {}, RefusalKind::unsupported_shape, "oneDNN pooling here runs 2-D pooling only"};
  return std::nullopt;
}

KernelOrReason make_window_pool(const KernelRequest& request, std::span<const TensorInfo> outputs,
                                bool is_max) {
  const OpSpec& spec = request.op;
  if (std::optional<Refusal> refusal = check_input(spec, is_max))
    return KernelOrReason::rejected(std::move(*refusal));
  if (is_max && spec.num_outputs > 1)
    return KernelOrReason::rejected(RefusalKind::unsupported_attribute,
                                    "MaxPool's Indices output is not supported");
  const PoolParams params = pool_params(spec);
  const WindowParams& w = params.window;
  PoolGeometry g{w.kernel, w.strides, {}, w.pads_begin, w.pads_end};
  bool padded_for_ceil = false;
  for (size_t d = 0; d < w.kernel.size(); ++d) {
    g.dilations.push_back(w.dilations[d] - 1);
    // oneDNN sizes outputs by rounding down; ceil_mode's extra output row becomes end padding.
    const int64_t extent = (w.kernel[d] - 1) * w.dilations[d] + 1;
    const int64_t needed =
        (w.output[d] - 1) * w.strides[d] + extent - params.input_spatial[d] - w.pads_begin[d];
    if (needed > g.pads_end[d]) {
      g.pads_end[d] = needed;
      padded_for_ceil = true;
    }
  }
  dnnl::algorithm algorithm = dnnl::algorithm::pooling_max;
  if (!is_max) {
    if (params.count_include_pad && padded_for_ceil) {
      return KernelOrReason::rejected(
          RefusalKind::unsupported_attribute,
          "AveragePool with count_include_pad and ceil_mode windows past the padding");
    }
    algorithm = params.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                         : dnnl::algorithm::pooling_avg_exclude_padding;
  }
  return create_primitive_kernel([&] {
    return std::make_unique<PoolKernel>(algorithm, spec.input(0), request.input_layout(0), outputs[0].shape,
                                        g);
  });
}

KernelOrReason make_global_pool(const KernelRequest& request, std::span<const TensorInfo> outputs,
                                dnnl::algorithm algorithm) {
  const OpSpec& spec = request.op;
  if (std::optional<Refusal> refusal = check_input(spec, algorithm == dnnl::algorithm::pooling_max))
    return KernelOrReason::rejected(std::move(*refusal));
  const Shape& shape = spec.input(0).shape;
  const PoolGeometry g{{shape[2], shape[3]}, {1, 1}, {0, 0}, {0, 0}, {0, 0}};
  return create_primitive_kernel([&] {
    return std::make_unique<PoolKernel>(algorithm, spec.input(0), request.input_layout(0), outputs[0].shape,
                                        g);
  });
}

constexpr KernelEntry kPoolKernels[] = {
    {"MaxPool", [](const KernelRequest& request,
                   std::span<const TensorInfo> outputs) { return make_window_pool(request, outputs, true); }},
    {"AveragePool",
     [](const KernelRequest& request, std::span<const TensorInfo> outputs) {
       return make_window_pool(request, outputs, false);
     }},
    {"GlobalAveragePool",
     [](const KernelRequest& request, std::span<const TensorInfo> outputs) {
       return make_global_pool(request, outputs, dnnl::algorithm::pooling_avg_exclude_padding);
     }},
    {"GlobalMaxPool",
     [](const KernelRequest& request, std::span<const TensorInfo> outputs) {
       return make_global_pool(request, outputs, dnnl::algorithm::pooling_max);
     }},
};

}  // namespace

std::span<const KernelEntry> pool_kernels() {
  return kPoolKernels;
}

}  // namespace kiln::onednn
