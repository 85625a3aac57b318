#include "backends/selection.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <optional>

#include "backends/autotune.h"
#include "backends/choice_cache.h"
#include "core/error.h"
#include "ops/attention.h"
#include "ops/random.h"

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
  // Deterministic mode promises the same outputs on every run, which no backend's unseeded draw gives.
  const OpSpec& op = request.op;
  if (is_default_domain(op.domain) && is_random_op(op.op_type) && !op.attrs().has("seed")) {
    return str_cat("deterministic mode: ", op.op_type,
                   " without a seed draws new numbers on every run (give the node a seed attribute)");
  }
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

Refusal refusal_of(int position, std::string_view variant, RefusalKind kind, std::string detail) {
  return {std::string(kBackendRows[position].name), std::string(variant), kind, std::move(detail)};
}

// How many implementations backend `position` may offer for `request` when alternatives are wanted.
int alternatives_for(int position, const KernelRequest& request) {
  const BackendRow& row = kBackendRows[position];
  return contains(row.tuned_ops, request.op.op_type) ? row.alternatives : 1;
}

// Asks `backend` (with `variant`) for implementation `alternative` of `request`.
KernelOrReason create(int backend, std::string_view variant, int alternative, const KernelRequest& request,
                      std::span<const TensorInfo> outputs) {
  if (alternative == request.alternative && variant == request.variant)
    return backend_list()[backend]->create_kernel(request, outputs);
  KernelRequest asked = request;
  asked.alternative = alternative;
  asked.variant = variant;
  return backend_list()[backend]->create_kernel(asked, outputs);
}

KernelDecision chosen(const Offer& offer, DecisionRule rule, std::vector<Refusal> refusals) {
  KernelDecision decision;
  decision.backend = offer.backend;
  decision.variant = offer.variant;
  decision.alternative = offer.alternative;
  decision.kernel = std::string(offer.kernel->name());
  decision.rule = rule;
  decision.refusals = std::move(refusals);
  return decision;
}

// The first offer, or no kernel and every refusal.
KernelSelection first_offer(Offers found) {
  KernelSelection selection;
  if (found.offers.empty()) {
    selection.decision.refusals = std::move(found.refusals);
    return selection;
  }
  Offer& first = found.offers[0];
  selection.decision = chosen(first, DecisionRule::first_offer, std::move(found.refusals));
  selection.note = std::move(first.note);
  selection.kernel = std::move(first.kernel);
  return selection;
}

// Autotune's rule: times each offer (with the Reorders it implies) and keeps the fastest; the others
// are refused as slower. Offers that trade flops for memory traffic are timed, with all the others,
// from cold caches (autotune.h says why).
KernelSelection fastest(const KernelRequest& request, std::span<const TensorInfo> outputs,
                        const Settings& settings, Offers found) {
  std::vector<Offer>& offers = found.offers;
  const bool cold =
      std::any_of(offers.begin(), offers.end(), [](const Offer& offer) { return offer.cold_caches; });
  const std::unique_ptr<char[]> sweep_storage(cold ? new char[kColdCacheSweepBytes] : nullptr);
  const std::span<char> sweep(sweep_storage.get(), cold ? kColdCacheSweepBytes : 0);
  std::vector<TimedCandidate> timed;
  size_t best = 0;
  for (size_t i = 0; i < offers.size(); ++i) {
    timed.push_back(
        {std::string(offers[i].kernel->name()),
         time_candidate(*offers[i].kernel, request, outputs, *offers[0].kernel, settings, sweep)});
    if (timed[i].milliseconds < timed[best].milliseconds) best = i;
  }
  // The slower offers follow the candidates that offered nothing.
  std::vector<Refusal> refusals = std::move(found.refusals);
  for (size_t i = 0; i < offers.size(); ++i) {
    if (i == best) continue;
    refusals.push_back(
        refusal_of(offers[i].backend, offers[i].variant, RefusalKind::autotune_slower,
                   str_cat(offers[i].kernel->name(), " took ", timed[i].milliseconds, " ms, ",
                           offers[best].kernel->name(), " ", timed[best].milliseconds, " ms")));
  }
  KernelSelection selection;
  selection.decision = chosen(offers[best], DecisionRule::autotune, std::move(refusals));
  selection.decision.timed = std::move(timed);
  selection.note = std::move(offers[best].note);
  selection.kernel = std::move(offers[best].kernel);
  return selection;
}

}  // namespace

