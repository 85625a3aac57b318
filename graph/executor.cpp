#include "graph/executor.h"

#include <chrono>
#include <optional>

#include "core/error.h"
#include "graph/observer.h"
#include "graph/plan.h"
#include "graph/verbose.h"
#include "runtime/threads.h"

#ifndef KILN_RUNTIME_VERBOSE
#define KILN_RUNTIME_VERBOSE 1
#endif

namespace kiln {

// Off only in builds made to measure what verbose costs when it is off (see docs/backends.md).
constexpr bool kRuntimeVerboseBuilt = KILN_RUNTIME_VERBOSE != 0;

struct RunContext {
  AllocatedBlock arena;                          // from the current allocator, 64-byte aligned
  std::vector<Tensor> values;                    // per slot
  std::vector<std::vector<Tensor>> step_inputs;  // per step, kept between runs (no reallocation)
  std::vector<std::vector<Tensor>> step_outputs;
  std::vector<std::unique_ptr<BoundKernel>> bound;  // per step; null: run the plan's kernel
  std::vector<bool> fixed;                          // per slot: storage set once (arena, constant)
  std::vector<bool> done;                           // per step: a view of fixed storage, made once
};

namespace {

std::shared_ptr<RunContext> create_context(const Plan& plan) {
  const MemoryPlan& memory = plan.memory_plan();
  const std::vector<PlanStep>& steps = plan.steps();
  auto context = std::make_shared<RunContext>();
  context->arena = AllocatedBlock(memory.arena_bytes);
  char* arena = static_cast<char*>(context->arena.data());
  context->values = plan.initial_values();
  context->fixed.assign(plan.slots().size(), false);
  for (size_t s = 0; s < plan.slots().size(); ++s) {
    const Slot& slot = plan.slots()[s];
    context->fixed[s] = slot.origin == SlotOrigin::constant;
    // Values set per run (inputs, outputs) are assigned into tensors of their final shape, so even
    // a context's first run only copies shapes into existing vectors; these hold no data.
    if (!context->fixed[s]) {
      context->values[s] = Tensor::wrap(nullptr, stored_dtype(slot.info.dtype, slot.layout),
                                        stored_shape(slot.info.shape, slot.layout));
    }
  }
  context->step_inputs.resize(steps.size());
  context->step_outputs.resize(steps.size());
  context->bound.resize(steps.size());
  context->done.assign(steps.size(), false);

  for (size_t s = 0; s < steps.size(); ++s) {
    const PlanStep& step = steps[s];
    std::vector<Tensor>& inputs = context->step_inputs[s];
    std::vector<Tensor>& outputs = context->step_outputs[s];
    bool inputs_fixed = true;
    for (int slot : step.inputs) {
      inputs.push_back(slot >= 0 ? context->values[slot] : Tensor{});
      if (slot >= 0 && !context->fixed[slot]) inputs_fixed = false;
    }
    outputs.resize(step.output_infos.size());
    if (step.kernel->is_view()) {
      // A view of storage that never changes is made once, here.
      if (!inputs_fixed) continue;
      step.kernel->run(inputs, outputs);
      context->done[s] = true;
    } else {
      for (size_t o = 0; o < step.outputs.size(); ++o) {
        const int slot = step.outputs[o];
        if (slot < 0) continue;
        const int root = memory.root[slot];
        const TensorInfo& info = step.output_infos[o];
        if (memory.offset[root] >= 0) {
          outputs[o] = Tensor::wrap(arena + memory.offset[root], info.dtype, info.shape);
        } else if (root != slot && context->fixed[root]) {
          outputs[o] = Tensor::wrap(context->values[root].raw_data(), info.dtype, info.shape);  // in place
        } else {
          continue;
        }
        context->fixed[slot] = true;
      }
      context->bound[s] = step.kernel->bind(inputs, outputs);
    }
    for (size_t o = 0; o < step.outputs.size(); ++o) {
      if (step.outputs[o] >= 0 && (context->done[s] || context->fixed[step.outputs[o]])) {
        context->values[step.outputs[o]] = outputs[o];
        context->fixed[step.outputs[o]] = true;
      }
    }
  }
  return context;
}

}  // namespace

std::shared_ptr<RunContext> RunContextPool::acquire(const Plan& plan) {
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      std::shared_ptr<RunContext> context = std::move(free_.back());
      free_.pop_back();
      return context;
    }
    ++created_;
  }
  return create_context(plan);
}

void RunContextPool::release(std::shared_ptr<RunContext> context) {
  std::lock_guard lock(mutex_);
  free_.push_back(std::move(context));
}

