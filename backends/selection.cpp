#include "backends/selection.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>

#include "backends/autotune.h"
#include "backends/blas/blas_backend.h"
#include "backends/native/native_backend.h"
#include "backends/onednn/onednn_backend.h"
#include "core/error.h"

namespace kiln {
namespace {

const std::array<const Backend*, kBackendCount>& backend_list() {
  static const std::array<const Backend*, kBackendCount> list = [] {
    std::array<const Backend*, kBackendCount> backends{};
    backends[kOnednnIndex] = &onednn_backend();
    backends[kBlasIndex] = &blas_backend();
    backends[kNativeIndex] = &native_backend();
    for (int i = 0; i < kBackendCount; ++i) {
      KILN_CHECK(backends[i]->name() == kBackendNames[i], runtime, "backend ", i, " is '",
                 backends[i]->name(), "', the settings table expects '", kBackendNames[i], "'");
    }
    return backends;
  }();
  return list;
}

int index_of(const Backend* backend) {
  const auto& list = backend_list();
  return static_cast<int>(std::find(list.begin(), list.end(), backend) - list.begin());
}

// Ops oneDNN computes without reordering any sum, so the same on any thread count: exact
// elementwise arithmetic, copies and max pooling. Deterministic mode keeps oneDNN to these.
bool exact_on_onednn(const OpSpec& spec) {
  static const std::set<std::string, std::less<>> kExact = {
      "Relu", "LeakyRelu", "Clip", "Add", "Sub", "Mul", "Div", "Concat", "MaxPool", "GlobalMaxPool"};
  return spec.post_ops.empty() && kExact.count(spec.op_type) != 0;
}

// Why deterministic mode keeps `backend` away from `spec`, or empty.
std::string deterministic_refusal(int backend, const OpSpec& spec) {
  if (backend == kBlasIndex) return "deterministic mode: BLAS splits products by thread count";
  if (backend == kOnednnIndex && !exact_on_onednn(spec)) {
    return str_cat("deterministic mode: oneDNN's ", spec.op_type,
                   " may sum in another order on another thread count");
  }
  return {};
}

struct Offer {
  std::unique_ptr<Kernel> kernel;
  std::string note;  // the backend's, for this kernel
  int backend = -1;
  int alternative = 0;
};

KernelOrReason create(int backend, const OpSpec& spec, std::span<const TensorInfo> outputs, int alternative) {
  if (alternative == 0) return backend_list()[backend]->create_kernel(spec, outputs);
  OpSpec alternative_spec = spec;
  alternative_spec.alternative = alternative;
  return backend_list()[backend]->create_kernel(alternative_spec, outputs);
}

}  // namespace

std::span<const Backend* const> all_backends() {
  return backend_list();
}

int backend_index(std::string_view name) {
  for (int i = 0; i < kBackendCount; ++i) {
    if (backend_list()[i]->name() == name) return i;
  }
  std::string known;
  for (const Backend* backend : backend_list()) known += str_cat(known.empty() ? "" : ", ", backend->name());
  fail(ErrorKind::invalid_argument, "unknown backend '", name, "' (known: ", known, ")");
}

const Backend* find_backend(std::string_view name) {
  return backend_list()[backend_index(name)];
}

std::vector<const Backend*> candidate_backends(const OpSpec& spec) {
  // Matrix products try BLAS first: it takes the tiny ones (below kBlasMaxMultiplyAdds), where
  // oneDNN's per-call overhead dominates, and refuses the rest with that reason.
  const bool is_product = (spec.domain.empty() || spec.domain == "ai.onnx") &&
                          (spec.op_type == "MatMul" || spec.op_type == "Gemm");
  if (is_product) return {&blas_backend(), &onednn_backend(), &native_backend()};
  return {&onednn_backend(), &native_backend()};
}

KernelSelection select_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs,
                              const Settings& settings, AutotuneCache* autotune_cache) {
  KernelSelection selection;
  const bool tuning = settings.on("autotune");
  KILN_CHECK(!tuning || autotune_cache != nullptr, runtime, "autotune needs a cache to remember choices in");
  std::string tuning_key;
  if (tuning) {
    tuning_key = autotune_key(spec, outputs, settings);
    if (std::optional<AutotuneChoice> choice = autotune_cache->find(tuning_key)) {
      KernelOrReason offer = create(choice->backend, spec, outputs, choice->alternative);
      if (offer.kernel) {
        selection.kernel = std::move(offer.kernel);
        selection.backend = backend_list()[choice->backend];
        selection.note = std::move(offer.note);
        return selection;
      }
    }
  }
  // cuDNN's benchmark_limit: 0 times every candidate.
  const int limit = settings.get("autotune_limit");
  const size_t wanted = !tuning ? 1 : limit == 0 ? SIZE_MAX : static_cast<size_t>(limit);
  std::vector<Offer> offers;
  for (const Backend* backend : candidate_backends(spec)) {
    const int index = index_of(backend);
    const std::string name(backend->name());
    if (!settings.backend_enabled(index)) {
      selection.rejected.push_back({name, "backend disabled"});
      continue;
    }
    if (settings.on("deterministic")) {
      if (std::string why = deterministic_refusal(index, spec); !why.empty()) {
        selection.rejected.push_back({name, std::move(why)});
        continue;
      }
    }
    if (!backend->is_available()) {
      selection.rejected.push_back({name, "backend not available on this machine"});
      continue;
    }
    // Autotune also asks oneDNN for its alternative implementations of the same primitive.
    const int alternatives = tuning && index == kOnednnIndex ? kMaxAutotuneLimit : 1;
    for (int alternative = 0; alternative < alternatives && offers.size() < wanted; ++alternative) {
      KernelOrReason offer = create(index, spec, outputs, alternative);
      if (!offer.kernel) {
        if (alternative == 0) selection.rejected.push_back({name, std::move(offer.reason)});
        break;
      }
      offers.push_back({std::move(offer.kernel), std::move(offer.note), index, alternative});
    }
    if (offers.size() >= wanted) break;
  }
  if (offers.empty()) {
    std::string reasons;
    for (const RejectedCandidate& candidate : selection.rejected) {
      reasons += str_cat(reasons.empty() ? "" : "; ", candidate.backend, ": ", candidate.reason);
    }
    fail(ErrorKind::not_implemented, "no backend can run ", spec.op_type, " (", reasons, ")");
  }
  size_t best = 0;
  if (offers.size() > 1) {
    for (const Offer& offer : offers) {
      selection.timed.push_back({std::string(offer.kernel->name()),
                                 time_candidate(*offer.kernel, spec, outputs, *offers[0].kernel)});
    }
    for (size_t i = 1; i < offers.size(); ++i) {
      if (selection.timed[i].milliseconds < selection.timed[best].milliseconds) best = i;
    }
    for (size_t i = 0; i < offers.size(); ++i) {
      if (i == best) continue;
      selection.rejected.push_back(
          {std::string(backend_list()[offers[i].backend]->name()),
           str_cat("autotune: ", offers[i].kernel->name(), " took ", selection.timed[i].milliseconds, " ms, ",
                   offers[best].kernel->name(), " ", selection.timed[best].milliseconds, " ms")});
    }
  }
  if (tuning) autotune_cache->remember(tuning_key, {offers[best].backend, offers[best].alternative});
  selection.backend = backend_list()[offers[best].backend];
  selection.kernel = std::move(offers[best].kernel);
  selection.note = std::move(offers[best].note);
  return selection;
}

}  // namespace kiln
