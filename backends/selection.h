// Kernel selection: walks the backends in preference order, keeps the first kernel offered and
// records why each earlier candidate refused (plans, `kiln explain` and verbose show the reasons).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "backends/settings.h"

namespace kiln {

class AutotuneCache;

struct RejectedCandidate {
  std::string backend;
  std::string reason;
};

// One kernel autotune timed for a node.
struct TimedCandidate {
  std::string kernel;
  double milliseconds = 0;
};

struct KernelSelection {
  std::unique_ptr<Kernel> kernel;
  const Backend* backend = nullptr;
  std::vector<RejectedCandidate> rejected;
  std::string note;                   // e.g. why a requested precision was not used
  std::vector<TimedCandidate> timed;  // autotune's measurements, fastest kept (empty when off)
};

// Positions in all_backends() (and in the per-backend settings).
inline constexpr int kOnednnIndex = backend_position("onednn");
inline constexpr int kBlasIndex = backend_position("blas");
inline constexpr int kNativeIndex = backend_position("native");

// Every backend kiln was built with, in kBackendNames' order: oneDNN, BLAS, native.
std::span<const Backend* const> all_backends();
const Backend* find_backend(std::string_view name);

// all_backends()'s index of a backend (kOnednnIndex etc.); throws kiln::Error (invalid_argument)
// listing the known names for an unknown one.
int backend_index(std::string_view name);

// The candidate list for one node, in preference order; the native reference is always last.
std::vector<const Backend*> candidate_backends(const OpSpec& spec);

// The kernel for `spec` under `settings`: the first enabled candidate that offers one, or with
// autotune on, the fastest of up to `autotune_limit` offers (0: all), remembered in `autotune_cache`
// (required with autotune on). Throws kiln::Error (not_implemented) listing every candidate's
// reason when none can run `spec`.
KernelSelection select_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs,
                              const Settings& settings, AutotuneCache* autotune_cache = nullptr);

}  // namespace kiln
