// Where the time went in a trace: per thread, its span split into compute by backend, data movement,
// planning, waiting (a run's own time outside its steps: waiting for the pool's branches, and the
// run's overhead), other recorded work and idle; for parallel-mode runs the critical path (the
// longest chain of dependent steps, against the run's time); for concurrent runs how much they
// overlapped. Read by the report's text and HTML (as a picture).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "profiler/trace.h"
#include "tidy/event_tree.h"
#include "tidy/step_flow.h"

namespace kiln::tidy {

struct ThreadTime {
  std::string name;  // the thread's name, or its OS id
  // Self time per category, ms, largest first: "compute: onednn", "data movement", "planning",
  // "waiting", "python", "other" (kiln traces' compute by backend; PyTorch's "compute: ops").
  std::vector<std::pair<std::string, double>> categories;
  double busy_ms = 0;
  double idle_ms = 0;  // the trace's span less the thread's busy time
};

struct CriticalPath {
  uint64_t run_id = 0;
  double run_ms = 0;
  double path_ms = 0;              // the longest chain of dependent steps, their time summed
  std::vector<std::string> steps;  // its steps' nodes, first to last
  int parallel_runs = 0;           // runs with steps on more than one thread (this is the slowest)
};

struct RunOverlap {
  int runs = 0;
  int most_at_once = 0;
  double covered_ms = 0;      // time at least one run was in flight
  double overlapped_ms = 0;   // time two or more were
  double mean_in_flight = 0;  // the runs' time over covered_ms
};

struct TimeBreakdown {
  double span_ms = 0;  // first event's start to last event's end
  std::vector<ThreadTime> threads;
  std::vector<CriticalPath> critical_path;  // empty, or the slowest parallel-mode run's
  RunOverlap overlap;

  std::string text() const;
  // {"span_ms", "threads": [{"name", "busy_ms", "idle_ms", "categories": {name: ms}}],
  // "critical_path": [{"run_id", "run_ms", "path_ms", "steps", "parallel_runs"}], "overlap": {...}}.
  std::string json() const;
  // A picture for the HTML report: a bar per thread, its span split by category (inline SVG).
  std::string svg() const;
};

// Over the tree and data flow the patterns already read (tidy/pattern.h's TidyContext).
TimeBreakdown time_breakdown(const EventTree& tree, const StepFlow& flow);

}  // namespace kiln::tidy
