// How a caller stops a run it started: a cancel flag any thread may set, and a deadline. The run
// checks both before every step it starts (and before planning and after waiting for threads); a
// kernel already running finishes, so a cancelled run stops at its next step boundary with an
// Error of kind `cancelled` or `deadline_exceeded`. One control may serve many runs.
#pragma once

#include <atomic>
#include <chrono>

namespace kiln {

class RunControl {
 public:
  using Clock = std::chrono::steady_clock;

  // Safe from any thread, at any time: a run that has not started yet fails at its start.
  void cancel() noexcept { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_relaxed); }

  // Runs fail once Clock::now() passes `deadline`. May change at any time, from any thread: runs
  // see the new deadline at their next check.
  void set_deadline(Clock::time_point deadline) noexcept {
    deadline_ns_.store(deadline.time_since_epoch().count(), std::memory_order_relaxed);
  }
  void set_timeout(std::chrono::nanoseconds timeout) noexcept { set_deadline(Clock::now() + timeout); }
  bool has_deadline() const noexcept { return deadline_ns_.load(std::memory_order_relaxed) != kNoDeadline; }

  // Throws kiln::Error (cancelled or deadline_exceeded) naming `where` when the run must stop. An
  // atomic load when nothing is set; never allocates unless it throws.
  void check(const char* where) const;

 private:
  static constexpr Clock::rep kNoDeadline = Clock::time_point::max().time_since_epoch().count();
  std::atomic<bool> cancelled_{false};
  std::atomic<Clock::rep> deadline_ns_{kNoDeadline};
};

// The control of the run whose step is running on this thread (null outside a step, or for a run
// started without one): a subgraph's run (If, Loop) inherits it, and Loop checks it between
// iterations, so a deadline stops a loop that would not end by itself.
const RunControl* current_run_control() noexcept;

class ScopedRunControl {
 public:
  explicit ScopedRunControl(const RunControl* control) noexcept;
  ~ScopedRunControl();
  ScopedRunControl(const ScopedRunControl&) = delete;
  ScopedRunControl& operator=(const ScopedRunControl&) = delete;

 private:
  const RunControl* previous_;
};

}  // namespace kiln
