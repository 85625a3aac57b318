// Kernel selection: walks the backends in preference order, keeps the first kernel offered and
// records why each earlier candidate refused (plans, `kiln explain` and verbose show the reasons).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.h"

namespace kiln {

struct RejectedCandidate {
  std::string backend;
  std::string reason;
};

struct KernelSelection {
  std::unique_ptr<Kernel> kernel;
  const Backend* backend = nullptr;
  std::vector<RejectedCandidate> rejected;
};

// Backends in preference order, fastest first; the native reference is always last.
std::vector<const Backend*> candidate_backends(const OpSpec& spec);

// Throws kiln::Error (not_implemented) listing every candidate's reason when none can run `spec`.
KernelSelection select_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs);

}  // namespace kiln
