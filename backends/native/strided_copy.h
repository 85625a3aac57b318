// Copies a strided view of `src` into contiguous `dst`: the workhorse of Slice, Transpose, Expand
// and Tile. Strides are in elements and may be zero (broadcast) or negative (reversed slices).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace kiln::native {

// The parallel_for cost of copying `bytes`: one unit per 4 bytes, so copies from 256 KiB up
// (2 x kParallelMinWork units) are split between two threads. Raising that to ~2 MiB (one unit per
// 32 bytes) was measured at 2 threads, alternating binaries, 3 rounds: shufflenet_v2_x1_0
// 2.17 -> 2.01 ms, but squeezenet1_1 2.69 -> 2.99 and googlenet 9.26 -> 9.54, so copies keep this
// threshold.
inline int64_t copy_cost(int64_t bytes) {
  return bytes / 4 + 1;
}

// dst[i0, ..., in] = src[offset + sum(ik * src_strides[k])] for every index of `shape`.
void strided_copy(void* dst, const void* src, size_t element_size, const Shape& shape,
                  const std::vector<int64_t>& src_strides, int64_t src_offset);

}  // namespace kiln::native
