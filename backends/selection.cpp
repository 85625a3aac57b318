#include "backends/selection.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>

#include "backends/autotune.h"
#include "core/error.h"
#include "ops/attention.h"

namespace kiln {
namespace {

const std::array<const Backend*, kBackendCount>& backend_list() {
  static const std::array<const Backend*, kBackendCount> list = [] {
    std::array<const Backend*, kBackendCount> backends{};
    for (int i = 0; i < kBackendCount; ++i) {
      backends[i] = &kBackendRows[i].instance();
      KILN_CHECK(backends[i]->name() == kBackendRows[i].name, runtime, "backend row ", i, " is '",
                 kBackendRows[i].name, "' but its entry point returns '", backends[i]->name(), "'");
    }
    return backends;
  }();
  return list;
}

bool contains(std::span<const std::string_view> names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Preferences name backends by kKernelChoices' first entries.
constexpr bool kernel_choices_start_with_backends() {
  for (int i = 0; i < kBackendCount; ++i) {
    if (registry_data::kKernelChoices[i] != kBackendRows[i].name) return false;
  }
  return true;
}
static_assert(kernel_choices_start_with_backends());

// Why deterministic mode keeps backend `position` away from `request`, or empty.
std::string deterministic_refusal(int position, const KernelRequest& request) {
  const BackendRow& row = kBackendRows[position];
  switch (row.determinism) {
    case Determinism::exact:
      return {};
    case Determinism::never:
      return str_cat("deterministic mode: ", row.nondeterminism);
    case Determinism::listed_exact:
      if (request.post_ops.empty() && contains(row.exact_ops, request.op.op_type)) return {};
      return str_cat("deterministic mode: ", row.library, "'s ", request.op.op_type, " ", row.nondeterminism);
  }
  return {};
}

// How many implementations autotune may ask backend `position` for.
int alternatives_for(int position, const KernelRequest& request, bool tuning) {
  const BackendRow& row = kBackendRows[position];
  return tuning && contains(row.tuned_ops, request.op.op_type) ? row.alternatives : 1;
}

// The choices of offers measured outside autotune, for the process (timing again would give the
// same answer up to noise), with what the timing showed, so a plan that reuses one explains it.
class MeasuredChoices {
 public:
  struct Entry {
    AutotuneChoice choice;
    std::vector<RejectedCandidate> losers;
    std::vector<TimedCandidate> timed;
  };

  std::optional<Entry> find(const std::string& key) const {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }
  void remember(const std::string& key, Entry entry) {
    std::lock_guard lock(mutex_);
    if (entries_.insert_or_assign(key, std::move(entry)).second) order_.push_back(key);
    if (order_.size() > AutotuneCache::kMaxEntries) {
      entries_.erase(order_.front());
      order_.pop_front();
    }
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
  std::deque<std::string> order_;  // oldest first
};

MeasuredChoices& measured_choices() {
  static MeasuredChoices choices;
  return choices;
}

// What identifies a node for measured_choices(): autotune's key without the thread count and the
// execution mode, so plans for other counts (run_async's, parallel branches') make the choices the
// first plan made and give the same bits (the kernels' results do not depend on the count).
std::string measured_key_of(const KernelRequest& request, std::span<const TensorInfo> outputs,
                            const Settings& settings) {
  Settings keyed = settings;
  keyed.set(SettingKey("threads"), 0);
  keyed.set(SettingKey("execution_mode"), static_cast<int>(ExecutionMode::sequential));
  return autotune_key(request, outputs, keyed);
}

// How much faster than the baseline a measured offer must be to be chosen.
constexpr double kMeasuredMargin = 0.9;

struct Offer {
  std::unique_ptr<Kernel> kernel;
  std::string note;  // the backend's, for this kernel
  Candidate candidate;
  int alternative = 0;
};

KernelOrReason create(const Candidate& candidate, const KernelRequest& request,
                      std::span<const TensorInfo> outputs, int alternative) {
  const Backend& backend = *backend_list()[candidate.backend];
  if (alternative == request.alternative && candidate.variant == request.variant)
    return backend.create_kernel(request, outputs);
  KernelRequest asked = request;
  asked.alternative = alternative;
  asked.variant = candidate.variant;
  return backend.create_kernel(asked, outputs);
}

}  // namespace

std::string build_option(std::string_view backend) {
  std::string option = str_cat("KILN_WITH_", backend);
  for (char& c : option) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return option;
}

std::string RejectedCandidate::label() const {
  return variant.empty() || variant == backend ? backend : str_cat(variant, " (", backend, ")");
}

std::string KernelSelection::refusals() const {
  std::string reasons;
  for (const RejectedCandidate& candidate : rejected) {
    reasons += str_cat(reasons.empty() ? "" : "; ", candidate.label(), ": ", candidate.reason);
  }
  return reasons;
}

std::span<const Backend* const> all_backends() {
  return backend_list();
}

int backend_index(std::string_view name) {
  for (int i = 0; i < kBackendCount; ++i) {
    if (kBackendRows[i].name == name) return i;
  }
  std::string known;
  for (const BackendRow& row : kBackendRows) known += str_cat(known.empty() ? "" : ", ", row.name);
  fail(ErrorKind::invalid_argument, "unknown backend '", name, "' (known: ", known, ")");
}

const Backend* find_backend(std::string_view name) {
  return backend_list()[backend_index(name)];
}

std::vector<int> candidate_backends(const KernelRequest& request) {
  std::vector<int> positions;
  for (int i = 0; i < kBackendCount; ++i) {
    const BackendRow& row = kBackendRows[i];
    if (row.ops.empty() || (is_default_domain(request.op.domain) && contains(row.ops, request.op.op_type)))
      positions.push_back(i);
  }
  std::stable_sort(positions.begin(), positions.end(),
                   [](int a, int b) { return kBackendRows[a].rank < kBackendRows[b].rank; });
  return positions;
}

int sdpa_kernel_backend(std::string_view name) {
  for (int i = 0; i < kBackendCount; ++i) {
    if (contains(kBackendRows[i].sdpa_kernels, name)) return i;
  }
  std::string known;
  for (std::string_view kernel : registry_data::kSdpaKernels)
    known += str_cat(known.empty() ? "" : ", ", kernel);
  fail(ErrorKind::invalid_argument, "unknown attention kernel '", name, "' (known: ", known, ")");
}

int op_family(std::string_view op_type) {
  if (op_type == "Reorder") return -1;
  for (int family = 0; family < registry_data::kOpFamilyCount; ++family) {
    const std::span<const std::string_view> ops = registry_data::kOpFamilies[family].ops;
    if (ops.empty() || contains(ops, op_type)) return family;
  }
  return -1;
}

bool has_preference(const KernelRequest& request, const Settings& settings) {
  const int family = op_family(request.op.op_type);
  return family >= 0 && settings.value(prefer_slot(family)) != 0;
}

int preference_rank(const KernelRequest& request, const Settings& settings, int backend) {
  const std::vector<Candidate> list = candidates(request, settings);
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].backend == backend && list[i].refusal.empty()) return static_cast<int>(i);
  }
  return static_cast<int>(list.size());
}

