// Copies a strided view of `src` into contiguous `dst`: the workhorse of Slice, Transpose, Expand
// and Tile. Strides are in elements and may be zero (broadcast) or negative (reversed slices).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace kiln::native {

// The parallel_for cost of copying `bytes`: one unit per 32 bytes, so a copy under ~1 MiB
// (kParallelMinWork units) stays on one thread. Split between cores, a copy of values another
// kernel just wrote moves them between the cores' caches and costs more than it saves: at 2
// threads shufflenet_v2_x1_0's copies (Slice, Concat, ChannelShuffle, ~0.4 MB each) took twice
// their 1-thread time, and the model 2.1 ms instead of 1.6 with them on one thread.
inline int64_t copy_cost(int64_t bytes) {
  return bytes / 32 + 1;
}

// dst[i0, ..., in] = src[offset + sum(ik * src_strides[k])] for every index of `shape`.
void strided_copy(void* dst, const void* src, size_t element_size, const Shape& shape,
                  const std::vector<int64_t>& src_strides, int64_t src_offset);

}  // namespace kiln::native