size_t RunContextPool::created() const {
  std::lock_guard lock(mutex_);
  return created_;
}

std::vector<Tensor> execute_plan(const Plan& plan, std::span<const Tensor* const> inputs,
                                 std::span<Observer* const> observers, const Settings& settings) {
  RunContextPool& pool = plan.context_pool();
  std::shared_ptr<RunContext> context = pool.acquire(plan);
  // The context goes back to the pool however the run ends.
  struct ReturnToPool {
    RunContextPool& pool;
    std::shared_ptr<RunContext>& context;
    ~ReturnToPool() { pool.release(std::move(context)); }
  } return_to_pool{pool, context};

  std::vector<Tensor>& values = context->values;
  for (size_t i = 0; i < inputs.size(); ++i) values[plan.input_slots()[i]] = *inputs[i];
  const bool observed = !observers.empty();
  // Checked once per run; a build without runtime verbose drops the per-step branch entirely.
  const bool verbose = kRuntimeVerboseBuilt && settings.max_verbose() >= 1;
  // The run owns its settings: every kernel it runs on this thread (and the teams they start)
  // uses its thread count, and logs library calls to its sink when verbose is on.
  const ScopedIntraOpThreads run_threads(settings.threads());
  const VerboseCallLog call_log(settings);
  const ScopedCallLog run_call_log(verbose ? &call_log : nullptr);
  std::optional<ScopedRunLibraryVerbose> library_verbose;
  if (verbose) library_verbose.emplace(settings);
  if (observed) {
    for (Observer* observer : observers) observer->on_run_begin(plan);
  }
  const std::vector<PlanStep>& steps = plan.steps();
  for (size_t s = 0; s < steps.size(); ++s) {
    if (context->done[s]) continue;
    const PlanStep& step = steps[s];
    std::vector<Tensor>& step_inputs = context->step_inputs[s];
    std::vector<Tensor>& step_outputs = context->step_outputs[s];
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      const int slot = step.inputs[i];
      if (slot >= 0 && !context->fixed[slot]) step_inputs[i] = values[slot];
    }
    if (!step.kernel->is_view()) {
      for (size_t o = 0; o < step_outputs.size(); ++o) {
        const int slot = step.outputs[o];
        if (slot >= 0 && context->fixed[slot]) continue;
        step_outputs[o] = (o == 0 && step.in_place_input >= 0)
                              ? step_inputs[static_cast<size_t>(step.in_place_input)]
                              : Tensor::empty(step.output_infos[o].dtype, step.output_infos[o].shape);
      }
    }
    if (observed) {
      for (Observer* observer : observers) observer->on_step_begin(plan, s);
    }
    const bool report = verbose && settings.verbose_for(step.backend_index) >= 1;
    const auto start = report ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    try {
      if (context->bound[s]) {
        context->bound[s]->run(step_inputs, step_outputs);
      } else {
        step.kernel->run(step_inputs, step_outputs);
      }
    } catch (Error& error) {
      error.add_context(str_cat("node '", step.record.node_name, "' (", step.record.op_type, ")"));
      throw;
    }
    if (report) {
      report_executed_step(
          settings, step,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    if (observed) {
      for (Observer* observer : observers) observer->on_step_end(plan, s);
    }
    for (size_t o = 0; o < step.outputs.size(); ++o) {
      const int slot = step.outputs[o];
      if (slot >= 0 && !context->fixed[slot]) values[slot] = step_outputs[o];
    }
    // Computed storage that is not the context's own is let go as soon as no later step reads it.
    // (The caller's inputs stay referenced: resetting them would reallocate their shape next run.)
    for (int slot : step.release_after) {
      if (!context->fixed[slot] && plan.slots()[slot].origin == SlotOrigin::computed) values[slot] = Tensor{};
    }
  }
  if (observed) {
    for (Observer* observer : observers) observer->on_run_end(plan);
  }

  std::vector<Tensor> outputs;
  outputs.reserve(plan.output_slots().size());
  for (int slot : plan.output_slots()) {
    // Constants, views of the caller's inputs and context storage must not be handed out.
    const bool shared = plan.slots()[slot].origin != SlotOrigin::computed || context->fixed[slot];
    outputs.push_back(shared ? values[slot].clone() : values[slot]);
  }
  // The context keeps its references to this run's inputs and outputs until its next run: dropping
  // them now would make the next run reallocate the tensors' shape vectors.
  return outputs;
}

}  // namespace kiln
