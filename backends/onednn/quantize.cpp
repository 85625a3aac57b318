// oneDNN QLinearConv and ConvInteger (2-D), QLinearMatMul and MatMulInteger (constant 2-D B), only
// where oneDNN's int8 arithmetic is exact: on the avx512_bf16 tier and above, whose VNNI (vpdpbusd)
// sums u8 x s8 products into int32 without saturating. Below it oneDNN's int8 convolutions use vpmaddubsw,
// whose 16-bit pair sums saturate, and halve the weights to avoid that: kiln leaves those CPUs to native's
// exact kernels.
//
// oneDNN's int8 convolutions read and write channels-last, and so do the conv kernels: a quantized
// value flows from one convolution to the next (and through channels-last elementwise steps) with
// no conversion, and the planner's Reorders convert it only where a plain reader or the graph's
// edge needs it. Weights must be int8 with zero point 0 (oneDNN convolutions take no weight zero
// point); x's and y's zero points are run-time arguments (left out when they are constant zeros, which
// spares oneDNN's compensation), the per-channel multipliers x_scale * w_scale / y_scale are baked in.
// oneDNN requantizes in float32 step by step as ops/quantize_math.h does (the accumulator and the bias
// summed, scaled, the zero point added, rounded half to even), so its outputs equal native's bit for bit.
#include "backends/onednn/onednn_common.h"
#include "ops/quantize.h"
#include "ops/quantize_math.h"
#include "runtime/cpu_info.h"

namespace kiln::onednn {
namespace {

using dnnl::memory;

memory::dims dims_of(const Shape& shape) { return memory::dims(shape.begin(), shape.end()); }

// An absent zero point is 0.
int32_t zero_point_value(std::span<const Tensor> inputs, int input) {
  if (input < 0 || input >= static_cast<int>(inputs.size()) || !inputs[input].defined()) return 0;
  const Tensor& value = inputs[input];
  return value.dtype() == DType::u8 ? value.data<uint8_t>()[0] : value.data<int8_t>()[0];
}

// A zero point that is a plan-time constant 0 (or absent): oneDNN then needs no zero-point argument.
bool constant_zero(const OpSpec& spec, int input) {
  if (input < 0 || !spec.has_input(input)) return true;
  const TensorInfo& value = spec.input(input);
  return value.is_constant() && value.value.numel() == 1 && value.value.int_at(0) == 0;
}

// What the convolution and the matmul share: the zero points of x and y (run-time arguments where
// they are not constant zeros) and, for the requantizing ops, the multipliers x_scale * w_scale /
// y_scale, one per output channel (column) or one for all, baked into the primitive.
struct Requantization {
  IntegerOperands at;
  bool x_zero_point, y_zero_point;  // passed at run time

  explicit Requantization(const OpSpec& spec)
      : at(integer_operands(spec)),
        x_zero_point(!constant_zero(spec, at.x_zero_point)),
        y_zero_point(at.requantized() && !constant_zero(spec, at.y_zero_point)) {}

  dnnl::primitive_attr attributes(const OpSpec& spec) const {
    dnnl::primitive_attr attr = primitive_attributes();
    if (x_zero_point) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    if (!at.requantized()) return attr;
    const Tensor& w_scale = spec.input(at.w_scale).value;
    const float x_scale = spec.input(at.x_scale).value.data<float>()[0];
    const float y_scale = spec.input(at.y_scale).value.data<float>()[0];
    std::vector<float> multipliers;
    for (int64_t m = 0; m < w_scale.numel(); ++m)
      multipliers.push_back(requantize_multiplier(x_scale, w_scale.data<float>()[m], y_scale));
    attr.set_output_scales(multipliers.size() == 1 ? 0 : 1 << 1, multipliers);
    if (y_zero_point) attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
    return attr;
  }

