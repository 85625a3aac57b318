#include "graph/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/events.h"
#include "graph/observer.h"
#include "graph/plan.h"
#include "graph/verbose.h"
#include "runtime/interop.h"
#include "runtime/run_control.h"
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
  context->arena = AllocatedBlock(memory.arena_bytes, "arena");
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

namespace {

// What every step of one run shares.
struct RunScope {
  const Plan& plan;
  RunContext& context;
  std::span<Observer* const> observers;
  const Settings& settings;
  bool verbose;
  const CallLog* call_log;  // non-null when verbose
  bool profiling;           // a profile was recording when the run started (core/events.h)
  uint32_t generation;      // ... and which one: the one that keeps the plan alive
  const RunControl* control;  // the caller's cancel flag and deadline, or null
};

// Stops the run before step `s` when its caller cancelled it or its deadline passed.
void check_control(const RunScope& run, size_t s) {
  if (run.control == nullptr) return;
  try {
    run.control->check("between steps");
  } catch (Error& error) {
    error.add_context(str_cat("before step ", s, " of ", run.plan.steps().size(), " ('",
                              run.plan.steps()[s].record.node_name, "')"));
    throw;
  }
}

// Binds step `s`'s inputs and outputs in the run context, runs its kernel (reporting to observers
// and verbose) and publishes its outputs, on the calling thread.
void run_step(const RunScope& run, size_t s) {
  RunContext& context = *&run.context;
  const PlanStep& step = run.plan.steps()[s];
  // From here: the outputs it allocates (a graph output's storage) are its memory events.
  std::optional<events::Scope> step_event;
  if (run.profiling) {
    step_event.emplace(
        step.record.op_type == "Reorder" ? events::EventKind::reorder : events::EventKind::step, &run.plan,
        static_cast<int64_t>(s), events::current_event(), run.generation);
  }
  std::vector<Tensor>& values = context.values;
  std::vector<Tensor>& step_inputs = context.step_inputs[s];
  std::vector<Tensor>& step_outputs = context.step_outputs[s];
  for (size_t i = 0; i < step.inputs.size(); ++i) {
    const int slot = step.inputs[i];
    if (slot >= 0 && !context.fixed[slot]) step_inputs[i] = values[slot];
  }
  if (step.kernel->sizes_outputs()) {
    // The kernel allocates them: it must not find the previous run's (a sequence may hold those).
    for (Tensor& output : step_outputs) output = Tensor{};
  } else if (!step.kernel->is_view()) {
    for (size_t o = 0; o < step_outputs.size(); ++o) {
      const int slot = step.outputs[o];
      if (slot >= 0 && context.fixed[slot]) continue;
      if (o == 0 && step.in_place_input >= 0) {
        step_outputs[o] = step_inputs[static_cast<size_t>(step.in_place_input)];
        continue;
      }
      // A graph output the run allocates: when memory runs out, the error names the step.
      try {
        step_outputs[o] = Tensor::empty(step.output_infos[o].dtype, step.output_infos[o].shape);
      } catch (Error& error) {
        error.add_context(str_cat("node '", step.record.node_name, "' (", step.record.op_type, ")"));
        throw;
      }
    }
  }
  for (Observer* observer : run.observers) observer->on_step_begin(run.plan, s);
  const bool report = run.verbose && run.settings.verbose_for(step.backend_index) >= 1;
  const auto start = report ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  try {
    const ScopedRunControl step_control(run.control);  // a subgraph's run inherits it
    const Kernel* replacement = nullptr;
    for (Observer* observer : run.observers) {
      if (const Kernel* kernel = observer->replacement(run.plan, s)) replacement = kernel;
    }
    if (replacement != nullptr) {
      replacement->run(step_inputs, step_outputs);
    } else if (context.bound[s]) {
      context.bound[s]->run(step_inputs, step_outputs);
    } else {
      step.kernel->run(step_inputs, step_outputs);
    }
  } catch (Error& error) {
    error.add_context(str_cat("node '", step.record.node_name, "' (", step.record.op_type, ")"));
    throw;
  }
  // Published inside the step's event: the previous run's output it replaces is freed here, so the
  // step's memory nets its output against the one it lets go.
  for (size_t o = 0; o < step.outputs.size(); ++o) {
    const int slot = step.outputs[o];
    if (slot >= 0 && !context.fixed[slot]) values[slot] = step_outputs[o];
  }
  step_event.reset();
  if (report) {
    report_executed_step(
        run.settings, step,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  for (Observer* observer : run.observers) observer->on_step_end(run.plan, s);
}

void run_sequentially(const RunScope& run) {
  // The run owns its settings: every kernel it runs on this thread (and the teams they start)
  // uses its thread count.
  const ScopedIntraOpThreads run_threads(run.settings.threads());
  const std::vector<PlanStep>& steps = run.plan.steps();
  for (size_t s = 0; s < steps.size(); ++s) {
    if (run.context.done[s]) continue;
    check_control(run, s);
    run_step(run, s);
    // Computed storage that is not the context's own is let go as soon as no later step reads it.
    // (The caller's inputs stay referenced: resetting them would reallocate their shape next run.)
    for (int slot : steps[s].release_after) {
      if (!run.context.fixed[slot] && run.plan.slots()[slot].origin == SlotOrigin::computed)
        run.context.values[slot] = Tensor{};
    }
  }
}

// A run in parallel execution mode. The calling thread starts every step whose predecessors are
// done while the running steps' threads fit in the capacity (a step alone always starts; one that
// planning did not let overlap counts as the whole capacity), hands
// all but one to the inter-op pool and runs that one itself. Each step is claimed once, by a pool
// thread or by the caller, who claims its own steps back instead of waiting for a busy pool: a
// run never waits for a task that has not started. Tasks hold this state by shared pointer, so one
// that finds its step already claimed after the run has returned touches nothing else.
class ParallelRun : public std::enable_shared_from_this<ParallelRun> {
 public:
  ParallelRun(const RunScope& run, int capacity)
      : run_(run),
        capacity_(capacity),
        claimed_(std::make_unique<std::atomic<bool>[]>(run.plan.steps().size())),
        pending_(run.plan.steps().size()),
        remaining_(run.plan.steps().size()) {
    const StepGraph& graph = run.plan.step_graph();
    for (size_t s = 0; s < pending_.size(); ++s) {
      pending_[s] = static_cast<int>(graph.predecessors(static_cast<int>(s)).size());
      if (pending_[s] == 0) ready_.insert(static_cast<int>(s));
    }
  }

  void execute() {
    std::unique_lock lock(mutex_);
    for (;;) {
      std::vector<int> launched = launch_ready_locked();
      if (!launched.empty()) {
        lock.unlock();
        for (size_t i = 1; i < launched.size(); ++i) {
          submit_interop_task(std::make_unique<StepTask>(shared_from_this(), launched[i]));
        }
        claimed_[launched[0]].store(true);
        run_claimed(launched[0]);
        lock.lock();
        continue;
      }
      if (const int mine = claim_submitted_locked(); mine >= 0) {
        lock.unlock();
        if (error_seen_.load()) {
          complete(mine, nullptr, /*ran=*/false);
        } else {
          run_claimed(mine);
        }
        lock.lock();
        continue;
      }
      if (running_ == 0 && (remaining_ == 0 || error_ || ready_.empty())) break;
      changed_.wait(lock);
    }
    if (error_) std::rethrow_exception(error_);
    KILN_CHECK(remaining_ == 0, runtime, "parallel run stopped with ", remaining_,
               " steps whose predecessors never finished (a cycle in the step graph)");
  }

 private:
  class StepTask final : public InteropTask {
   public:
    StepTask(std::shared_ptr<ParallelRun> run, int step) : run_(std::move(run)), step_(step) {}
    void run() override {
      if (run_->claimed_[step_].exchange(true)) return;  // the caller ran it
      run_->run_claimed(step_, this);
    }

   private:
    std::shared_ptr<ParallelRun> run_;
    int step_;
  };

  // The threads a running step counts for: its own if it may overlap others, else all of them (it
  // runs alone, as planning decided).
  int weight(int s) const {
    const PlanStep& step = run_.plan.steps()[s];
    return step.overlaps ? step.threads : capacity_;
  }

  // Ready steps that fit, in plan order, marked running; views made once at context creation
  // complete at once.
  std::vector<int> launch_ready_locked() {
    std::vector<int> launched;
    if (error_) return launched;
    for (bool progressed = true; progressed;) {
      progressed = false;
      for (auto it = ready_.begin(); it != ready_.end();) {
        const int s = *it;
        if (run_.context.done[s]) {
          it = ready_.erase(it);
          finish_locked(s);
          progressed = true;
          continue;
        }
        const int threads = weight(s);
        if (in_use_ == 0 || in_use_ + threads <= capacity_) {
          in_use_ += threads;
          ++running_;
          launched.push_back(s);
          submitted_.push_back(s);
          it = ready_.erase(it);
        } else {
          ++it;
        }
      }
    }
    // The first is run by the caller, the rest wait in submitted_ until claimed.
    if (!launched.empty()) submitted_.erase(std::find(submitted_.begin(), submitted_.end(), launched[0]));
    return launched;
  }

  // A submitted step no thread has claimed yet, now claimed by the caller; -1 if none.
  int claim_submitted_locked() {
    int mine = -1;
    std::erase_if(submitted_, [&](int s) {
      if (mine < 0 && !claimed_[s].exchange(true)) {
        mine = s;
        return true;
      }
      return claimed_[s].load();
    });
    return mine;
  }

  // Runs claimed step `s` on this thread; `task` is the pool task doing it (null on the caller's
  // thread), whose event ends before the step completes: the run, and a profile stopped right
  // after it, never miss it.
  void run_claimed(int s, const InteropTask* task = nullptr) {
    std::exception_ptr error;
    {
      std::optional<events::Scope> task_event;
      if (task != nullptr && run_.profiling)
        task_event.emplace(events::EventKind::interop_task, "parallel step", 0, task->submitted_under);
      try {
        const ScopedIntraOpThreads threads(run_.plan.steps()[s].threads);
        const ScopedCallLog call_log(run_.call_log);
        check_control(run_, static_cast<size_t>(s));
        run_step(run_, static_cast<size_t>(s));
      } catch (...) {
        error = std::current_exception();
      }
    }
    complete(s, error, /*ran=*/true);
  }

  void complete(int s, std::exception_ptr error, bool ran) {
    {
      std::lock_guard lock(mutex_);
      in_use_ -= weight(s);
      --running_;
      if (error && !error_) {
        error_ = error;
        error_seen_.store(true);
      }
      if (ran && !error) finish_locked(s);
    }
    changed_.notify_all();
  }

  void finish_locked(int s) {
    --remaining_;
    for (int next : run_.plan.step_graph().successors(s)) {
      if (--pending_[next] == 0) ready_.insert(next);
    }
  }

  const RunScope run_;
  const int capacity_;
  std::unique_ptr<std::atomic<bool>[]> claimed_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int> pending_;    // per step: predecessors not finished
  std::set<int> ready_;         // not started, every predecessor finished
  std::vector<int> submitted_;  // handed to the pool, maybe not claimed yet
  size_t remaining_;
  int in_use_ = 0;
  int running_ = 0;
  std::exception_ptr error_;
  std::atomic<bool> error_seen_{false};
};

}  // namespace

std::vector<Tensor> execute_plan(const Plan& plan, std::span<const Tensor* const> inputs,
                                 std::span<Observer* const> observers, const Settings& settings,
                                 int thread_capacity, const RunControl* control) {
  // A subgraph's run (If, Loop) stops when the run whose step started it does.
  if (control == nullptr) control = current_run_control();
  // The run's event covers all of it, a new context's arena included; the profile keeps the plan its
  // events point into alive until it has read them.
  const uint32_t generation = events::generation();  // before the flag: a later profile drops these events
  const bool profiling = events::recording();
  std::optional<events::Scope> run_event;
  if (profiling) {
    events::keep_alive(plan.shared_from_this());
    run_event.emplace(events::EventKind::run, &plan, settings.threads(), events::current_event(), generation);
  }
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
  // Checked once per run; a build without runtime verbose drops the per-step branch entirely.
  const bool verbose = kRuntimeVerboseBuilt && settings.max_verbose() >= 1;
  // Kernels log library calls to the run's sink when verbose is on.
  const VerboseCallLog call_log(settings);
  const ScopedCallLog run_call_log(verbose ? &call_log : nullptr);
  std::optional<ScopedRunLibraryVerbose> library_verbose;
  if (verbose) library_verbose.emplace(settings);
  for (Observer* observer : observers) observer->on_run_begin(plan);
  const RunScope run{plan,      *context,  observers, settings, verbose, verbose ? &call_log : nullptr,
                     profiling, generation, control};
  if (plan.parallel()) {
    const int capacity =
        thread_capacity > 0 ? std::min(thread_capacity, plan.thread_capacity()) : plan.thread_capacity();
    std::make_shared<ParallelRun>(run, capacity)->execute();
  } else {
    run_sequentially(run);
  }
  for (Observer* observer : observers) observer->on_run_end(plan);

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
