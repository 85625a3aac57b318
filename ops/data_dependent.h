// Ops whose output size depends on the input values: NonZero, Compress, Unique, NonMaxSuppression.
// Shape inference gives an upper bound (or the exact shape when the deciding input is a plan-time
// constant); their kernels allocate outputs of the size they find (Kernel::sizes_outputs).
#pragma once

#include <cstdint>
#include <optional>

#include "ops/op_spec.h"

namespace kiln {

// Compress: the axis it selects along, or none (the input flattened).
std::optional<int64_t> compress_axis(const OpSpec& spec);

// Unique: the axis whose slices are compared, or none (elements of the input flattened).
std::optional<int64_t> unique_axis(const OpSpec& spec);

}  // namespace kiln
