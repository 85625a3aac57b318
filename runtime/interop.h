// kiln's second level of threads (the first, intra-op, is parallel.h): one process-wide pool that
// runs whole tasks. Asynchronous runs (Session::run_async), the independent branches of a plan in
// parallel execution mode and whatever callers hand to kiln::fork all share it, so a process never
// holds more inter-op threads than one count says. That count is fixed when the pool starts (its
// first task): set_num_interop_threads, else KILN_NUM_INTEROP_THREADS, else the cores this process
// may run on. Setting it afterwards is an error, as in PyTorch: threads already started cannot be
// taken back from tasks that may be running on them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "core/events.h"
#include "runtime/future.h"
#include "runtime/threads.h"

namespace kiln {

// Sets the pool's size. Throws kiln::Error: invalid_argument outside 1..kMaxThreads, runtime once
// the pool has started.
void set_num_interop_threads(int threads);
// The pool's size, started or not (reads the environment on first use; an invalid
// KILN_NUM_INTEROP_THREADS throws naming it).
int get_num_interop_threads();
// Where that count came from: "api", "KILN_NUM_INTEROP_THREADS" or "cores".
std::string num_interop_threads_source();
// True once the pool has run (or been given) its first task.
bool interop_pool_started();
// True on one of the pool's threads.
bool on_interop_thread();

// KILN_NUM_INTEROP_THREADS, else the cores, from `lookup` (as thread_count_from_environment).
ThreadCount interop_thread_count_from_environment(EnvironmentLookup lookup);

// A unit of work for the pool. Tasks must not throw (fork's wrapper stores exceptions in the future).
class InteropTask {
 public:
  virtual ~InteropTask() = default;
  virtual void run() = 0;

  // The profiler's event for running this task, opened by run() when it does work and ended before
  // the task signals that it is done (a caller that stops a profile once its wait returns must find
  // it). Its parent is the event that was current where the task was submitted, so a task sits
  // under the run or annotation that queued it. `name` is a static string.
  events::Scope event(const char* name) const {
    return events::Scope(events::EventKind::interop_task, name, 0, submitted_under);
  }
  uint64_t submitted_under = 0;  // set by submit_interop_task
};

// Queues `task` on the pool, starting the pool first if this is its first task.
void submit_interop_task(std::unique_ptr<InteropTask> task);
// Runs one queued task on the calling thread, if any is queued; true if it ran one. A thread
// waiting for inter-op work calls it instead of blocking, so waiting never starves the pool.
bool run_one_interop_task();

namespace detail {

template <typename Fn, typename T>
class ForkTask final : public InteropTask {
 public:
  ForkTask(Fn fn, std::shared_ptr<FutureState<T>> state, const char* name)
      : fn_(std::move(fn)), state_(std::move(state)), name_(name) {}

  void run() override {
    std::exception_ptr error;
    std::optional<FutureValue<T>> value;
    {
      // Ends before the future is ready: a caller that stops a profile once wait() returns finds it.
      const events::Scope task_event = event(name_);
      try {
        if constexpr (std::is_void_v<T>) {
          (*fn_)();
          value.emplace();
        } else {
          value.emplace((*fn_)());
        }
      } catch (...) {
        error = std::current_exception();
      }
      // What the function holds (a run's inputs, a caller's keep-alive) is released before the
      // future is ready: once wait() returns, the task no longer references anything of the caller's.
      fn_.reset();
    }
    if (error) {
      state_->fail(error);
    } else {
      state_->complete(std::move(*value));
    }
  }

 private:
  std::optional<Fn> fn_;
  std::shared_ptr<FutureState<T>> state_;
  const char* name_;
};

}  // namespace detail

// Runs fn() on the inter-op pool (TorchScript's fork): the future holds its result or exception.
// `name` (a static string) names the task's event in profiles.
template <typename Fn>
auto fork(Fn fn, const char* name = "fork") -> Future<std::invoke_result_t<Fn&>> {
  using T = std::invoke_result_t<Fn&>;
  auto state = std::make_shared<detail::FutureState<T>>();
  submit_interop_task(std::make_unique<detail::ForkTask<Fn, T>>(std::move(fn), state, name));
  return Future<T>(std::move(state));
}

// Waits for `future` and returns its result or rethrows its exception (TorchScript's wait).
template <typename T>
T wait(const Future<T>& future) {
  return future.wait();
}

}  // namespace kiln
