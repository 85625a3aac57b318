#include "backends/base/decision.h"

#include "core/error.h"

namespace kiln {

std::string_view decision_rule_name(DecisionRule rule) {
  return rule == DecisionRule::autotune ? "autotune" : "first_offer";
}

std::string KernelDecision::refusals_text() const {
  std::string text;
  for (const Refusal& refusal : refusals) text += str_cat(text.empty() ? "" : "; ", refusal.text());
  return text;
}

}  // namespace kiln
