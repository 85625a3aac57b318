// Static memory planning: every intermediate value of a plan gets a fixed byte range in one arena
// per run, reused by values whose lifetimes do not overlap. Values that share storage (views,
// in-place outputs) are placed as one block living as long as the last of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln {

class Plan;

struct MemoryPlan {
  size_t arena_bytes = 0;
  std::vector<int64_t> offset;     // per slot: byte offset in the arena, or -1 (constant, graph input,
                                   // a value handed to the caller, or one sharing another's storage)
  std::vector<int> root;           // per slot: the slot whose storage it shares (itself if none)
  size_t peak_bytes_unshared = 0;  // sum of all placed blocks: what per-value allocation would hold
};

// Values reachable by the caller (graph outputs, and anything sharing storage with one) stay out of
// the arena: they are allocated per run and handed over.
MemoryPlan plan_memory(const Plan& plan);

}  // namespace kiln
