#include "graph/plan_key.h"

#include <algorithm>
#include <functional>
#include <string_view>

namespace kiln {
namespace {

void mix(size_t& hash, size_t value) {
  hash ^= value + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2);
}

}  // namespace

bool PlanKey::matches(const std::array<int32_t, kSettingSlotCount>& plan_settings,
                      std::span<const Tensor* const> inputs) const {
  if (plan_settings != settings || inputs.size() != shapes.size()) return false;
  if (std::any_of(bound_values.begin(), bound_values.end(),
                  [](const std::string& v) { return !v.empty(); })) {
    return false;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i]->shape() != shapes[i]) return false;
  }
  return true;
}

size_t PlanKeyHash::operator()(const PlanKey& key) const {
  size_t hash = 0;
  for (int32_t value : key.settings) mix(hash, std::hash<int32_t>{}(value));
  for (const Shape& shape : key.shapes) {
    mix(hash, shape.size());
    for (int64_t dim : shape) mix(hash, std::hash<int64_t>{}(dim));
  }
  for (const std::string& bytes : key.bound_values) mix(hash, std::hash<std::string_view>{}(bytes));
  return hash;
}

}  // namespace kiln
