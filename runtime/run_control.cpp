#include "runtime/run_control.h"

#include "core/error.h"

namespace kiln {

void RunControl::check(const char* where) const {
  if (cancelled()) fail(ErrorKind::cancelled, "the run was cancelled (stopped ", where, ")");
  const Clock::rep deadline = deadline_ns_.load(std::memory_order_relaxed);
  if (deadline == kNoDeadline) return;
  const Clock::rep now = Clock::now().time_since_epoch().count();
  if (now > deadline) {
    const double late_ms = std::chrono::duration<double, std::milli>(Clock::duration(now - deadline)).count();
    fail(ErrorKind::deadline_exceeded, "the run's deadline passed ", late_ms, " ms ago (stopped ", where, ")");
  }
}

namespace {
thread_local const RunControl* current_control = nullptr;
}  // namespace

const RunControl* current_run_control() noexcept {
  return current_control;
}

ScopedRunControl::ScopedRunControl(const RunControl* control) noexcept : previous_(current_control) {
  current_control = control;
}

ScopedRunControl::~ScopedRunControl() {
  current_control = previous_;
}

}  // namespace kiln
