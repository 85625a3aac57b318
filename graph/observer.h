// Observers watch a run step by step (the step timer of `kiln explain --profile` is one). The
// executor calls them only when at least one is attached; with none the cost is a branch before and
// after each step. Runtime verbose is not an observer: the executor reads the run's settings
// snapshot and writes verbose lines itself (graph/verbose.h). Nor is the profiler: the executor
// writes its events into per-thread buffers (core/events.h), with no virtual call per step.
#pragma once

#include <cstddef>

namespace kiln {

class Kernel;
class Plan;

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_run_begin(const Plan& plan) {}
  // `step` indexes plan.steps(); its static record (node, kernel, shapes) is plan.steps()[step].record.
  virtual void on_step_begin(const Plan& plan, size_t step) {}
  virtual void on_step_end(const Plan& plan, size_t step) {}
  // A kernel to run instead of the step's own, or null. Planning's error budget runs one step on a
  // less accurate kernel (same layouts, same in-place input) to measure how far the outputs move.
  virtual const Kernel* replacement(const Plan& plan, size_t step) { return nullptr; }
  virtual void on_run_end(const Plan& plan) {}
};

}  // namespace kiln
