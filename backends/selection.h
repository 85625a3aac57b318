// Kernel selection: for one kernel request, walks the backend registry's rows (backends/registry.h)
// in candidate order, keeps the first kernel offered (or with autotune, the fastest of several) and
// records why each other candidate refused; plans, `kiln explain` and verbose show the reasons.
// Nothing here names a backend: what differs between backends is in their rows.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/base/backend.h"
#include "backends/base/kernel_request.h"
#include "backends/registry.h"
#include "backends/settings.h"

namespace kiln {

class AutotuneCache;

struct RejectedCandidate {
  std::string backend;
  std::string reason;
  std::string variant;  // the named kernel of the backend that refused (attention's), or empty

  // Who refused, as plans print it: "onednn", or "flash (native)" for a named kernel.
  std::string label() const;
};

// One kernel autotune timed for a node.
struct TimedCandidate {
  std::string kernel;
  double milliseconds = 0;
};

struct KernelSelection {
  std::unique_ptr<Kernel> kernel;  // null when no candidate takes the request: `rejected` says why
  int backend = -1;                // the chosen backend's row position
  std::vector<RejectedCandidate> rejected;
  std::string note;                   // e.g. why a requested precision was not used
  std::vector<TimedCandidate> timed;  // autotune's measurements, fastest kept (empty when off)

  // "onednn: reason; native: reason", every refusal in candidate order.
  std::string refusals() const;
};

// Every backend in kBackendRows' order (built or not: a backend left out at configure time is
// there, and says so through Backend::is_built).
std::span<const Backend* const> all_backends();
const Backend* find_backend(std::string_view name);
// A backend's row position; throws kiln::Error (invalid_argument) listing the known names.
int backend_index(std::string_view name);

// The CMake option that builds a backend: "KILN_WITH_ONEDNN" for "onednn".
std::string build_option(std::string_view backend);

// Row positions of the backends that are candidates for `request`, in the order they are asked.
std::vector<int> candidate_backends(const KernelRequest& request);

// One kernel a request may be asked of: a backend, and for attention one of its named kernels.
struct Candidate {
  int backend = -1;
  std::string_view variant;
  // Why the op family's preference keeps it from being asked ("not in prefer_matmul (blas)"), or
  // empty: it is asked.
  std::string refusal;
};
// The candidates for `request` in the order they are asked: attention's named kernels in the order
// of the sdpa_kernels setting (each with its backend), any other op's backends by rank; then, when
// the op's family has a preference (prefer_conv, ...), reordered to it, with what it leaves out
// (and each backend it names that has no kernel for the op) at the end, refused.
std::vector<Candidate> candidates(const KernelRequest& request, const Settings& settings);

// The op family (registry_data::kOpFamilies' index) of `op_type`; -1 for kiln's Reorder, which
// belongs to none.
int op_family(std::string_view op_type);
// Whether `request`'s op family has a preference under `settings`, and where backend `backend`
// comes in its candidate order (the number of candidates when it is not listed).
bool has_preference(const KernelRequest& request, const Settings& settings);
int preference_rank(const KernelRequest& request, const Settings& settings, int backend);
// Whether the preference of `family` under `settings` lets backend `backend` (any of its kernels) run it.
bool backend_preferred(int backend, int family, const Settings& settings);
// The backend row position whose kernel `name` is (one of registry_data::kSdpaKernels); throws
// kiln::Error (invalid_argument) listing the known names.
int sdpa_kernel_backend(std::string_view name);

// What the backends enabled under `settings` and built can fuse into `op_type` (the union of their
// rules).
FusionRule fusion_offered(std::string_view op_type, const Settings& settings);

// The kernel for `request` under `settings`: the first candidate that is enabled, built and
// available, that deterministic mode (when on) allows, and that offers one; or, with autotune on,
// the fastest of up to `autotune_limit` offers (0: all), remembered in `autotune_cache` (required
// with autotune on). When no candidate takes the request the selection has no kernel; backends
// throw kiln::Error only for invalid nodes.
KernelSelection find_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs,
                            const Settings& settings, AutotuneCache* autotune_cache = nullptr);
// find_kernel, throwing kiln::Error (not_implemented) listing every candidate's reason when no
// candidate takes the request.
KernelSelection select_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs,
                              const Settings& settings, AutotuneCache* autotune_cache = nullptr);

// The request for a Reorder step converting a value of logical `shape` and `dtype` stored in `from`
// into `to`. Reorders are kernels like any other; the op type is kiln's own (ONNX has none, and
// the planner refuses op types without a schema, so a model cannot name it).
KernelRequest reorder_request(const Shape& shape, DType dtype, Layout from, Layout to);
// The Reorder kernel for that conversion (autotune off: one conversion has one kernel worth having).
KernelSelection select_reorder(const Shape& shape, DType dtype, Layout from, Layout to,
                               const Settings& settings);

}  // namespace kiln
