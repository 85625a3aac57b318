#include "backends/onednn/onednn_backend.h"

#include <array>

#include "backends/onednn/onednn_common.h"

namespace kiln {
namespace {

constexpr std::array<native::FamilyTable, 6> kFamilies = {
    onednn::conv_kernels,        onednn::pool_kernels,   onednn::matmul_kernels,
    onednn::elementwise_kernels, onednn::concat_kernels, onednn::normalization_kernels};

class OnednnBackend final : public Backend {
 public:
  std::string_view name() const override { return "onednn"; }
  bool is_available() const override { return true; }  // oneDNN dispatches to what the CPU has
  std::string version() const override {
    const dnnl_version_t* v = dnnl_version();
    return str_cat(v->major, ".", v->minor, ".", v->patch);
  }

  KernelOrReason create_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs) const override {
    if (!spec.domain.empty() && spec.domain != "ai.onnx")
      return KernelOrReason::rejected("not an ONNX-domain op");
    if (native::KernelFactory create = native::find_kernel_factory(kFamilies, spec.op_type)) {
      return create(spec, outputs);
    }
    return KernelOrReason::rejected("no oneDNN kernel for " + spec.op_type);
  }
};

}  // namespace

const Backend& onednn_backend() {
  static const OnednnBackend instance;
  return instance;
}

std::unique_ptr<Kernel> make_layout_reorder(const Shape& shape, Layout from, Layout to) {
  return onednn::make_reorder_kernel(shape, from, to);
}

}  // namespace kiln
