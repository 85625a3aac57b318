// Parallel execution mode's planning: which fork-join groups run their branches at the same time.
// Overlapping branches only pays where a step on fewer threads loses less than the overlap gains,
// which depends on the shapes and the machine, so it is measured: every step of a group is timed
// with the kernel made for the run's threads and the one made for fewer, on the same random
// inputs, and the group is scheduled both ways from those times. oneDNN creates a primitive for a
// thread count (and libgomp keeps one team per calling thread), so a step that runs on fewer threads
// runs the kernel planned for that count; one whose outputs differ in any bit keeps the run's count,
// so a parallel run's outputs are those of a sequential run.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "graph/passes/passes.h"
#include "runtime/threads.h"

namespace kiln {
namespace {

// A group's steps must gain at least this much from overlapping to run in parallel: the times
// are measured once, at plan time, on a machine that may be busy.
constexpr double kRequiredGain = 0.9;
constexpr int kTimedRuns = 3;

struct StepTiming {
  double full_ms = 0;
  double reduced_ms = 0;
  bool same_bits = true;
  std::string note;  // why it keeps the run's count
};

// Random values of a stored dtype: floats in [-1, 1) (bf16: their upper halves), zeros otherwise
// (valid indices, shapes and flags for the ops that read integers).
Tensor random_tensor(DType dtype, const Shape& shape, std::mt19937& random) {
  Tensor tensor = Tensor::zeros(dtype, shape);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  if (dtype == DType::f32) {
    float* data = tensor.data<float>();
    for (int64_t i = 0; i < tensor.numel(); ++i) data[i] = uniform(random);
  } else if (dtype == DType::bf16) {
    auto* data = static_cast<uint16_t*>(tensor.raw_data());
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      const float value = uniform(random);
      uint32_t bits = 0;
      std::memcpy(&bits, &value, sizeof bits);
      data[i] = static_cast<uint16_t>(bits >> 16);
    }
  }
  return tensor;
}

// The fastest of kTimedRuns runs after one warm-up, in milliseconds, on `threads` threads.
double time_kernel(const Kernel& kernel, int threads, std::span<const Tensor> inputs,
                   std::span<Tensor> outputs) {
  const ScopedIntraOpThreads scoped(threads);
  kernel.run(inputs, outputs);
  double best = std::numeric_limits<double>::infinity();
  for (int run = 0; run < kTimedRuns; ++run) {
    const auto start = std::chrono::steady_clock::now();
    kernel.run(inputs, outputs);
    best = std::min(
        best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

bool same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].nbytes() != b[i].nbytes() || std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].nbytes()) != 0)
      return false;
  }
  return true;
}

StepTiming measure_step(const PlanState& full, const PlanStep& step, const PlanStep& reduced,
                        int reduced_threads, std::mt19937& random) {
  StepTiming timing;
  if (step.kernel->is_view()) return timing;  // no work, no threads
  std::vector<Tensor> inputs;
  for (int slot : step.inputs) {
    if (slot < 0) {
      inputs.emplace_back();
      continue;
    }
    const Slot& value = full.slots[slot];
    inputs.push_back(value.origin == SlotOrigin::constant && value.info.value.defined()
                         ? value.info.value
                         : random_tensor(stored_dtype(value.info.dtype, value.layout),
                                         stored_shape(value.info.shape, value.layout), random));
  }
  const auto fresh_outputs = [&] {
    std::vector<Tensor> outputs;
    for (const TensorInfo& info : step.output_infos) outputs.push_back(Tensor::zeros(info.dtype, info.shape));
    return outputs;
  };
  std::vector<Tensor> full_outputs = fresh_outputs();
  std::vector<Tensor> reduced_outputs = fresh_outputs();
  try {
    timing.full_ms = time_kernel(*step.kernel, step.threads, inputs, full_outputs);
    timing.reduced_ms = time_kernel(*reduced.kernel, reduced_threads, inputs, reduced_outputs);
  } catch (const Error& error) {
    timing.same_bits = false;
    timing.note =
        str_cat("keeps ", step.threads, " threads: could not be timed on random inputs (", error.what(), ")");
    return timing;
  }
  if (!same_bits(full_outputs, reduced_outputs)) {
    timing.same_bits = false;
    timing.note = str_cat("keeps ", step.threads, " threads: on ", reduced_threads, " its kernel (",
                          reduced.record.kernel, ") computes different bits");
  }
  return timing;
}