std::string build_option(std::string_view backend) {
  std::string option = str_cat("KILN_WITH_", backend);
  for (char& c : option) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return option;
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
    if (list[i].backend == backend && !list[i].refusal) return static_cast<int>(i);
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
      unavailable.push_back({choice,
                             {},
                             refusal_of(choice, {}, RefusalKind::no_kernel,
                                        str_cat("has no kernels for ", request.op.op_type))});
  }
  const std::string setting = str_cat("prefer_", registry_data::kOpFamilies[family].name);
  const std::string listed =
      setting_value_text(setting_slots()[prefer_slot(family)], settings.value(prefer_slot(family)));
  for (size_t i = 0; i < list.size(); ++i) {
    if (taken[i]) continue;
    list[i].refusal = refusal_of(list[i].backend, list[i].variant, RefusalKind::not_preferred,
                                 str_cat("not in ", setting, " (", listed, ")"));
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

namespace {

// Whether a candidate may take the node, as far as settings and the build say (not asked yet).
bool may_take(const Candidate& candidate, const KernelRequest& request, const Settings& settings) {
  const int position = candidate.backend;
  const Backend& backend = *backend_list()[position];
  return !candidate.refusal && settings.backend_enabled(position) && backend.is_built() &&
         backend.is_available() &&
         (!settings.on("deterministic") || deterministic_refusal(position, request).empty());
}

// `request` as candidate `i` of `list` is asked: with what may follow it.
void set_followers(KernelRequest& asked, const std::vector<Candidate>& list, size_t i,
                   const KernelRequest& request, const Settings& settings) {
  const auto later = list.begin() + static_cast<std::ptrdiff_t>(i) + 1;
  asked.optimized_candidate_follows = std::any_of(later, list.end(), [&](const Candidate& candidate) {
    return backend_list()[candidate.backend]->can_be_disabled() && may_take(candidate, request, settings);
  });
  asked.native_follows = std::any_of(later, list.end(), [&](const Candidate& candidate) {
    return !backend_list()[candidate.backend]->can_be_disabled() && may_take(candidate, request, settings);
  });
}

}  // namespace

ApproximateKernel approximate_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs,
                                     const Settings& settings, int chosen, int64_t weigh_factor) {
  if (settings.on("autotune") && !settings.on("deterministic")) return {};
  KernelRequest weighed = request;
  std::vector<TensorInfo> weighed_outputs(outputs.begin(), outputs.end());
  for (TensorInfo& input : weighed.op.inputs) {
    if (!input.is_constant() && !input.shape.empty()) input.shape[0] *= weigh_factor;
  }
  for (TensorInfo& output : weighed_outputs) {
    if (!output.shape.empty()) output.shape[0] *= weigh_factor;
  }
  const std::vector<Candidate> list = candidates(request, settings);
  for (size_t i = 0; i < list.size(); ++i) {
    const Candidate& candidate = list[i];
    if (may_take(candidate, request, settings)) {
      set_followers(weighed, list, i, request, settings);
      const Backend& backend = *backend_list()[candidate.backend];
      ApproximateForms forms = backend.approximate_forms(weighed, weighed_outputs);
      if (!forms.forms.empty()) {
        KernelRequest asked = request;
        set_followers(asked, list, i, request, settings);
        asked.max_error = forms.forms.front().error;
        asked.approximate_form = forms.forms.front().name;
        std::unique_ptr<Kernel> kernel = backend.create_kernel(asked, outputs).kernel;
        return {std::move(forms), std::move(kernel)};
      }
    }
    if (candidate.backend == chosen) break;
  }
  return {};
}

