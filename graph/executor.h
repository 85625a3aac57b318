// Runs a plan. Each run borrows a run context from the plan's pool: an arena laid out by the
// plan's memory plan, every step's input and output tensors, and the kernels bound to them, all
// prepared on the context's first use. A run after warm-up therefore allocates only the outputs it
// hands back (and whatever a library allocates inside its own calls); concurrent runs use
// different contexts.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace kiln {

class Observer;
class Settings;
class Plan;
class RunControl;
struct RunContext;

// The run contexts a plan has created and that no run is using.
class RunContextPool {
 public:
  std::shared_ptr<RunContext> acquire(const Plan& plan);
  void release(std::shared_ptr<RunContext> context);
  size_t created() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<RunContext>> free_;
  size_t created_ = 0;
};

// Runs `plan` on `inputs` (one per graph input, already checked) and returns one tensor per graph
// output, owned by the caller. Observers, when given, see every step; `settings` is the snapshot
// the run was started with (its verbose levels decide which steps are reported). A parallel plan
// (Plan::parallel) runs independent steps at the same time on the inter-op pool, their threads
// together within `thread_capacity` (0: the plan's); observers are then called from those threads.
// `control`, when given, is checked before every step: a cancelled or expired run throws there
// (runtime/run_control.h) and the steps already running finish first.
std::vector<Tensor> execute_plan(const Plan& plan, std::span<const Tensor* const> inputs,
                                 std::span<Observer* const> observers, const Settings& settings,
                                 int thread_capacity = 0, const RunControl* control = nullptr);

}  // namespace kiln