  // Runs `primitive` on `args` and the run's zero points.
  void execute(const Primitive& primitive, std::unordered_map<int, memory> args,
               std::span<const Tensor> inputs) const {
    int32_t x_value = zero_point_value(inputs, at.x_zero_point);
    int32_t y_value = zero_point_value(inputs, at.y_zero_point);
    const memory::desc scalar({1}, memory::data_type::s32, memory::format_tag::x);
    if (x_zero_point) args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = memory(scalar, engine(), &x_value);
    if (y_zero_point) args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST] = memory(scalar, engine(), &y_value);
    primitive.execute(std::move(args));
  }
};

class IntegerConvKernel final : public Kernel {
 public:
  IntegerConvKernel(const OpSpec& spec, const ConvParams& p, const Shape& output_shape, DType output)
      : requantization_(spec) {
    const IntegerOperands& at = requantization_.at;
    const Shape& x_shape = spec.input(at.x).shape;
    // Unrequantized (ConvInteger), the output is the int32 accumulators.
    src_ = value_desc(x_shape, spec.input(at.x).dtype, Layout::nhwc);
    dst_ = value_desc(output_shape, at.requantized() ? output : DType::i32, Layout::nhwc);
    const Tensor& weights = spec.input(at.w).value;
    const int64_t group = p.group;
    const memory::dims weight_dims =
        group == 1 ? dims_of(weights.shape())
                   : memory::dims{group, p.out_channels / group, weights.dim(1), weights.dim(2), weights.dim(3)};
    const memory::desc any_weights(weight_dims, memory::data_type::s8, memory::format_tag::any);
    const memory::desc bias_desc =
        p.has_bias ? memory::desc({p.out_channels}, memory::data_type::s32, memory::format_tag::x) : memory::desc();
    memory::dims dilations;
    for (int64_t d : p.window.dilations) dilations.push_back(d - 1);  // oneDNN counts the gaps
    const dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_, any_weights, bias_desc,
        dst_, p.window.strides, dilations, p.window.pads_begin, p.window.pads_end);
    const dnnl::convolution_forward::primitive_desc pd(desc, requantization_.attributes(spec), engine());
    convolution_ = Primitive(pd);
    name_ = "onednn:" + implementation_name(pd) + ":int8";
    const memory::desc user_weights(weight_dims, memory::data_type::s8,
                                    group == 1 ? memory::format_tag::oihw : memory::format_tag::goihw);
    weights_ = shared_reorder_constant(user_weights, weights, pd.weights_desc());
    if (p.has_bias) bias_ = reorder_constant(bias_desc, spec.input(at.bias).value, bias_desc);
  }

  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    apply_thread_count();
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wrap(src_, inputs[requantization_.at.x])},
                                            {DNNL_ARG_WEIGHTS, weights_.memory},
                                            {DNNL_ARG_DST, wrap(dst_, outputs[0])}};
    if (bias_) args[DNNL_ARG_BIAS] = bias_;
    requantization_.execute(convolution_, std::move(args), inputs);
  }

  std::string_view name() const override { return name_; }
  Layout input_layout(size_t index) const override {
    return static_cast<int>(index) == requantization_.at.x ? Layout::nhwc : Layout::plain;
  }
  Layout output_layout(size_t) const override { return Layout::nhwc; }
  bool copied_at_plan_time(size_t index) const override {
    const IntegerOperands& at = requantization_.at;
    return static_cast<int>(index) == at.w || static_cast<int>(index) == at.bias;
  }

 private:
  Requantization requantization_;
  memory::desc src_, dst_;
  Primitive convolution_;
  SharedConstant weights_;
  memory bias_;
  std::string name_;
};

// A [..., M, K] (every leading dim folded into M) times a constant B [K, N] as one oneDNN matmul:
// the products of transformer layers, and MatMulInteger after DynamicQuantizeLinear (whose A zero
// point is computed per run, so it is a run-time argument like the convolutions').
class IntegerMatMulKernel final : public Kernel {
 public:
  IntegerMatMulKernel(const OpSpec& spec, const MatMulParams& p, DType output) : requantization_(spec) {
    const IntegerOperands& at = requantization_.at;
    int64_t rows = p.m;
    for (int64_t d : p.a_batch) rows *= d;
    src_ = value_desc({rows, p.k}, spec.input(at.x).dtype, Layout::plain);
    dst_ = value_desc({rows, p.n}, at.requantized() ? output : DType::i32, Layout::plain);
    const memory::desc user_weights({p.k, p.n}, memory::data_type::s8, memory::format_tag::ab);
    const memory::desc any_weights({p.k, p.n}, memory::data_type::s8, memory::format_tag::any);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_, any_weights, dst_),
                                          requantization_.attributes(spec), engine());
    matmul_ = Primitive(pd);
    name_ = "onednn:" + implementation_name(pd) + ":int8";
    weights_ = shared_reorder_constant(user_weights, spec.input(at.w).value, pd.weights_desc());
  }

  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    apply_thread_count();
    requantization_.execute(matmul_,
                            {{DNNL_ARG_SRC, wrap(src_, inputs[requantization_.at.x])},
                             {DNNL_ARG_WEIGHTS, weights_.memory},
                             {DNNL_ARG_DST, wrap(dst_, outputs[0])}},
                            inputs);
  }

  std::string_view name() const override { return name_; }
  bool copied_at_plan_time(size_t index) const override {
    return static_cast<int>(index) == requantization_.at.w;
  }

 private:
  Requantization requantization_;
  memory::desc src_, dst_;
  Primitive matmul_;
  SharedConstant weights_;
  std::string name_;
};

