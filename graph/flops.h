// Arithmetic work of a plan: multiply-adds of convolutions, matrix products and recurrent layers
// counted as two FLOPs each (the convention of GFLOP/s figures); other ops are memory-bound and not counted.
#pragma once

#include <cstdint>

#include "graph/plan.h"

namespace kiln {

int64_t step_flops(const StepRecord& step);
int64_t plan_flops(const Plan& plan);

}  // namespace kiln
