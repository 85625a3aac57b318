// A backend's kernels as tables: one entry per op type, grouped in families (one file per family
// under the backend's folder, mirroring ops/). A backend's create_kernel looks the op up here.
#pragma once

#include <span>
#include <string_view>

#include "backends/base/kernel.h"
#include "ops/op_spec.h"

namespace kiln {

// `Request` is what the backend's factories read: OpSpec for kernels that need only the node,
// KernelRequest for kernels that also take layouts, precision and post-ops.
template <typename Request>
struct KernelEntry {
  using Factory = KernelOrReason (*)(const Request& request, std::span<const TensorInfo> outputs);
  std::string_view op_type;
  Factory create;
};

template <typename Request>
using FamilyTable = std::span<const KernelEntry<Request>> (*)();

// The factory of the first entry for `op_type` across `families`, or null.
template <typename Request>
typename KernelEntry<Request>::Factory find_kernel_factory(std::span<const FamilyTable<Request>> families,
                                                           std::string_view op_type) {
  for (FamilyTable<Request> family : families) {
    for (const KernelEntry<Request>& entry : family()) {
      if (entry.op_type == op_type) return entry.create;
    }
  }
  return nullptr;
}

}  // namespace kiln
