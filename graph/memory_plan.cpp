#include "graph/memory_plan.h"

#include <algorithm>

#include "graph/plan.h"

namespace kiln {
namespace {

constexpr size_t kBlockAlignment = 64;

size_t aligned(size_t bytes) {
  return (bytes + kBlockAlignment - 1) / kBlockAlignment * kBlockAlignment;
}

struct Block {
  int root;
  size_t bytes;
  int first_step;  // the step that writes it
  int last_step;   // the last step reading it (or any value sharing it)
  size_t offset = 0;
  std::vector<int> users;  // parallel plans: every step writing or reading it
};

// Whether `a` and `b` may be alive at the same time. Sequentially: their step ranges overlap. In a
// parallel run steps start in any order their dependencies allow, so storage is shared only when
// every step using one block precedes the step that writes the other.
bool overlap_in_time(const Plan& plan, const Block& a, const Block& b) {
  if (!plan.parallel()) return a.first_step <= b.last_step && b.first_step <= a.last_step;
  const StepGraph& graph = plan.step_graph();
  const auto all_precede = [&](const Block& before, const Block& after) {
    return std::all_of(before.users.begin(), before.users.end(),
                       [&](int user) { return graph.precedes(user, after.first_step); });
  };
  return !all_precede(a, b) && !all_precede(b, a);
}

}  // namespace

MemoryPlan plan_memory(const Plan& plan) {
  const std::vector<Slot>& slots = plan.slots();
  const std::vector<PlanStep>& steps = plan.steps();
  MemoryPlan memory;
  memory.offset.assign(slots.size(), -1);
  memory.root.resize(slots.size());
  for (size_t s = 0; s < slots.size(); ++s) memory.root[s] = static_cast<int>(s);

  std::vector<int> producer(slots.size(), -1);
  std::vector<size_t> stored_bytes(slots.size(), 0);
  for (size_t s = 0; s < steps.size(); ++s) {
    const PlanStep& step = steps[s];
    for (size_t o = 0; o < step.outputs.size(); ++o) {
      const int slot = step.outputs[o];
      if (slot < 0) continue;
      producer[slot] = static_cast<int>(s);
      stored_bytes[slot] = static_cast<size_t>(checked_numel(step.output_infos[o].shape)) *
                           dtype_size(step.output_infos[o].dtype);
      if (step.kernel->is_view() && step.inputs.at(0) >= 0) {
        memory.root[slot] = memory.root[step.inputs[0]];
      } else if (o == 0 && step.in_place_input >= 0) {
        memory.root[slot] = memory.root[step.inputs[static_cast<size_t>(step.in_place_input)]];
      }
    }
  }
  // Lifetimes per root; roots the caller can reach are excluded.
  std::vector<int> last_use(slots.size(), -1);
  std::vector<bool> excluded(slots.size(), false);
  for (size_t s = 0; s < steps.size(); ++s) {
    for (int slot : steps[s].inputs) {
      if (slot >= 0) last_use[memory.root[slot]] = std::max(last_use[memory.root[slot]], static_cast<int>(s));
    }
    for (int slot : steps[s].outputs) {
      if (slot >= 0) last_use[memory.root[slot]] = std::max(last_use[memory.root[slot]], static_cast<int>(s));
    }
  }
  for (int slot : plan.output_slots()) excluded[memory.root[slot]] = true;

  std::vector<Block> blocks;
  std::vector<int> block_of_root(slots.size(), -1);
  for (size_t s = 0; s < slots.size(); ++s) {
    // Values a kernel allocates when it runs (sequences, run-sized tensors) have no place in the arena.
    const bool placed = memory.root[s] == static_cast<int>(s) && slots[s].origin == SlotOrigin::computed &&
                        producer[s] >= 0 && !excluded[s] &&
                        !steps[static_cast<size_t>(producer[s])].kernel->sizes_outputs();
    if (!placed) continue;
    block_of_root[s] = static_cast<int>(blocks.size());
    blocks.push_back({static_cast<int>(s), aligned(stored_bytes[s]), producer[s], last_use[s], 0, {}});
  }
  if (plan.parallel()) {
    for (size_t s = 0; s < steps.size(); ++s) {
      for (const std::vector<int>* slots_used : {&steps[s].inputs, &steps[s].outputs}) {
        for (int slot : *slots_used) {
          if (slot < 0 || block_of_root[memory.root[slot]] < 0) continue;
          std::vector<int>& users = blocks[block_of_root[memory.root[slot]]].users;
          if (users.empty() || users.back() != static_cast<int>(s)) users.push_back(static_cast<int>(s));
        }
      }
    }
  }
  // Greedy by size: each block takes the lowest offset free of every placed block it overlaps in time.
  std::sort(blocks.begin(), blocks.end(), [](const Block& a, const Block& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.first_step < b.first_step;
  });
  std::vector<const Block*> placed;
  for (Block& block : blocks) {
    std::vector<std::pair<size_t, size_t>> taken;  // [begin, end) of blocks alive at the same time
    for (const Block* other : placed) {
      if (overlap_in_time(plan, *other, block)) {
        taken.emplace_back(other->offset, other->offset + other->bytes);
      }
    }
    std::sort(taken.begin(), taken.end());
    size_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (offset + block.bytes <= begin) break;
      offset = std::max(offset, end);
    }
    block.offset = offset;
    placed.push_back(&block);
    memory.arena_bytes = std::max(memory.arena_bytes, offset + block.bytes);
    memory.peak_bytes_unshared += block.bytes;
    memory.offset[block.root] = static_cast<int64_t>(offset);
  }
  return memory;
}

}  // namespace kiln
