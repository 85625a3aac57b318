// Concurrent runs share the cores. Each run leases its intra-op threads from one process-wide
// budget (default: the cores this process may run on), so N threads calling Session::run do not
// each start a team of get_num_threads() threads. A run that starts while others hold or wait for
// threads gets what is left of the budget, at most an even share of it among those runs and at
// most what it asked for; when nothing is left it waits until a run ends. Sharing lasts a couple
// of run lengths after contention was last seen, since callers in a loop soon meet again. A run
// alone otherwise gets what it asked for (a count above the cores is the user's explicit choice). So the
// threads of runs in flight never exceed the budget, except by a lone run's own request. The budget comes
// from set_thread_budget, else KILN_THREAD_BUDGET, else the cores; 0 turns it off (every run gets what it
// asks for at once, as before kiln had a budget).
#pragma once

#include <chrono>
#include <string>

#include "runtime/threads.h"

namespace kiln {

// Throws kiln::Error (invalid_argument) outside 0..kMaxThreads.
void set_thread_budget(int threads);
// The budget in threads, or 0 when it is off (an invalid KILN_THREAD_BUDGET throws naming it).
int get_thread_budget();
// Where it came from: "api", "KILN_THREAD_BUDGET" or "cores".
std::string thread_budget_source();
// Threads leased by runs in flight now.
int leased_threads();
// True while runs share the budget (contention seen within the last couple of run lengths): a run
// alone then gets an even share, not all it asks for.
bool thread_budget_shared();

// KILN_THREAD_BUDGET (0 allowed: off), else the cores, from `lookup`.
ThreadCount thread_budget_from_environment(EnvironmentLookup lookup);

// Threads one run holds until destroyed.
class ThreadLease {
 public:
  // Leases up to `requested` threads, waiting while the budget is used up (see above).
  explicit ThreadLease(int requested);
  ~ThreadLease();
  ThreadLease(const ThreadLease&) = delete;
  ThreadLease& operator=(const ThreadLease&) = delete;

  int threads() const { return granted_; }
  int requested() const { return requested_; }
  // Threads other runs held when this one was granted, the budget then (0: off), and whether the
  // run had to wait for threads.
  int held_by_others() const { return held_by_others_; }
  int budget() const { return budget_; }
  bool waited() const { return waited_; }

 private:
  int requested_;
  int granted_;
  int held_by_others_;
  int budget_;
  bool waited_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln
