#include "backends/native/native_backend.h"

#include <array>

#include "core/version.h"

namespace kiln {
namespace {

constexpr std::array<native::FamilyTable, 9> kFamilies = {
    native::conv_kernels,        native::pool_kernels,          native::matmul_kernels,
    native::elementwise_kernels, native::normalization_kernels, native::softmax_kernels,
    native::reduce_kernels,      native::shape_kernels,         native::data_movement_kernels,
};

class NativeBackend final : public Backend {
 public:
  std::string_view name() const override { return "native"; }
  bool is_available() const override { return true; }
  std::string version() const override { return std::string(kiln_version()); }
  bool can_be_disabled() const override { return false; }  // every op's fallback

  KernelOrReason create_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs) const override {
    // The reference kernels stay one op each; the planner runs fused followers as their own steps.
    if (!spec.post_ops.empty()) return KernelOrReason::rejected("native kernels do not fuse post-ops");
    if (native::KernelFactory create = native::find_kernel_factory(kFamilies, spec.op_type)) {
      return create(spec, outputs);
    }
    return KernelOrReason::rejected("no native kernel for " + spec.op_type);
  }
};

}  // namespace

namespace native {

KernelFactory find_kernel_factory(std::span<const FamilyTable> families, std::string_view op_type) {
  for (FamilyTable family : families) {
    for (const KernelEntry& entry : family()) {
      if (entry.op_type == op_type) return entry.create;
    }
  }
  return nullptr;
}

}  // namespace native

const Backend& native_backend() {
  static const NativeBackend instance;
  return instance;
}

}  // namespace kiln
