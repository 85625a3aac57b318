#include "backends/selection.h"

#include "backends/native/native_backend.h"
#include "core/error.h"

namespace kiln {

std::vector<const Backend*> candidate_backends(const OpSpec&) { return {&native_backend()}; }

KernelSelection select_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  KernelSelection selection;
  for (const Backend* backend : candidate_backends(spec)) {
    if (!backend->is_available()) {
      selection.rejected.push_back({std::string(backend->name()), "backend not available on this machine"});
      continue;
    }
    KernelOrReason offer = backend->create_kernel(spec, outputs);
    if (offer.kernel) {
      selection.kernel = std::move(offer.kernel);
      selection.backend = backend;
      return selection;
    }
    selection.rejected.push_back({std::string(backend->name()), std::move(offer.reason)});
  }
  std::string reasons;
  for (const RejectedCandidate& candidate : selection.rejected) {
    reasons += str_cat(reasons.empty() ? "" : "; ", candidate.backend, ": ", candidate.reason);
  }
  fail(ErrorKind::not_implemented, "no backend can run ", spec.op_type, " (", reasons, ")");
}

}  // namespace kiln
