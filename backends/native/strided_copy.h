// Copies a strided view of `src` into contiguous `dst`: the workhorse of Slice, Transpose, Expand
// and Tile. Strides are in elements and may be zero (broadcast) or negative (reversed slices).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace kiln::native {

// dst[i0, ..., in] = src[offset + sum(ik * src_strides[k])] for every index of `shape`.
void strided_copy(void* dst, const void* src, size_t element_size, const Shape& shape,
                  const std::vector<int64_t>& src_strides, int64_t src_offset);

}  // namespace kiln::native
