#include "runtime/thread_budget.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>

#include "core/error.h"

namespace kiln {
namespace {

struct Budget {
  std::mutex mutex;
  std::condition_variable released;
  int api = -1;  // -1: not set through the API
  int leased = 0;
  int runs = 0;     // runs holding a lease
  int waiting = 0;  // runs waiting for one
};

Budget& budget_state() {
  static Budget state;
  return state;
}

const ThreadCount& environment_budget() {
  static const ThreadCount count =
      thread_budget_from_environment([](const char* name) -> const char* { return std::getenv(name); });
  return count;
}

int budget_locked(const Budget& state) {
  return state.api >= 0 ? state.api : environment_budget().threads;
}

}  // namespace

ThreadCount thread_budget_from_environment(EnvironmentLookup lookup) {
  const char* text = lookup("KILN_THREAD_BUDGET");
  if (text != nullptr && *text != '\0') {
    if (std::string_view(text) == "0") return {0, "KILN_THREAD_BUDGET"};
    return {parse_thread_count(text, "KILN_THREAD_BUDGET"), "KILN_THREAD_BUDGET"};
  }
  return {available_cores(), "cores"};
}

void set_thread_budget(int threads) {
  KILN_CHECK(threads >= 0 && threads <= kMaxThreads, invalid_argument, "set_thread_budget(", threads,
             "): expected 0 (no budget) or a thread count in 1..", kMaxThreads);
  Budget& state = budget_state();
  {
    std::lock_guard lock(state.mutex);
    state.api = threads;
  }
  state.released.notify_all();  // a larger budget (or none) may let waiting runs start
}

int get_thread_budget() {
  Budget& state = budget_state();
  std::lock_guard lock(state.mutex);
  return budget_locked(state);
}

std::string thread_budget_source() {
  Budget& state = budget_state();
  std::lock_guard lock(state.mutex);
  return state.api >= 0 ? "api" : environment_budget().source;
}

int leased_threads() {
  Budget& state = budget_state();
  std::lock_guard lock(state.mutex);
  return state.leased;
}

ThreadLease::ThreadLease(int requested) : requested_(requested) {
  Budget& state = budget_state();
  std::unique_lock lock(state.mutex);
  const auto may_start = [&] {
    const int budget = budget_locked(state);
    return budget == 0 || state.leased == 0 || state.leased < budget;
  };
  if (!may_start()) {
    waited_ = true;
    ++state.waiting;
    state.released.wait(lock, may_start);
    --state.waiting;
  }
  budget_ = budget_locked(state);
  held_by_others_ = state.leased;
  if (budget_ == 0 || (state.leased == 0 && state.waiting == 0 && !waited_)) {
    granted_ = requested;
  } else {
    // What is left, and no more than an even share among the runs holding or waiting for threads
    // (a run that waited counts the one it waited for), so callers that keep the budget busy settle
    // on sharing it instead of taking turns with all of it.
    const int contenders = std::max(state.runs + state.waiting + 1, waited_ ? 2 : 1);
    granted_ = std::min({requested, budget_ - state.leased, std::max(1, budget_ / contenders)});
  }
  state.leased += granted_;
  ++state.runs;
}

ThreadLease::~ThreadLease() {
  Budget& state = budget_state();
  {
    std::lock_guard lock(state.mutex);
    state.leased -= granted_;
    --state.runs;
  }
  state.released.notify_all();
}

}  // namespace kiln
