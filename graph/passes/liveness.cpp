#include <algorithm>

#include "graph/passes/passes.h"

namespace kiln {

void plan_liveness(PlanState& state) {
  std::vector<int> last_reader(state.slots.size(), -1);
  for (size_t s = 0; s < state.steps.size(); ++s) {
    for (int slot : state.steps[s].inputs) {
      if (slot >= 0) last_reader[slot] = static_cast<int>(s);
    }
  }
  for (int slot : state.output_slots) last_reader[slot] = -1;
  for (size_t slot = 0; slot < last_reader.size(); ++slot) {
    if (last_reader[slot] >= 0 && state.slots[slot].origin != SlotOrigin::constant) {
      state.steps[last_reader[slot]].release_after.push_back(static_cast<int>(slot));
    }
  }
  // Slots whose storage another slot shares: views' inputs and outputs.
  std::vector<bool> shared(state.slots.size(), false);
  for (const PlanStep& step : state.steps) {
    if (!step.kernel->is_view()) continue;
    for (int slot : step.inputs) {
      if (slot >= 0) shared[slot] = true;
    }
    for (int slot : step.outputs) {
      if (slot >= 0) shared[slot] = true;
    }
  }
  // A parallel run may start a step as soon as its inputs are ready, so "the last reader in plan
  // order" is not the last to run: every other reader must be an ancestor of the in-place step.
  const bool parallel = state.settings.get("execution_mode") == static_cast<int>(ExecutionMode::parallel);
  const StepGraph graph = parallel ? StepGraph(state.steps) : StepGraph();
  const auto other_readers_precede = [&](int slot, int step) {
    for (size_t r = 0; r < state.steps.size(); ++r) {
      const std::vector<int>& inputs = state.steps[r].inputs;
      const bool reads = std::find(inputs.begin(), inputs.end(), slot) != inputs.end();
      if (reads && static_cast<int>(r) != step && !graph.precedes(static_cast<int>(r), step)) return false;
    }
    return true;
  };
  // A kernel may take over a dying input's storage for output 0 when nothing else can see it.
  for (size_t s = 0; s < state.steps.size(); ++s) {
    PlanStep& step = state.steps[s];
    const int input = step.kernel->in_place_input();
    if (input < 0 || static_cast<size_t>(input) >= step.inputs.size() || step.outputs.empty()) continue;
    const int slot = step.inputs[static_cast<size_t>(input)];
    if (slot < 0 || step.outputs[0] < 0 || shared[slot] || last_reader[slot] != static_cast<int>(s)) continue;
    if (parallel && !other_readers_precede(slot, static_cast<int>(s))) continue;
    if (state.slots[slot].origin != SlotOrigin::computed) continue;
    if (std::count(step.inputs.begin(), step.inputs.end(), slot) != 1) continue;
    const Slot& in = state.slots[slot];
    const TensorInfo& out = step.output_infos[0];
    if (stored_dtype(in.info.dtype, in.layout) != out.dtype ||
        in.layout != state.slots[step.outputs[0]].layout ||
        stored_shape(in.info.shape, in.layout) != out.shape)
      continue;
    step.in_place_input = input;
    step.record.in_place = true;
  }

  // A run starts from the constants some step or graph output reads; the others (weights copied
  // into kernels, values used only for folding) are dropped so the plan holds no reference to them.
  std::vector<bool> read_at_run_time(state.slots.size(), false);
  for (const PlanStep& step : state.steps) {
    for (int slot : step.inputs) {
      if (slot >= 0) read_at_run_time[static_cast<size_t>(slot)] = true;
    }
  }
  for (int slot : state.output_slots) read_at_run_time[static_cast<size_t>(slot)] = true;
  for (size_t i = 0; i < state.slots.size(); ++i) {
    Slot& slot = state.slots[i];
    if (slot.origin == SlotOrigin::constant && !read_at_run_time[i]) slot.info.value = Tensor{};
  }
}

}  // namespace kiln
