// oneDNN Conv (2-D, float32 or bf16 precision, any group count): activations channels-last, weights reordered
// once at plan time into the layout the chosen implementation wants, bias and fused post-ops (eltwise
// activations and a residual sum) applied inside the primitive.
#include "ops/conv.h"

#include <algorithm>
#include <optional>

#include "backends/native/grouped_conv.h"
#include "backends/onednn/onednn_common.h"
#include "backends/onednn/post_ops.h"

namespace kiln::onednn {
namespace {

using dnnl::memory;

// A dilated kernel wider than the input (DeepLab's atrous convolutions: dilation 24 or 36 on a 14x14
// feature map) has taps that read only padding for every output. Cropping the kernel to the taps
// that reach the input computes the same sums with fewer multiplies, and oneDNN then sees a small
// kernel (1x1 when only the centre is left) instead of running its dilated GEMM over zeros.
// Returns the cropped window, or nothing when every tap is live (or cropping would need negative pads).
std::optional<WindowParams> cropped_window(const std::vector<int64_t>& input_spatial,
                                           const WindowParams& window) {
  const size_t rank = window.kernel.size();
  WindowParams result = window;
  bool cropped = false;
  for (size_t d = 0; d < rank; ++d) {
    auto live = [&](int64_t k) {
      for (int64_t o = 0; o < window.output[d]; ++o) {
        const int64_t at = o * window.strides[d] - window.pads_begin[d] + k * window.dilations[d];
        if (at >= 0 && at < input_spatial[d]) return true;
      }
      return false;
    };
    int64_t first = 0;
    int64_t last = window.kernel[d] - 1;
    while (first < last && !live(first)) ++first;
    while (last > first && !live(last)) --last;
    cropped = cropped || first > 0 || last < window.kernel[d] - 1;
    result.kernel[d] = last - first + 1;
    result.pads_begin[d] = window.pads_begin[d] - first * window.dilations[d];
    const int64_t extent = (result.kernel[d] - 1) * window.dilations[d] + 1;
    result.pads_end[d] =
        (window.output[d] - 1) * window.strides[d] + extent - input_spatial[d] - result.pads_begin[d];
    if (result.pads_begin[d] < 0 || result.pads_end[d] < 0) return std::nullopt;
  }
  if (!cropped) return std::nullopt;
  return result;
}

// The taps of [O, I, kh, kw] weights that `cropped` (cropped_window of `window`) keeps (2-D only here).
Tensor crop_weights(const Tensor& weights, const WindowParams& window, const WindowParams& cropped) {
  const int64_t first_h = (window.pads_begin[0] - cropped.pads_begin[0]) / window.dilations[0];
  const int64_t first_w = (window.pads_begin[1] - cropped.pads_begin[1]) / window.dilations[1];
  const Shape& full = weights.shape();
  Tensor kept = Tensor::empty(DType::f32, {full[0], full[1], cropped.kernel[0], cropped.kernel[1]});
  const float* src = weights.data<float>();
  float* dst = kept.data<float>();
  for (int64_t plane = 0; plane < full[0] * full[1]; ++plane) {
    for (int64_t h = 0; h < cropped.kernel[0]; ++h) {
      for (int64_t w = 0; w < cropped.kernel[1]; ++w)
        *dst++ = src[(plane * full[2] + first_h + h) * full[3] + first_w + w];
    }
  }
  return kept;
}

class ConvKernel final : public PrimitiveKernel {
 public:
  ConvKernel(const KernelRequest& request, ConvParams params, const Shape& output_shape) {
    const OpSpec& spec = request.op;
    const Shape& x_shape = spec.input(0).shape;
    const std::optional<WindowParams> cropped = cropped_window(params.input_spatial, params.window);
    const Tensor weights =
        cropped ? crop_weights(spec.input(1).value, params.window, *cropped) : spec.input(1).value;
    if (cropped) params.window = *cropped;
    const int64_t group = params.group;
    const Shape weight_dims = group == 1 ? weights.shape()
                                         : Shape{group, params.out_channels / group, weights.dim(1),
                                                 weights.dim(2), weights.dim(3)};
    // Reduced precision: bf16 activations and weights, float32 accumulation and bias.
    const bool bf16 = request.precision == Precision::bf16;
    const Layout layout = bf16 ? Layout::nhwc_bf16 : Layout::nhwc;
    const memory::desc src_desc = value_desc(x_shape, layout);
    const memory::desc dst_desc = value_desc(output_shape, layout);
    const memory::desc any_weights(weight_dims, bf16 ? memory::data_type::bf16 : memory::data_type::f32,
                                   memory::format_tag::any);
    const memory::desc bias_desc = params.has_bias ? plain_desc({params.out_channels}) : memory::desc();

    const WindowParams& w = params.window;
    memory::dims dilations;
    for (int64_t d : w.dilations) dilations.push_back(d - 1);  // oneDNN counts the gaps
    const dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_desc, any_weights,
        bias_desc, dst_desc, w.strides, dilations, w.pads_begin, w.pads_end);
    dnnl::primitive_attr attr = make_attr(request.post_ops);
    dnnl::convolution_forward::primitive_desc pd(desc, attr, engine());
    select_alternative(pd, request.alternative);
    name_ = "onednn:" + implementation_name(pd) + (bf16 ? ":bf16" : "") + post_ops_suffix(request.post_ops) +
            alternative_suffix(request.alternative);
    primitive_ = Primitive(pd);

