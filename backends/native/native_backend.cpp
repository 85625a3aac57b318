#include "backends/native/native_backend.h"

#include <array>

#include "core/version.h"
#include "ops/attention.h"
#include "ops/channel_shuffle.h"

namespace kiln {
namespace {

constexpr std::array<FamilyTable<OpSpec>, 15> kFamilies = {
    native::conv_kernels,          native::conv_transpose_kernels, native::pool_kernels,
    native::matmul_kernels,        native::elementwise_kernels,    native::normalization_kernels,
    native::softmax_kernels,       native::reduce_kernels,         native::shape_kernels,
    native::data_movement_kernels, native::resize_kernels,         native::indexing_kernels,
    native::data_dependent_kernels, native::roi_kernels,           native::grid_sample_kernels,
};

class NativeBackend final : public Backend {
 public:
  std::string_view name() const override { return "native"; }
  bool is_available() const override { return true; }
  std::string version() const override { return std::string(kiln_version()); }
  bool can_be_disabled() const override { return false; }  // every op's fallback

  KernelOrReason create_kernel(const KernelRequest& request,
                               std::span<const TensorInfo> outputs) const override {
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
