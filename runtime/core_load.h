// How many of this process's cores other processes keep busy. libgomp's and oneDNN's work splits
// are static, so a run on every core waits at each barrier for the thread whose core another
// process holds: on a 2-core machine with one core busy elsewhere, 2 threads take longer than 1.
// Runs whose thread count is kiln's default (the cores) ask here how many cores are free and run
// with that many (the adapt_to_load setting, graph/session.cpp).
//
// The measure: over a window of at least kLoadWindow, the busy time of this process's cores in
// /proc/stat (time a hypervisor stole counts as busy) minus this process's own CPU time (getrusage)
// is what other processes used. A core counts as lost from half a core's worth of such use. A
// window closes on the first look (a run, a new session, parallel_info) after it has lasted
// kLoadWindow, so the cost is one read of /proc/stat per window and a change of load shows within
// one or two windows. The CPUs are the calling thread's affinity mask, while the own time is the
// whole process's: callers pinned to different masks make each window start afresh.
#pragma once

#include <sched.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

inline constexpr std::chrono::milliseconds kLoadWindow{100};

struct CoreLoad {
  int cores = 1;                // this process may run on (available_cores())
  bool measured = false;        // false until a first window closes (again after an affinity change)
  bool readable = true;         // false while /proc/stat cannot be read (retried every window)
  double busy_elsewhere = 0.0;  // cores' worth of other processes' work over the last window
  int free_cores = 1;           // cores minus the lost ones, at least 1
};

// The last window's measure; closes a window first when one is due. Thread-safe.
CoreLoad core_load();

// "0.98": cores' worth of work in hundredths, the same in any locale (for verbose and parallel_info).
std::string cores_text(double cores);

// Cores other processes keep busy (rounded to whole cores from half of one), leaving at least one.
int free_cores(int cores, double busy_elsewhere);

// The busy seconds of the CPUs in `cpus` from /proc/stat's text (its "cpuN" lines; ticks at
// `ticks_per_second`), or nullopt when no line for them parses.
std::optional<double> busy_seconds_from_proc_stat(std::string_view proc_stat, const cpu_set_t& cpus,
                                                  long ticks_per_second);

// Makes core_load() report `busy_elsewhere` cores as measured until destroyed, for tests of what
// runs do under load. Not nestable.
class ScopedFakeCoreLoad {
 public:
  explicit ScopedFakeCoreLoad(double busy_elsewhere);
  ~ScopedFakeCoreLoad();
  ScopedFakeCoreLoad(const ScopedFakeCoreLoad&) = delete;
  ScopedFakeCoreLoad& operator=(const ScopedFakeCoreLoad&) = delete;
};

}  // namespace kiln