    // Weights: ONNX's (g)oihw, reordered once into the implementation's blocked layout.
    const memory::desc user_weights(weight_dims, memory::data_type::f32,
                                    group == 1 ? memory::format_tag::oihw : memory::format_tag::goihw);
    constant_args_[DNNL_ARG_WEIGHTS] = prepack(user_weights, weights, pd.weights_desc());
    mark_copied(1);
    if (params.has_bias) {
      constant_args_[DNNL_ARG_BIAS] = reorder_constant(bias_desc, spec.input(2).value, bias_desc);
      mark_copied(2);
    }

    input_layouts_ = {layout, Layout::plain, Layout::plain};
    residual_input_ = sum_input(request.post_ops);
    if (residual_input_ >= 0) {
      input_layouts_.resize(static_cast<size_t>(residual_input_) + 1, Layout::plain);
      input_layouts_[static_cast<size_t>(residual_input_)] = layout;
    }
    output_layouts_ = {layout};
    bind_input(DNNL_ARG_SRC, 0, src_desc);
    bind_output(DNNL_ARG_DST, 0, dst_desc);
  }

  void prepare_outputs(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    if (residual_input_ >= 0) copy_residual(inputs[static_cast<size_t>(residual_input_)], outputs[0]);
  }

  int in_place_input() const override { return residual_input_; }

 private:
  int residual_input_ = -1;
};

KernelOrReason make_conv(const KernelRequest& request, std::span<const TensorInfo> outputs) {
  const OpSpec& spec = request.op;
  if (spec.input(0).dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "oneDNN Conv here runs float32 only");
  if (spec.input(0).shape.size() != 4)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                    "oneDNN Conv here runs 2-D convolutions only");
  if (!spec.input(1).is_constant())
    return KernelOrReason::rejected(RefusalKind::not_constant, "weights are not a plan-time constant");
  if (spec.has_input(2) && !spec.input(2).is_constant()) {
    return KernelOrReason::rejected(RefusalKind::not_constant, "bias is not a plan-time constant");
  }
  // Conv's own inputs are X, W, B; a fused residual follows them and is not Conv's to check.
  OpSpec conv_spec = spec;
  conv_spec.inputs.resize(std::min<size_t>(conv_spec.inputs.size(), 3));
  const ConvParams params = conv_params(conv_spec);
  const std::optional<WindowParams> cropped = cropped_window(params.input_spatial, params.window);
  const std::vector<int64_t>& kernel = cropped ? cropped->kernel : params.window.kernel;
  // Even cropped, a kernel whose taps mostly land in the padding (DeepLab's dilation 12 on 14x14)
  // is left to native's per-tap products over the live positions: oneDNN would multiply the zeros.
  const double live_share = live_tap_share(params.input_spatial, params.window) *
                            static_cast<double>(checked_numel(params.window.kernel)) /
                            static_cast<double>(checked_numel(kernel));
  if (request.native_follows && request.precision == Precision::fp32 && params.group == 1 &&
      live_share <= kMostlyPaddingShare) {
    return KernelOrReason::rejected(
        RefusalKind::predicted_slower,
        str_cat("taps land inside the input for ", static_cast<int>(live_share * 100 + 0.5),
                "% of the kernel's multiply-adds (at most ", static_cast<int>(kMostlyPaddingShare * 100),
                "%: native's per-tap products skip the padding)"));
  }
  // oneDNN 2.6 runs grouped 3x3 convolutions of four and eight channels per group (ResNeXt's first
  // stages) on its older jit kernel far below the peak; native's channels-last grouped kernel takes
  // the ones it can run (docs/backends.md). Autotune, timing both, gets oneDNN's too.
  if (request.native_follows && !request.timed && !native::grouped_conv_refusal(request)) {
    return KernelOrReason::rejected(
        RefusalKind::predicted_slower,
        str_cat("grouped 3x3 convolution with ", params.in_channels / params.group,
                " channels per group: oneDNN 2.6's jit kernel measured slower than native's channels-last "
                "grouped kernel"));
  }
  KernelOrReason offer = create_reduced_precision_kernel(request, [&](const KernelRequest& chosen) {
    return std::make_unique<ConvKernel>(chosen, params, outputs[0].shape);
  });
  if (offer.kernel && cropped) {
    const std::string note = str_cat("kernel cropped from ", shape_to_string(params.window.kernel), " to ",
                                     shape_to_string(cropped->kernel),
                                     ": the other taps read only padding (FLOP counts keep the full kernel)");
    offer.note = offer.note.empty() ? note : offer.note + "; " + note;
  }
  return offer;
}

constexpr KernelEntry kConvKernels[] = {{"Conv", make_conv}};

}  // namespace

std::span<const KernelEntry> conv_kernels() {
  return kConvKernels;
}

}  // namespace kiln::onednn
