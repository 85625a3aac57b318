#include "backends/selection.h"

#include <array>
#include <atomic>

#include "backends/blas/blas_backend.h"
#include "backends/native/native_backend.h"
#include "backends/onednn/onednn_backend.h"
#include "core/error.h"

namespace kiln {
namespace {

constexpr size_t kBackendCount = 3;

const std::array<const Backend*, kBackendCount>& backend_list() {
  static const std::array<const Backend*, kBackendCount> list = {&onednn_backend(), &blas_backend(),
                                                                 &native_backend()};
  return list;
}

std::array<std::atomic<bool>, kBackendCount>& enabled_flags() {
  static std::array<std::atomic<bool>, kBackendCount> flags = {true, true, true};
  return flags;
}

size_t backend_index(std::string_view name) {
  for (size_t i = 0; i < kBackendCount; ++i) {
    if (backend_list()[i]->name() == name) return i;
  }
  std::string known;
  for (const Backend* backend : backend_list()) known += str_cat(known.empty() ? "" : ", ", backend->name());
  fail(ErrorKind::invalid_argument, "unknown backend '", name, "' (known: ", known, ")");
}

}  // namespace

std::span<const Backend* const> all_backends() {
  return backend_list();
}

const Backend* find_backend(std::string_view name) {
  return backend_list()[backend_index(name)];
}

void set_backend_enabled(std::string_view name, bool enabled) {
  const size_t index = backend_index(name);
  KILN_CHECK(enabled || name != "native", invalid_argument,
             "the native backend cannot be disabled: it is the fallback for every op");
  enabled_flags()[index].store(enabled);
}

bool backend_enabled(std::string_view name) {
  return enabled_flags()[backend_index(name)].load();
}

uint32_t enabled_backends_mask() {
  uint32_t mask = 0;
  for (size_t i = 0; i < kBackendCount; ++i) mask |= enabled_flags()[i].load() ? (1u << i) : 0u;
  return mask;
}

std::string enabled_backends_fingerprint() {
  std::string fingerprint;
  for (size_t i = 0; i < kBackendCount; ++i) {
    if (enabled_flags()[i].load())
      fingerprint += str_cat(fingerprint.empty() ? "" : ",", backend_list()[i]->name());
  }
  return fingerprint;
}

std::vector<const Backend*> candidate_backends(const OpSpec& spec) {
  // Matrix products try BLAS first: it takes the tiny ones (below kBlasMaxMultiplyAdds), where
  // oneDNN's per-call overhead dominates, and refuses the rest with that reason.
  const bool is_product = (spec.domain.empty() || spec.domain == "ai.onnx") &&
                          (spec.op_type == "MatMul" || spec.op_type == "Gemm");
  if (is_product) return {&blas_backend(), &onednn_backend(), &native_backend()};
  return {&onednn_backend(), &native_backend()};
}

KernelSelection select_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  KernelSelection selection;
  for (const Backend* backend : candidate_backends(spec)) {
    if (!backend_enabled(backend->name())) {
      selection.rejected.push_back({std::string(backend->name()), "backend disabled"});
      continue;
    }
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
