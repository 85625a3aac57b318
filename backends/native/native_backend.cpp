#include "backends/native/native_backend.h"

#include <algorithm>
#include <array>
#include <memory>
#include <vector>

#include "backends/native/grouped_conv.h"
#include "core/version.h"
#include "ops/attention.h"
#include "ops/channel_shuffle.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

constexpr std::array<FamilyTable<OpSpec>, 21> kFamilies = {
    native::conv_kernels,           native::conv_transpose_kernels,
    native::pool_kernels,           native::matmul_kernels,
    native::elementwise_kernels,    native::normalization_kernels,
    native::softmax_kernels,        native::reduce_kernels,
    native::shape_kernels,          native::data_movement_kernels,
    native::resize_kernels,         native::indexing_kernels,
    native::data_dependent_kernels, native::roi_kernels,
    native::grid_sample_kernels,    native::recurrent_kernels,
    native::signal_kernels,         native::random_kernels,
    native::sequence_kernels,       native::control_flow_kernels,
    native::quantize_kernels,
};

// Whether every output element of `spec` is computed from the elements at the same position of its
// inputs: an elementwise op whose inputs have the outputs' shape or one element (Clip's bounds).
// Such an op computes the same on values stored channels-last as on plain ones.
bool same_position_elementwise(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const auto table = native::elementwise_kernels();
  const bool elementwise = std::any_of(table.begin(), table.end(),
                                       [&](const auto& entry) { return entry.op_type == spec.op_type; });
  if (!is_default_domain(spec.domain) || !elementwise) return false;
  const Shape& shape = spec.input(0).shape;
  for (const TensorInfo& output : outputs) {
    // Float32 only: a Cast to float16 feeding a graph output would leave a value stored nhwc that no
    // step can bring back to plain.
    if (output.shape != shape || output.dtype != DType::f32) return false;
  }
  for (size_t i = 1; i < spec.inputs.size(); ++i) {
    if (!spec.has_input(i)) continue;
    const TensorInfo& input = spec.input(i);
    // One with the output's shape is read channels-last too, so it must be float32 as well (Pow's
    // exponent may be an integer tensor).
    if (input.shape == shape ? input.dtype != DType::f32 : checked_numel(input.shape) != 1) return false;
  }
  return true;
}

// The same for the per-tensor quantized elementwise ops (QuantizeLinear, DequantizeLinear, QLinearAdd,
// QLinearMul), which keep int8 activations channels-last between quantized convolutions: their
// scales and zero points have one element, the other inputs the output's shape.
bool same_position_quantized(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const bool linear = is_default_domain(spec.domain) &&
                      (spec.op_type == "QuantizeLinear" || spec.op_type == "DequantizeLinear");
  const bool qlinear =
      spec.domain == kMicrosoftDomain && (spec.op_type == "QLinearAdd" || spec.op_type == "QLinearMul");
  if (!linear && !qlinear) return false;
  const Shape& shape = spec.input(0).shape;
  if (outputs.size() != 1 || outputs[0].shape != shape) return false;
  for (size_t i = 1; i < spec.inputs.size(); ++i) {
    if (spec.has_input(i) && spec.input(i).shape != shape && checked_numel(spec.input(i).shape) != 1)
      return false;
  }
  return true;
}

// A same-position elementwise kernel reading and writing channels-last values as they are stored,
// instead of the planner converting them to plain and back around it (mobilenet_v3's HardSigmoid
// between oneDNN's convolutions: most of deeplabv3_mobilenet_v3_large's 70 Reorder steps).
class ChannelsLastElementwise final : public Kernel {
 public:
  ChannelsLastElementwise(std::unique_ptr<Kernel> kernel, std::vector<Layout> input_layouts)
      : kernel_(std::move(kernel)), input_layouts_(std::move(input_layouts)) {}

  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    kernel_->run(inputs, outputs);
  }
  std::string_view name() const override { return kernel_->name(); }
  bool is_view() const override { return kernel_->is_view(); }
  bool sizes_outputs() const override { return kernel_->sizes_outputs(); }
  Layout input_layout(size_t index) const override {
    return index < input_layouts_.size() ? input_layouts_[index] : Layout::plain;
  }
  Layout output_layout(size_t) const override { return Layout::nhwc; }
  int in_place_input() const override { return kernel_->in_place_input(); }
  bool copied_at_plan_time(size_t index) const override { return kernel_->copied_at_plan_time(index); }
  std::unique_ptr<BoundKernel> bind(std::span<const Tensor> inputs,
                                    std::span<const Tensor> outputs) const override {
    return kernel_->bind(inputs, outputs);
  }

 private:
  std::unique_ptr<Kernel> kernel_;
  std::vector<Layout> input_layouts_;  // nhwc for those with the output's shape, plain for scalars
};

