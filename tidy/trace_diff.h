// What changed between two traces of the same work: per place (a kiln step's node and op, a PyTorch
// op's name and input shapes) the self time and calls before and after, what appeared and
// disappeared (a Reorder added, an op no longer called), kernel and backend switches, and the plans'
// changes (settings, step counts), largest time change first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/trace.h"

namespace kiln::tidy {

// One place on one side: its self time and calls, per run for kiln traces (over the whole trace for
// PyTorch's), and its most frequent kernel and backend (kiln).
struct DiffSide {
  bool present = false;
  double ms = 0;
  double calls = 0;
  std::string kernel;
  std::string backend;
};

struct DiffRow {
  std::string kind;    // "step", "reorder" (kiln), "op", "python" (PyTorch)
  std::string op;      // the op type, or the event's name
  std::string node;    // kiln: the graph node; PyTorch: empty
  std::string shapes;  // its input shapes, as text
  DiffSide before;
  DiffSide after;
  // "appeared", "disappeared", "backend switched", "kernel switched", or empty (time only).
  std::string change;
  double delta_ms() const { return after.ms - before.ms; }
};

struct DiffTotals {
  std::string trace;     // the file
  std::string source;    // Trace::source
  int runs = 0;          // kiln: run events
  double ms = 0;         // self time of the places compared (per run for kiln traces)
  std::string settings;  // kiln: the runs' most frequent plan settings
  int plan_steps = 0;    // kiln: that plan's step count
};

struct TraceDiff {
  DiffTotals before;
  DiffTotals after;
  std::vector<std::string> plan_changes;  // "settings: A -> B", "plan steps: 60 -> 75"
  std::vector<DiffRow> rows;              // largest |delta_ms| first; switches before equal deltas

  // A table of the largest changes (at most `rows_shown` rows) after the totals and plan changes, then
  // every other switch, appearance and disappearance, one line each.
  std::string text(size_t rows_shown = 30) const;
  // {"before": {"trace", "source", "runs", "ms", "settings", "plan_steps"}, "after": {...},
  // "plan_changes": [...], "rows": [{"kind", "op", "node", "shapes", "change", "delta_ms",
  // "before": {"ms", "calls", "kernel", "backend"} or null, "after": likewise}]}.
  std::string json() const;
};

// Both traces kiln's, or both PyTorch's; throws invalid_argument naming them otherwise.
TraceDiff diff_traces(const profiler::Trace& before, const std::string& before_name,
                      const profiler::Trace& after, const std::string& after_name);

}  // namespace kiln::tidy
