#include "backends/prefer.h"

#include <algorithm>

#include "backends/registry.h"
#include "backends/selection.h"
#include "core/error.h"

namespace kiln::backends {
namespace {

std::string known(std::span<const std::string_view> names) {
  std::string text;
  for (std::string_view name : names) text += str_cat(text.empty() ? "" : ", ", name);
  return text;
}

int choice_of(std::string_view name) {
  const std::span<const std::string_view> choices = registry_data::kKernelChoices;
  const auto found = std::find(choices.begin(), choices.end(), name);
  KILN_CHECK(found != choices.end(), invalid_argument, "prefer: unknown backend or kernel '", name,
             "' (known: ", known(choices), ")");
  return static_cast<int>(found - choices.begin());
}

int family_of(std::string_view name) {
  for (int family = 0; family < registry_data::kOpFamilyCount; ++family) {
    if (registry_data::kOpFamilies[family].name == name) return family;
  }
  std::vector<std::string_view> families;
  for (const registry_data::OpFamily& family : registry_data::kOpFamilies) families.push_back(family.name);
  fail(ErrorKind::invalid_argument, "prefer: unknown op family '", name, "' (known: ", known(families), ")");
}

constexpr int kMatmulFamily = 1;
static_assert(registry_data::kOpFamilies[kMatmulFamily].name == "matmul");

}  // namespace

std::vector<std::string> op_families() {
  std::vector<std::string> names;
  for (const registry_data::OpFamily& family : registry_data::kOpFamilies) names.emplace_back(family.name);
  return names;
}

Settings prefer_setting(std::span<const std::string_view> names, std::span<const std::string_view> families) {
  std::vector<int> choices;
  for (std::string_view name : names) {
    const int choice = choice_of(name);
    KILN_CHECK(std::count(choices.begin(), choices.end(), choice) == 0, invalid_argument, "prefer: '", name,
               "' is listed twice");
    choices.push_back(choice);
  }
  const int value = priority_list_value(choices);
  Settings change;
  if (families.empty()) {
    for (int family = 0; family < registry_data::kOpFamilyCount; ++family)
      change.set(prefer_slot(family), value);
  }
  for (std::string_view family : families) change.set(prefer_slot(family_of(family)), value);
  return change;
}

void set_prefer(std::span<const std::string_view> names, std::span<const std::string_view> families) {
  set_settings(prefer_setting(names, families));
}

std::vector<std::string> preferred(std::string_view family) {
  std::vector<std::string> names;
  for (int choice : priority_list(current_settings().value(prefer_slot(family_of(family)))))
    names.emplace_back(registry_data::kKernelChoices[choice]);
  return names;
}

std::string preferred_linalg_library() {
  const std::vector<int> list = priority_list(global_settings().value(prefer_slot(kMatmulFamily)));
  return list.empty() ? "default" : std::string(registry_data::kKernelChoices[list.front()]);
}

void set_preferred_linalg_library(std::string_view library) {
  if (library == "default") {
    set_settings(Settings().set(prefer_slot(kMatmulFamily), 0));
    return;
  }
  const int first = backend_index(library);  // throws, listing the backends
  std::vector<int> order = {first};
  KernelRequest product;
  product.op.op_type = "MatMul";
  for (int position : candidate_backends(product)) {
    if (position != first) order.push_back(position);
  }
  set_settings(Settings().set(prefer_slot(kMatmulFamily), priority_list_value(order)));
}

}  // namespace kiln::backends
