// Seeded random data for model inputs the user did not supply (`kiln run`, `kiln bench`).
#pragma once

#include <random>

#include "graph/graph.h"

namespace kiln {

inline constexpr uint32_t kRandomInputSeed = 0;

// A tensor of the declared dtype and shape, symbolic or unknown dims set to `symbolic_size`:
// floats uniform in [-1, 1), integers in [0, 9], booleans fair coin flips.
Tensor random_input(const ValueInfo& info, int64_t symbolic_size, std::mt19937& rng);

}  // namespace kiln
