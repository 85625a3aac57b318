// Kernel selection: walks the backends in preference order, keeps the first kernel offered and
// records why each earlier candidate refused (plans, `kiln explain` and verbose show the reasons).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
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

// Every backend kiln was built with: oneDNN, BLAS, native.
std::span<const Backend* const> all_backends();
const Backend* find_backend(std::string_view name);

// Kernel selection skips disabled backends (recording "disabled" as the reason). All are enabled by
// default; the native reference cannot be disabled (it is the fallback for every op). Throws
// kiln::Error (invalid_argument) for an unknown name.
void set_backend_enabled(std::string_view name, bool enabled);
bool backend_enabled(std::string_view name);
// "onednn,native": the enabled backends, part of every plan's cache key.
std::string enabled_backends_fingerprint();
// The same as a bit set (bit i: all_backends()[i] enabled), for checks that must not allocate.
uint32_t enabled_backends_mask();

// The candidate list for one node, in preference order; the native reference is always last.
std::vector<const Backend*> candidate_backends(const OpSpec& spec);

// Throws kiln::Error (not_implemented) listing every candidate's reason when none can run `spec`.
KernelSelection select_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs);

}  // namespace kiln
