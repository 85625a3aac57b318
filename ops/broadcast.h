// Numpy-style (multidirectional) broadcasting, shared by binary ops, Where, Expand and friends.
#pragma once

#include <span>
#include <vector>

#include "core/tensor.h"

namespace kiln {

// The broadcast shape of `shapes`; throws invalid_argument naming both shapes when two dims differ
// and neither is 1.
Shape broadcast_shapes(std::span<const Shape> shapes);
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Strides (in elements) to read a contiguous tensor of `shape` as if it had `target` shape:
// broadcast dims get stride 0. `shape` must broadcast to `target`.
std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& target);

}  // namespace kiln
