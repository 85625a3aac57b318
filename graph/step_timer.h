// Per-step wall times of a session's runs, measured by an observer: what `kiln explain --profile`
// shows and what tidy's estimates compare with a fix applied.
#pragma once

#include <vector>

#include "graph/session.h"

namespace kiln {

// Each of `plan`'s steps' median wall time over `runs` runs of `inputs` (after one warm-up run), in
// ms; empty for 0 runs. `plan` is the session's plan for those inputs (the runs use its thread count).
std::vector<double> profile_steps(Session& session, const TensorMap& inputs, const Plan& plan, int runs);

}  // namespace kiln
