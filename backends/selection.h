// Kernel selection in two parts: offers() walks the backend registry's rows (backends/registry.h) in
// candidate order, asking each candidate for a kernel and recording each refusal; a rule then
// chooses among the offers (the first, or autotune's fastest). The result is a KernelDecision that
// plans, `kiln explain`, verbose and traces carry. Nothing here names a backend: what differs
// between backends is in their rows and in the refusals they return.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/base/backend.h"
#include "backends/base/decision.h"
#include "backends/base/kernel_request.h"
#include "backends/registry.h"
#include "backends/settings.h"

namespace kiln {

// A kernel selection made: the kernel (null when no candidate takes the request, decision.refusals
// says why), the decision as data, and the chosen backend's note (what it does differently from
// what was asked, e.g. a precision it could not use).
struct KernelSelection {
  std::unique_ptr<Kernel> kernel;
  KernelDecision decision;
  std::string note;
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
  // nothing: it is asked.
  std::optional<Refusal> refusal;
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

// What the candidates for `request` offer: each candidate in order (attention's named kernels
// included) that is enabled, built and available, and that deterministic mode (when on) allows, is
// asked for its first implementation and, where `alternatives` is set, for the others autotune may
// time; asking stops once `wanted` kernels are offered. Every candidate asked or passed over that
// offered nothing is in `refusals`, in candidate order.
struct Offer {
  std::unique_ptr<Kernel> kernel;
  std::string note;  // the backend's, for this kernel
  int backend = -1;
  std::string_view variant;
  int alternative = 0;
  bool cold_caches = false;  // see KernelOrReason::cold_caches
};
struct Offers {
  std::vector<Offer> offers;
  std::vector<Refusal> refusals;
};
Offers offers(const KernelRequest& request, std::span<const TensorInfo> outputs, const Settings& settings,
              size_t wanted, bool alternatives);

// The kernel for `request` under `settings`, chosen among the offers by one rule: the first offer;
// or, with autotune on (and deterministic mode off), the fastest of up to autotune_limit offers
// (0: all), timed once per node and settings in the process: the whole decision is kept in the
// choice cache (backends/choice_cache.h), so a later plan of an identical node, in this session or
// another, takes it without timing and explains it with the same refusals and timings. When no
// candidate offers a kernel the selection has none; backends throw kiln::Error only for invalid
// nodes.
KernelSelection find_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs,
                            const Settings& settings);
// find_kernel, throwing kiln::Error (not_implemented) listing every candidate's refusal when no
// candidate takes the request.
KernelSelection select_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs,
                              const Settings& settings);

// The less accurate forms (Backend::approximate_forms) of the node `request` that `chosen` took: the
// first description among the candidates asked up to `chosen`, each asked as selection asked it,
// and the kernel of its fastest form (created as that form, max_error at its error). The forms are
// weighed with every computed input's and output's first dimension times `weigh_factor` (the error
// budget measures at batch 1 what it decides for the plan's batch). Empty where autotune times the
// choices (on, outside deterministic mode) and where no candidate describes a form.
struct ApproximateKernel {
  ApproximateForms forms;
  std::unique_ptr<Kernel> kernel;  // null: none
};
ApproximateKernel approximate_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs,
                                     const Settings& settings, int chosen, int64_t weigh_factor);

// Every backend's options under a plan's `settings` (Backend::read_options), read once per plan and
// carried by each of its requests.
std::shared_ptr<const BackendOptionSet> read_backend_options(const Settings& settings);
// The backend options a step of `op_type` consulted, as "conv_algorithm=auto": each setting that
// concerns the op (Backend::option_settings) of the backends named in `asked`, in registry order.
std::vector<std::string> consulted_options(const Settings& settings, std::string_view op_type,
                                           const std::vector<std::string_view>& asked);

// The request for a Reorder step converting a value of logical `shape` and `dtype` stored in `from`
// into `to`. Reorders are kernels like any other; the op type is kiln's own (ONNX has none, and
// the planner refuses op types without a schema, so a model cannot name it).
KernelRequest reorder_request(const Shape& shape, DType dtype, Layout from, Layout to);
// The Reorder kernel for that conversion (the first offer: one conversion has one kernel worth having).
KernelSelection select_reorder(const Shape& shape, DType dtype, Layout from, Layout to,
                               const Settings& settings);

}  // namespace kiln
