// The backend interface: a named provider of kernels. Kernel selection (backends/selection.h) asks
// the candidates for a node in the order the backend registry gives (backends/registry.h); each
// answers with a kernel or a typed refusal (backends/base/refusal.h), and a rule chooses among the
// kernels offered: the first, or under autotune the fastest.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "backends/base/approximation.h"
#include "backends/base/backend_options.h"
#include "backends/base/kernel.h"
#include "backends/base/kernel_request.h"

namespace kiln {

class Backend {
 public:
  virtual ~Backend() = default;

  // Stable lowercase name: "native", "onednn", "blas".
  virtual std::string_view name() const = 0;
  // False when kiln was configured without it (KILN_WITH_<NAME>=OFF): a stand-in that refuses every node.
  virtual bool is_built() const { return true; }
  // False when the backend cannot run here (not built, or a library or CPU feature missing).
  virtual bool is_available() const = 0;
  // The library version it wraps, or kiln's version for the native backend.
  virtual std::string version() const = 0;
  // A kernel for `request` whose outputs have the inferred `outputs` infos, or why not. Throws
  // kiln::Error only for invalid nodes (bad attributes), never for unsupported ones.
  virtual KernelOrReason create_kernel(const KernelRequest& request,
                                       std::span<const TensorInfo> outputs) const = 0;
  // The faster, less accurate kernels it could run `request` with if the node were allowed more
  // error than its own bound (KernelRequest::max_error), for planning's error budget; none by
  // default.
  virtual ApproximateForms approximate_forms(const KernelRequest& /*request*/,
                                             std::span<const TensorInfo> /*outputs*/) const {
    return {};
  }
  // False for the fallback every op must have (native): its `enabled` setting cannot be turned off.
  virtual bool can_be_disabled() const { return true; }
  // Its options under a plan's settings, read once per plan (null: it has none). Requests carry
  // them; create_kernel takes them with options_of (backends/base/backend_options.h).
  virtual std::shared_ptr<const BackendOptions> read_options(const SettingValues& /*settings*/) const {
    return nullptr;
  }
  // The settings read_options reads and the op types each concerns.
  virtual std::span<const OptionSetting> option_settings() const { return {}; }
  // Sets the wrapped library's own verbose switch, where it has one (process-wide in the library).
  virtual void set_library_verbose(int /*level*/) const {}
};

}  // namespace kiln
