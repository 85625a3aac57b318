// What kernel selection decided for one node, as data: the kernel chosen, every candidate not chosen
// and why, what was timed, and the rule that decided. Plans keep it per step (explain, verbose, the
// profiler and tidy read it); the choice cache keeps it whole, so a plan that reuses a timed choice
// explains it as the plan that timed it did.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backends/base/refusal.h"

namespace kiln {

// How the chosen kernel was picked among the offers.
enum class DecisionRule : uint8_t {
  first_offer,  // the first candidate, in candidate order, that offered a kernel
  autotune,     // the fastest of the offers autotune timed (at most autotune_limit)
};
std::string_view decision_rule_name(DecisionRule rule);  // "first_offer", "autotune"

// One offer the rule timed, with the Reorder steps choosing it would add.
struct TimedCandidate {
  std::string kernel;
  double milliseconds = 0;
};

struct KernelDecision {
  // The chosen kernel: a backend (row position), one of its named kernels (attention's, else
  // empty) and which of its implementations (autotune's alternatives; 0 is its first choice).
  // backend is -1 when no candidate offered a kernel: `refusals` then says why.
  int backend = -1;
  std::string variant;
  int alternative = 0;
  std::string kernel;  // the chosen kernel's name
  DecisionRule rule = DecisionRule::first_offer;
  // Every candidate not chosen: those that offered nothing, in candidate order, then the offers the
  // rule did not choose.
  std::vector<Refusal> refusals;
  std::vector<TimedCandidate> timed;  // what the rule timed, in candidate order (empty: nothing)
  // Set when the decision came from the choice cache: an earlier plan timed these offers.
  bool reused = false;

  // "onednn: detail; native: detail", every refusal in candidate order.
  std::string refusals_text() const;
};

}  // namespace kiln
