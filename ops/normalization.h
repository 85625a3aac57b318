// Parameters of the normalization ops that kernels share with shape inference.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op_spec.h"

namespace kiln {

// GroupNormalization's num_groups, checked to divide the channels.
int64_t group_norm_groups(const OpSpec& spec);

// MeanVarianceNormalization: which dims the statistics are taken over (default N and the first two
// spatial dims: axes [0, 2, 3]).
std::vector<bool> mean_variance_axes(const OpSpec& spec);

}  // namespace kiln