// The time a parallel run takes for `group` alone: steps start in plan order as their
// predecessors in the group finish, while their threads fit in `capacity` (a step alone always
// starts; one that may not overlap counts as the whole capacity): the executor's rule
// (graph/executor.cpp).
double simulate(const StepGraph& graph, const std::vector<int>& group, const std::vector<double>& ms,
                const std::vector<int>& threads, int capacity) {
  std::vector<int> pending(graph.size(), 0);
  std::vector<bool> member(graph.size(), false);
  for (int s : group) member[s] = true;
  std::set<int> ready;
  for (int s : group) {
    for (int before : graph.predecessors(s)) pending[s] += member[before] ? 1 : 0;
    if (pending[s] == 0) ready.insert(s);
  }
  std::multimap<double, int> running;  // end time -> step
  int in_use = 0;
  double now = 0;
  for (;;) {
    for (auto it = ready.begin(); it != ready.end();) {
      if (in_use == 0 || in_use + threads[*it] <= capacity) {
        in_use += threads[*it];
        running.emplace(now + ms[*it], *it);
        it = ready.erase(it);
      } else {
        ++it;
      }
    }
    if (running.empty()) return now;
    const auto [end, step] = *running.begin();
    running.erase(running.begin());
    now = end;
    in_use -= threads[step];
    for (int next : graph.successors(step)) {
      if (member[next] && --pending[next] == 0) ready.insert(next);
    }
  }
}

// Why `reduced` cannot lend its kernels to `full`, or "" when both plans have the same steps.
std::string structure_difference(const PlanState& full, const PlanState& reduced) {
  if (full.steps.size() != reduced.steps.size())
    return str_cat(full.steps.size(), " steps on ", full.settings.threads(), " threads, ",
                   reduced.steps.size(), " on ", reduced.settings.threads());
  for (size_t s = 0; s < full.steps.size(); ++s) {
    const PlanStep& a = full.steps[s];
    const PlanStep& b = reduced.steps[s];
    if (a.inputs != b.inputs || a.outputs != b.outputs || a.in_place_input != b.in_place_input ||
        a.record.node_name != b.record.node_name || a.record.op_type != b.record.op_type) {
      return str_cat("step ", s, " ('", a.record.node_name, "') differs");
    }
  }
  return "";
}

}  // namespace

void plan_parallel_groups(PlanState& full, PlanState& reduced) {
  const int threads = full.settings.threads();
  const int reduced_threads = reduced.settings.threads();
  const int capacity = std::max(threads, available_cores());
  if (capacity < 2) {
    full.parallel_summary = "one thread and one core: branches cannot overlap";
    return;
  }
  if (const std::string difference = structure_difference(full, reduced); !difference.empty()) {
    full.parallel_summary = str_cat("the plan on ", reduced_threads, " threads differs from the one on ",
                                    threads, " (", difference, "): every step keeps ", threads, " threads");
    return;
  }
  const StepGraph graph(full.steps);
  const std::vector<std::vector<int>> groups = graph.fork_join_groups();
  if (groups.empty()) {
    full.parallel_summary = "no branches: the graph is a chain";
    return;
  }
  std::mt19937 random(20261123);
  std::vector<std::optional<StepTiming>> timings(full.steps.size());
  std::vector<bool> reduced_step(full.steps.size(), false);
  for (const std::vector<int>& steps : groups) {
    // A group inside one already running in parallel has nothing left to decide.
    if (std::any_of(steps.begin(), steps.end(), [&](int s) { return reduced_step[s]; })) continue;
    std::vector<double> ms(full.steps.size(), 0);
    std::vector<int> step_threads(full.steps.size(), capacity);
    ParallelGroup group{.steps = steps, .reduced_threads = reduced_threads};
    for (int s : steps) {
      if (!timings[s])
        timings[s] = measure_step(full, full.steps[s], reduced.steps[s], reduced_threads, random);
      group.sequential_ms += timings[s]->full_ms;
      ms[s] = timings[s]->same_bits ? timings[s]->reduced_ms : timings[s]->full_ms;
      step_threads[s] = timings[s]->same_bits ? reduced_threads : capacity;  // a kept step runs alone
    }
    group.parallel_ms = simulate(graph, steps, ms, step_threads, capacity);
    group.parallel = group.parallel_ms < kRequiredGain * group.sequential_ms;
    const int index = static_cast<int>(full.parallel_groups.size());
    for (int s : steps) {
      PlanStep& step = full.steps[s];
      // The outermost group names a step, unless an inner one lets it overlap.
      if (step.record.parallel_group < 0 || group.parallel) step.record.parallel_group = index;
      if (!group.parallel) continue;
      if (!timings[s]->same_bits) {
        step.record.parallel_note = timings[s]->note;
        continue;
      }
      reduced_step[s] = true;
      if (&full != &reduced) {
        PlanStep& lender = reduced.steps[s];
        step.kernel = std::move(lender.kernel);
        step.record.kernel = lender.record.kernel;
        step.record.creation_ms += lender.record.creation_ms;
      }
      step.threads = step.record.threads = reduced_threads;
      step.overlaps = true;
    }
    full.parallel_groups.push_back(std::move(group));
  }
}

}  // namespace kiln
