// The one way kernels use threads: split [begin, end) into chunks and run fn(chunk_begin, chunk_end)
// on kiln's intra-op threads (OpenMP, the runtime oneDNN uses here, so there is one pool).
// `cost_per_item` is a rough count of scalar operations per index; small loops run inline on the
// caller, because waking a team costs more than they do. Kernels never call OpenMP themselves.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln {

// Below this many operations in total a loop runs on the calling thread.
inline constexpr int64_t kParallelMinWork = 32 * 1024;

using RangeFn = std::function<void(int64_t begin, int64_t end)>;

void parallel_for(int64_t begin, int64_t end, int64_t cost_per_item, const RangeFn& fn);

// Threads parallel_for would use for `work` operations (1 when it would run inline).
int threads_for_work(int64_t work);

// True while the calling thread is inside a parallel_for body (nested loops then run inline).
bool in_parallel_region();

}  // namespace kiln