Offers offers(const KernelRequest& request, std::span<const TensorInfo> outputs, const Settings& settings,
              size_t wanted, bool alternatives) {
  Offers found;
  const bool deterministic = settings.on("deterministic");
  const std::vector<Candidate> list = candidates(request, settings);
  KernelRequest asked = request;
  for (size_t i = 0; i < list.size(); ++i) {
    if (found.offers.size() >= wanted) break;
    const Candidate& candidate = list[i];
    set_followers(asked, list, i, request, settings);
    const int position = candidate.backend;
    const Backend& backend = *backend_list()[position];
    const auto refuse = [&](RefusalKind kind, std::string detail) {
      found.refusals.push_back(refusal_of(position, candidate.variant, kind, std::move(detail)));
    };
    if (candidate.refusal) {
      found.refusals.push_back(*candidate.refusal);
      continue;
    }
    if (!settings.backend_enabled(position)) {
      refuse(RefusalKind::disabled, "backend disabled");
      continue;
    }
    if (!backend.is_built()) {
      refuse(RefusalKind::not_built,
             str_cat("not built (kiln was configured with ", build_option(backend.name()), "=OFF)"));
      continue;
    }
    if (!backend.is_available()) {
      refuse(RefusalKind::unavailable, "backend not available on this machine");
      continue;
    }
    // Deterministic mode refuses what the backend offers, so the recorded reason is the true one:
    // a backend with no kernel for the node says so itself.
    const std::string nondeterministic =
        deterministic ? deterministic_refusal(position, request) : std::string();
    const int count = alternatives ? alternatives_for(position, request) : 1;
    for (int alternative = 0; alternative < count && found.offers.size() < wanted; ++alternative) {
      KernelOrReason offer = create(position, candidate.variant, alternative, asked, outputs);
      if (offer.kernel && nondeterministic.empty()) {
        found.offers.push_back({std::move(offer.kernel), std::move(offer.note), position, candidate.variant,
                                alternative, offer.cold_caches});
        continue;
      }
      // A backend's first refusal is the reason it takes no part; running out of alternatives is not.
      if (alternative == 0) {
        if (offer.kernel) {
          refuse(RefusalKind::deterministic, nondeterministic);
        } else {
          refuse(offer.refusal.kind, std::move(offer.refusal.detail));
        }
      }
      break;
    }
  }
  return found;
}

KernelSelection find_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs,
                            const Settings& settings) {
  // Deterministic mode takes no choice by timing: another process could time otherwise.
  const bool tuning = settings.on("autotune") && !settings.on("deterministic");
  if (!tuning) return first_offer(offers(request, outputs, settings, 1, false));
  KernelRequest timed_request = request;
  timed_request.timed = true;
  const std::string key = choice_key(timed_request, outputs, settings);
  // A decision whose kernel cannot be created again, or is created as another implementation (oneDNN
  // numbers its alternatives by what its primitive cache holds), is timed afresh: the plan runs what
  // was timed or times what it runs.
  if (std::optional<KernelDecision> decision = choice_cache().find(key)) {
    KernelOrReason offer =
        create(decision->backend, decision->variant, decision->alternative, timed_request, outputs);
    if (offer.kernel && offer.kernel->name() == decision->kernel) {
      KernelSelection selection;
      selection.kernel = std::move(offer.kernel);
      selection.note = std::move(offer.note);
      selection.decision = std::move(*decision);
      selection.decision.reused = true;
      return selection;
    }
  }
  // cuDNN's benchmark_limit: 0 times every candidate.
  const int limit = settings.get("autotune_limit");
  Offers found =
      offers(timed_request, outputs, settings, limit == 0 ? SIZE_MAX : static_cast<size_t>(limit), true);
  // One offer has nothing to be timed against: it is chosen as untimed selection would choose (a
  // backend's own rule may refuse what it offers to be timed).
  if (found.offers.size() < 2) return first_offer(offers(request, outputs, settings, 1, false));
  KernelSelection selection = fastest(timed_request, outputs, settings, std::move(found));
  choice_cache().remember(key, selection.decision);
  return selection;
}

KernelSelection select_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs,
                              const Settings& settings) {
  KernelSelection selection = find_kernel(request, outputs, settings);
  KILN_CHECK(selection.kernel != nullptr, not_implemented, "no backend can run ", request.op.op_type, " (",
             selection.decision.refusals_text(), ")");
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

namespace {

// A plan's settings by name, as backends read them.
class TableSettingValues final : public SettingValues {
 public:
  explicit TableSettingValues(const Settings& settings) : settings_(settings) {}
  int get(std::string_view name) const override { return settings_.value(find_setting(name).slot); }

 private:
  const Settings& settings_;
};

}  // namespace

std::shared_ptr<const BackendOptionSet> read_backend_options(const Settings& settings) {
  const TableSettingValues values(settings);
  auto options = std::make_shared<BackendOptionSet>();
  for (const Backend* backend : backend_list()) options->add(backend->read_options(values));
  return options;
}

std::vector<std::string> consulted_options(const Settings& settings, std::string_view op_type,
                                           const std::vector<std::string_view>& asked) {
  std::vector<std::string> consulted;
  for (const Backend* backend : backend_list()) {
    if (!contains(asked, backend->name())) continue;
    for (const OptionSetting& option : backend->option_settings()) {
      if (!contains(option.ops, op_type)) continue;
      const SettingSlot& slot = find_setting(option.setting);
      consulted.push_back(str_cat(slot.name, "=", setting_value_text(slot, settings.value(slot.slot))));
    }
  }
  return consulted;
}

}  // namespace kiln