bool all_zero(const TensorInfo& info) {
  if (!info.present()) return true;
  for (int64_t i = 0; i < info.value.numel(); ++i) {
    if (info.value.int_at(i) != 0) return false;
  }
  return true;
}

// What the integer convolutions and matmuls share: VNNI, constant int8 weights with zero point 0,
// constant scales (and bias); a refusal, or nothing when oneDNN can run the step exactly.
std::optional<KernelOrReason> refuse_integer_product(const OpSpec& spec, const IntegerOperands& at) {
  if (isa_in_effect() < Isa::avx512_bf16) {
    return KernelOrReason::rejected(
        RefusalKind::unavailable,
        "oneDNN's int8 convolutions and matmuls are exact only with VNNI (the "
        "avx512_bf16 tier or above): without it they saturate 16-bit pair sums and "
        "halve the weights");
  }
  if (spec.input(at.w).dtype != DType::i8)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "oneDNN takes int8 weights, not uint8");
  const auto constant = [&](int input) { return input < 0 || !spec.has_input(input) || spec.input(input).is_constant(); };
  for (int input : {at.w, at.w_zero_point, at.x_scale, at.w_scale, at.y_scale, at.bias}) {
    if (!constant(input))
      return KernelOrReason::rejected(RefusalKind::not_constant,
                                      str_cat("input ", input, " (weights, scales, bias) is not a plan-time constant"));
  }
  if (spec.has_input(at.w_zero_point) && !all_zero(spec.input(at.w_zero_point)))
    return KernelOrReason::rejected(RefusalKind::unsupported_attribute,
                                    "oneDNN takes no weight zero point (symmetric weights only)");
  return std::nullopt;
}

KernelOrReason make_integer_conv(const KernelRequest& request, std::span<const TensorInfo> outputs) {
  const OpSpec& spec = request.op;
  const ConvParams p = integer_conv_params(spec);
  const IntegerOperands at = integer_operands(spec);
  if (std::optional<KernelOrReason> refusal = refuse_integer_product(spec, at)) return std::move(*refusal);
  if (p.input_spatial.size() != 2)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                    "oneDNN int8 Conv here runs 2-D convolutions only");
  return create_primitive_kernel(
      [&] { return std::make_unique<IntegerConvKernel>(spec, p, outputs[0].shape, outputs[0].dtype); });
}

KernelOrReason make_integer_matmul(const KernelRequest& request, std::span<const TensorInfo> outputs) {
  const OpSpec& spec = request.op;
  const MatMulParams p = integer_matmul_params(spec);
  const IntegerOperands at = integer_operands(spec);
  if (std::optional<KernelOrReason> refusal = refuse_integer_product(spec, at)) return std::move(*refusal);
  if (spec.input(at.w).shape.size() != 2 || spec.input(at.x).shape.size() < 2)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                    "oneDNN int8 MatMul here takes a 2-D B and an A of rank 2 or more");
  if (spec.has_input(at.x_zero_point) && checked_numel(spec.input(at.x_zero_point).shape) != 1)
    return KernelOrReason::rejected(RefusalKind::unsupported_attribute,
                                    "oneDNN takes one zero point for A, not one per row");
  return create_primitive_kernel(
      [&] { return std::make_unique<IntegerMatMulKernel>(spec, p, outputs[0].dtype); });
}

constexpr KernelEntry kKernels[] = {{"QLinearConv", make_integer_conv},
                                    {"ConvInteger", make_integer_conv},
                                    {"QLinearMatMul", make_integer_matmul},
                                    {"MatMulInteger", make_integer_matmul}};

}  // namespace

std::span<const KernelEntry> quantize_kernels() { return kKernels; }

}  // namespace kiln::onednn
