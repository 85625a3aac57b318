#include "backends/base/refusal.h"

#include <array>

#include "core/error.h"

namespace kiln {
namespace {

struct KindName {
  RefusalKind kind;
  std::string_view name;
};

constexpr std::array kKindNames{
    KindName{RefusalKind::not_built, "not_built"},
    KindName{RefusalKind::disabled, "disabled"},
    KindName{RefusalKind::not_preferred, "not_preferred"},
    KindName{RefusalKind::unavailable, "unavailable"},
    KindName{RefusalKind::deterministic, "deterministic"},
    KindName{RefusalKind::no_kernel, "no_kernel"},
    KindName{RefusalKind::unsupported_dtype, "unsupported_dtype"},
    KindName{RefusalKind::unsupported_shape, "unsupported_shape"},
    KindName{RefusalKind::unsupported_attribute, "unsupported_attribute"},
    KindName{RefusalKind::unsupported_layout, "unsupported_layout"},
    KindName{RefusalKind::unsupported_fusion, "unsupported_fusion"},
    KindName{RefusalKind::not_constant, "not_constant"},
    KindName{RefusalKind::above_threshold, "above_threshold"},
    KindName{RefusalKind::above_error_bound, "above_error_bound"},
    KindName{RefusalKind::predicted_slower, "predicted_slower"},
    KindName{RefusalKind::excluded_by_setting, "excluded_by_setting"},
    KindName{RefusalKind::no_alternative, "no_alternative"},
    KindName{RefusalKind::library_refused, "library_refused"},
    KindName{RefusalKind::autotune_slower, "autotune_slower"},
};

constexpr bool names_follow_declaration_order() {
  for (size_t i = 0; i < kKindNames.size(); ++i) {
    if (static_cast<size_t>(kKindNames[i].kind) != i) return false;
  }
  return kKindNames.back().kind == RefusalKind::autotune_slower;
}
static_assert(names_follow_declaration_order(), "kKindNames lists every RefusalKind in declaration order");

constexpr std::array<RefusalKind, kKindNames.size()> kinds() {
  std::array<RefusalKind, kKindNames.size()> list{};
  for (size_t i = 0; i < kKindNames.size(); ++i) list[i] = kKindNames[i].kind;
  return list;
}
constexpr std::array kKinds = kinds();

}  // namespace

std::span<const RefusalKind> all_refusal_kinds() {
  return kKinds;
}

std::string_view refusal_kind_name(RefusalKind kind) {
  return kKindNames[static_cast<size_t>(kind)].name;
}

std::string refusal_kind_names() {
  std::string names;
  for (const KindName& entry : kKindNames) names += str_cat(names.empty() ? "" : ", ", entry.name);
  return names;
}

std::optional<RefusalKind> refusal_kind_from_name(std::string_view name) {
  for (const KindName& entry : kKindNames) {
    if (entry.name == name) return entry.kind;
  }
  return std::nullopt;
}

std::string Refusal::label() const {
  return variant.empty() || variant == backend ? backend : str_cat(variant, " (", backend, ")");
}

std::string Refusal::text() const {
  return str_cat(label(), ": ", detail);
}

}  // namespace kiln
