// The backend interface: a named provider of kernels. Kernel selection asks the backends of an
// op's candidate list in order; the first that returns a kernel wins, the others' reasons are kept.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "backends/kernel.h"
#include "ops/op_spec.h"

namespace kiln {

class Backend {
 public:
  virtual ~Backend() = default;

  // Stable lowercase name: "native", "onednn", "blas".
  virtual std::string_view name() const = 0;
  // False when the backend was built but cannot run here (library or CPU feature missing).
  virtual bool is_available() const = 0;
  // The library version it wraps, or kiln's version for the native backend.
  virtual std::string version() const = 0;
  // A kernel for `spec` whose outputs have the inferred `outputs` infos, or why not. Throws
  // kiln::Error only for invalid nodes (bad attributes), never for unsupported ones.
  virtual KernelOrReason create_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs) const = 0;
  // False for the fallback every op must have (native): its `enabled` setting cannot be turned off.
  virtual bool can_be_disabled() const { return true; }
  // Sets the wrapped library's own verbose switch, where it has one (process-wide in the library).
  virtual void set_library_verbose(int /*level*/) const {}
};

}  // namespace kiln
