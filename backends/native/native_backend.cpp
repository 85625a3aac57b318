#include "backends/native/native_backend.h"

#include <array>

#include "core/version.h"

namespace kiln {
namespace {

using FamilyTable = std::span<const native::KernelEntry> (*)();

constexpr std::array kFamilies = {
    native::conv_kernels,        native::pool_kernels,          native::matmul_kernels,
    native::elementwise_kernels, native::normalization_kernels, native::softmax_kernels,
    native::reduce_kernels,      native::shape_kernels,         native::data_movement_kernels,
};

class NativeBackend final : public Backend {
 public:
  std::string_view name() const override { return "native"; }
  bool is_available() const override { return true; }
  std::string version() const override { return std::string(kiln_version()); }

  KernelOrReason create_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs) const override {
    // The reference kernels stay one op each; the planner runs fused followers as their own steps.
    if (!spec.post_ops.empty()) return KernelOrReason::rejected("native kernels do not fuse post-ops");
    for (FamilyTable family : kFamilies) {
      for (const native::KernelEntry& entry : family()) {
        if (entry.op_type == spec.op_type) return entry.create(spec, outputs);
      }
    }
    return KernelOrReason::rejected("no native kernel for " + spec.op_type);
  }
};

}  // namespace

const Backend& native_backend() {
  static const NativeBackend instance;
  return instance;
}

}  // namespace kiln