class NativeBackend final : public Backend {
 public:
  std::string_view name() const override { return "native"; }
  bool is_available() const override { return true; }
  std::string version() const override { return std::string(kiln_version()); }
  bool can_be_disabled() const override { return false; }  // every op's fallback
  std::shared_ptr<const BackendOptions> read_options(const SettingValues& settings) const override {
    auto options = std::make_shared<NativeOptions>();
    options->einsum_optimize = settings.get("einsum_optimize") != 0;
    options->einsum_strategy = static_cast<EinsumStrategy>(settings.get("einsum_strategy"));
    return options;
  }
  std::span<const OptionSetting> option_settings() const override {
    static constexpr std::string_view kEinsum[] = {"Einsum"};
    static constexpr OptionSetting kSettings[] = {{"einsum_optimize", kEinsum}, {"einsum_strategy", kEinsum}};
    return kSettings;
  }

  KernelOrReason create_kernel(const KernelRequest& request,
                               std::span<const TensorInfo> outputs) const override {
    // Asked before the blanket refusal below: the one native kernel that fuses post-ops (oneDNN
    // leaves these convolutions to it, fused Relu included).
    if (request.op.op_type == "Conv" && !native::grouped_conv_refusal(request))
      return native::make_channels_last_grouped_conv(request, outputs);
    // The reference kernels stay one op each; the planner runs fused followers as their own steps.
    if (!request.post_ops.empty())
      return KernelOrReason::rejected(RefusalKind::unsupported_fusion, "native kernels do not fuse post-ops");
    if (request.op.op_type == kAttentionOp) return native::create_attention_kernel(request, outputs);
    if (request.op.op_type == "Reorder") return native::create_reorder_kernel(request, outputs);
    if (request.op.op_type == kChannelShuffleOp)
      return native::create_channel_shuffle_kernel(request, outputs);
    if (request.input_layout(0) == Layout::nhwc) {
      KernelOrReason channels_last = native::create_channels_last_kernel(request, outputs);
      if (channels_last.kernel) return channels_last;
    }
    if (request.op.op_type == "Einsum" && is_default_domain(request.op.domain))
      return native::create_einsum_kernel(request, outputs);
    if (auto create = find_kernel_factory<OpSpec>(kFamilies, request.op.op_type)) {
      KernelOrReason offer = create(request.op, outputs);
      if (offer.kernel && request.input_layout(0) == Layout::nhwc &&
          (same_position_elementwise(request.op, outputs) || same_position_quantized(request.op, outputs))) {
        std::vector<Layout> layouts;
        for (size_t i = 0; i < request.op.inputs.size(); ++i) {
          const bool full = request.op.has_input(i) && request.op.input(i).shape == request.op.input(0).shape;
          layouts.push_back(full ? Layout::nhwc : Layout::plain);
        }
        offer.kernel = std::make_unique<ChannelsLastElementwise>(std::move(offer.kernel), std::move(layouts));
      }
      if (offer.kernel && request.precision != Precision::fp32)
        offer.note = "precision bf16 requested, float32 used: the native kernels compute in float32";
      return offer;
    }
    return KernelOrReason::rejected(RefusalKind::no_kernel, "no native kernel for " + request.op.op_type);
  }
};

}  // namespace

const Backend& native_backend() {
  static const NativeBackend instance;
  return instance;
}

}  // namespace kiln
