// What a plan depends on besides the model: the settings that change plans (thread count
// resolved), the input shapes, and the bytes of the inputs whose values the plan binds. Every plan
// cache keys on it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backends/settings.h"
#include "core/tensor.h"

namespace kiln {

struct PlanKey {
  std::array<int32_t, kSettingSlotCount> settings{};  // Settings::plan_values()
  std::vector<Shape> shapes;                          // one per graph input
  std::vector<std::string> bound_values;              // per graph input: bytes, "" when not bound

  bool operator==(const PlanKey& other) const = default;
  // Whether a run with these plan settings and inputs, none of them value-bound, has this key;
  // checked without allocating (the recent-plan fast path of every run).
  bool matches(const std::array<int32_t, kSettingSlotCount>& plan_settings,
               std::span<const Tensor* const> inputs) const;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const;
};

}  // namespace kiln
