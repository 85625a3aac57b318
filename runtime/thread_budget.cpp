#include "runtime/thread_budget.h"

#include <algorithm>
#include <chrono>
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
  // Runs share the budget until this time: contention seen recently is expected again (callers in
  // a loop finish together, and the next to start would otherwise take every thread).
  std::chrono::steady_clock::time_point shared_until;
  std::chrono::steady_clock::duration last_run{};  // how long the last lease was held
};

// How long sharing lasts after contention was last seen: a couple of runs.
std::chrono::steady_clock::duration sharing_window(const Budget& state) {
  return std::max<std::chrono::steady_clock::duration>(std::chrono::milliseconds(10), 2 * state.last_run);
}

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

bool thread_budget_shared() {
  Budget& state = budget_state();
  std::lock_guard lock(state.mutex);
  return state.leased > 0 || state.waiting > 0 || std::chrono::steady_clock::now() < state.shared_until;
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
  start_ = std::chrono::steady_clock::now();
  const bool contended = state.leased > 0 || state.waiting > 0 || waited_;
  if (contended) state.shared_until = start_ + sharing_window(state);
  if (budget_ == 0 || (!contended && start_ >= state.shared_until)) {
    granted_ = requested;
  } else {
    // What is left, and no more than an even share among the runs holding or waiting for threads
    // (at least two while sharing), so callers that keep the budget busy settle on sharing it
    // instead of taking turns with all of it.
    const int contenders = std::max(state.runs + state.waiting + 1, 2);
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
    state.last_run = std::chrono::steady_clock::now() - start_;
  }
  state.released.notify_all();
}

}  // namespace kiln