bool backend_preferred(int backend, int family, const Settings& settings) {
  if (family < 0) return true;
  const std::vector<int> preferred = priority_list(settings.value(prefer_slot(family)));
  if (preferred.empty()) return true;
  const BackendRow& row = kBackendRows[backend];
  return std::any_of(preferred.begin(), preferred.end(), [&](int choice) {
    const std::string_view name = registry_data::kKernelChoices[choice];
    return name == row.name || contains(row.sdpa_kernels, name);
  });
}

std::vector<Candidate> candidates(const KernelRequest& request, const Settings& settings) {
  std::vector<Candidate> list;
  if (request.op.op_type == kAttentionOp) {
    for (int choice : priority_list(settings.get("sdpa_kernels"))) {
      const std::string_view name = registry_data::kSdpaKernels[choice];
      list.push_back({sdpa_kernel_backend(name), name, {}});
    }
  } else {
    for (int position : candidate_backends(request)) list.push_back({position, {}, {}});
  }
  const int family = op_family(request.op.op_type);
  const std::vector<int> preferred =
      family < 0 ? std::vector<int>{} : priority_list(settings.value(prefer_slot(family)));
  if (preferred.empty()) return list;

  // Each listed name takes the candidates it names (a backend: all of its kernels, in their order).
  std::vector<Candidate> ordered;
  std::vector<bool> taken(list.size(), false);
  std::vector<Candidate> unavailable;
  for (int choice : preferred) {
    const std::string_view name = registry_data::kKernelChoices[choice];
    bool named_any = false;
    for (size_t i = 0; i < list.size(); ++i) {
      const bool named = name == kBackendRows[list[i].backend].name || name == list[i].variant;
      named_any = named_any || named;
      if (named && !taken[i]) {
        ordered.push_back(list[i]);
        taken[i] = true;
      }
    }
    // A backend the list names that has no kernel for this op at all says so.
    if (!named_any && choice < kBackendCount)
      unavailable.push_back({choice, {}, str_cat("has no kernels for ", request.op.op_type)});
  }
  const std::string setting = str_cat("prefer_", registry_data::kOpFamilies[family].name);
  const std::string listed =
      setting_value_text(setting_slots()[prefer_slot(family)], settings.value(prefer_slot(family)));
  for (size_t i = 0; i < list.size(); ++i) {
    if (taken[i]) continue;
    list[i].refusal = str_cat("not in ", setting, " (", listed, ")");
    ordered.push_back(list[i]);
  }
  ordered.insert(ordered.end(), unavailable.begin(), unavailable.end());
  return ordered;
}

FusionRule fusion_offered(std::string_view op_type, const Settings& settings) {
  FusionRule offered{op_type};
  const int family = op_family(op_type);
  for (int i = 0; i < kBackendCount; ++i) {
    if (!settings.backend_enabled(i) || !backend_list()[i]->is_built() ||
        !backend_preferred(i, family, settings))
      continue;
    for (const FusionRule& rule : kBackendRows[i].fuses) {
      if (rule.op_type != op_type) continue;
      offered.post_ops |= rule.post_ops;
      offered.folds_batch_norm = offered.folds_batch_norm || rule.folds_batch_norm;
    }
  }
  return offered;
}

KernelSelection find_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs,
                            const Settings& settings, AutotuneCache* autotune_cache) {
  KernelSelection selection;
  const bool tuning = settings.on("autotune");
  KILN_CHECK(!tuning || autotune_cache != nullptr, runtime, "autotune needs a cache to remember choices in");
  std::string tuning_key;
  if (tuning) {
    tuning_key = autotune_key(request, outputs, settings);
    if (std::optional<AutotuneChoice> choice = autotune_cache->find(tuning_key)) {
      KernelOrReason offer =
          create({choice->backend, choice->variant, {}}, request, outputs, choice->alternative);
      if (offer.kernel) {
        selection.kernel = std::move(offer.kernel);
        selection.backend = choice->backend;
        selection.note = std::move(offer.note);
        return selection;
      }
    }
  }
  // cuDNN's benchmark_limit: 0 times every candidate.
  const int limit = settings.get("autotune_limit");
  size_t wanted = !tuning ? 1 : limit == 0 ? SIZE_MAX : static_cast<size_t>(limit);
  // A first offer that asks to be measured (KernelOrReason::measure) is timed, from cold caches,
  // against its backend's alternatives and, for against_next, the next candidate's first offer
  // (under autotune too, where the limit then leaves room for that one); it never wins untimed.
  // Outside autotune the choice is remembered for the process, so identical nodes are timed once.
  // Deterministic mode takes no choice by timing.
  const bool deterministic = settings.on("deterministic");
  Measure measuring = Measure::no;
  int measured_backend = -1;
  std::string measured_key;
  std::vector<Offer> offers;
  for (const Candidate& candidate : candidates(request, settings)) {
    const int position = candidate.backend;
    const Backend& backend = *backend_list()[position];
    const std::string name(backend.name());
    const std::string variant(candidate.variant);
    if (!candidate.refusal.empty()) {
      selection.rejected.push_back({name, candidate.refusal, variant});
      continue;
    }
    if (!settings.backend_enabled(position)) {
      selection.rejected.push_back({name, "backend disabled", variant});
      continue;
    }
    if (!backend.is_built()) {
      selection.rejected.push_back(
          {name, str_cat("not built (kiln was configured with ", build_option(name), "=OFF)"), variant});
      continue;
    }
    if (!backend.is_available()) {
      selection.rejected.push_back({name, "backend not available on this machine", variant});
      continue;
    }
    // Deterministic mode refuses what the backend offers, so the recorded reason is the true one:
    // a backend with no kernel for the node says so itself.
    const std::string nondeterministic =
        settings.on("deterministic") ? deterministic_refusal(position, request) : std::string();
    int alternatives = alternatives_for(position, request, tuning);
    for (int alternative = 0; alternative < alternatives && offers.size() < wanted; ++alternative) {
      KernelOrReason offer = create(candidate, request, outputs, alternative);
      if (!offer.kernel || !nondeterministic.empty()) {
        if (alternative == 0)
          selection.rejected.push_back(
              {name, offer.kernel ? nondeterministic : std::move(offer.reason), variant});
        break;
      }
      if (offers.empty() && offer.measure != Measure::no && !deterministic) {
        measuring = offer.measure;
        measured_backend = position;
        if (!tuning) {
          // The first offer's name in the key: it says which tile comes first for these weights.
          measured_key =
              str_cat(measured_key_of(request, outputs, settings), ";first:", offer.kernel->name());
          if (std::optional<MeasuredChoices::Entry> entry = measured_choices().find(measured_key)) {
            const AutotuneChoice& choice = entry->choice;
            KernelOrReason chosen =
                choice.backend == position && choice.alternative == 0
                    ? std::move(offer)
                    : create({choice.backend, choice.variant, {}}, request, outputs, choice.alternative);
            if (chosen.kernel) {
              selection.kernel = std::move(chosen.kernel);
              selection.backend = choice.backend;
              selection.note = std::move(chosen.note);
              selection.rejected.insert(selection.rejected.end(), entry->losers.begin(), entry->losers.end());
              selection.timed = entry->timed;
              return selection;
            }
          }
          alternatives = kBackendRows[position].alternatives;
          wanted = SIZE_MAX;
        }
      }
      offers.push_back({std::move(offer.kernel), std::move(offer.note), candidate, alternative});
    }
    // After the measured backend's alternatives: room for exactly one more offer (the baseline), or none.
    if (position == measured_backend) {
      const size_t with_baseline = measuring == Measure::against_next ? offers.size() + 1 : offers.size();
      wanted = tuning ? std::max(wanted, with_baseline) : with_baseline;
    }
    if (offers.size() >= wanted) break;
  }
  if (offers.empty()) return selection;
  const bool baseline_offered = std::any_of(offers.begin(), offers.end(), [&](const Offer& offer) {
    return offer.candidate.backend != measured_backend;
  });
  if (measuring == Measure::against_next && !baseline_offered) {
    selection.rejected.push_back({std::string(backend_list()[measured_backend]->name()),
                                  "measured: no other candidate offered a kernel to time it against",
                                  std::string(offers[0].candidate.variant)});
    return selection;
  }
  size_t best = 0;
  if (offers.size() > 1) {
    // Measured offers are timed from cold caches (autotune.h says why); autotune's others are not.
    const size_t sweep_bytes = measuring != Measure::no ? kColdCacheSweepBytes : 0;
    const std::unique_ptr<char[]> sweep_storage(sweep_bytes > 0 ? new char[sweep_bytes] : nullptr);
    const std::span<char> sweep(sweep_storage.get(), sweep_bytes);
    for (const Offer& offer : offers) {
      selection.timed.push_back(
          {std::string(offer.kernel->name()),
           time_candidate(*offer.kernel, request, outputs, *offers[0].kernel, settings, sweep)});
    }
    for (size_t i = 1; i < offers.size(); ++i) {
      if (selection.timed[i].milliseconds < selection.timed[best].milliseconds) best = i;
    }
    // A measured offer must beat the baseline by a margin: a node's few timed runs are noisy, and
    // a choice that only ties costs the filters' extra memory for nothing.
    if (measuring == Measure::against_next && offers[best].candidate.backend == measured_backend) {
      for (size_t i = 0; i < offers.size(); ++i) {
        if (offers[i].candidate.backend != measured_backend &&
            selection.timed[best].milliseconds > kMeasuredMargin * selection.timed[i].milliseconds)
          best = i;
      }
    }
    for (size_t i = 0; i < offers.size(); ++i) {
      if (i == best) continue;
      selection.rejected.push_back(
          {std::string(backend_list()[offers[i].candidate.backend]->name()),
           str_cat(tuning ? "autotune: " : "measured: ", offers[i].kernel->name(), " took ",
                   selection.timed[i].milliseconds, " ms, ", offers[best].kernel->name(), " ",
                   selection.timed[best].milliseconds, " ms",
                   selection.timed[i].milliseconds < selection.timed[best].milliseconds
                       ? str_cat(" (a measured offer must take under ", kMeasuredMargin,
                                 " of the baseline's time)")
                       : ""),
           std::string(offers[i].candidate.variant)});
    }
  }
  const Candidate& chosen = offers[best].candidate;
  const AutotuneChoice choice{chosen.backend, offers[best].alternative, chosen.variant};
  if (tuning) {
    autotune_cache->remember(tuning_key, choice);
  } else if (measuring != Measure::no) {
    std::vector<RejectedCandidate> losers(
        selection.rejected.end() - static_cast<std::ptrdiff_t>(offers.size() - 1), selection.rejected.end());
    measured_choices().remember(measured_key, {choice, std::move(losers), selection.timed});
  }
  selection.backend = chosen.backend;
  selection.kernel = std::move(offers[best].kernel);
  selection.note = std::move(offers[best].note);
  return selection;
}

KernelSelection select_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs,
                              const Settings& settings, AutotuneCache* autotune_cache) {
  KernelSelection selection = find_kernel(request, outputs, settings, autotune_cache);
  KILN_CHECK(selection.kernel != nullptr, not_implemented, "no backend can run ", request.op.op_type, " (",
             selection.refusals(), ")");
  return selection;
}

KernelRequest reorder_request(const Shape& shape, DType dtype, Layout from, Layout to) {
  KernelRequest request;
  request.op.op_type = "Reorder";
  request.op.inputs = {TensorInfo{dtype, shape, {}}};
  request.input_layouts = {from};
  request.output_layouts = {to};
  return request;
}

KernelSelection select_reorder(const Shape& shape, DType dtype, Layout from, Layout to,
                               const Settings& settings) {
  const KernelRequest request = reorder_request(shape, dtype, from, to);
  const TensorInfo output{dtype, shape, {}};
  Settings untuned = settings;
  untuned.set(SettingKey("autotune"), 0);
  return find_kernel(request, std::span(&output, 1), untuned);
}

}  // namespace kiln
