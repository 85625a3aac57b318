// Events of a trace grouped and summed (PyTorch's key_averages): per key its calls, self and total
// time, FLOPs and memory; table() prints them, json() gives the same numbers to scripts.
//
// A step's key depends on the grouping (its op, node, backend, kernel, or op and input shapes);
// runs, inter-op tasks and annotations are keyed by their names whatever the grouping. Self time is
// an event's time minus its children's on the same thread (children on other threads ran beside
// it); a run's self time is what the executor spent between its steps.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "profiler/trace.h"
#include "runtime/roofline.h"

namespace kiln::profiler {

enum class GroupBy { op, node, backend, kernel, shape };
// Throws kiln::Error (invalid_argument) naming the groupings for an unknown name.
GroupBy parse_group_by(std::string_view name);
const char* group_by_name(GroupBy group);

struct KeyAverage {
  std::string key;
  std::string kind;  // "step", "reorder", "run", "interop_task", "annotation"
  int64_t calls = 0;
  int64_t self_ns = 0;
  int64_t total_ns = 0;
  int64_t flops = 0;        // summed over calls
  int64_t self_memory = 0;  // net bytes allocated by the events themselves
  int64_t memory = 0;       // ... and by their descendants
  // With a roofline: the steps' time at their bounds, summed, and how many calls were compute-bound.
  int64_t bound_ns = 0;
  int64_t compute_bound_calls = 0;
  int64_t unbounded_calls = 0;  // bf16 and int8 products: no fp32 bound
  int64_t unbounded_ns = 0;
  std::string backend;      // steps: their backend and kernel when every call agrees, else "(several)"
  std::string kernel;
  double gflops_per_s() const {
    return total_ns > 0 ? static_cast<double>(flops) / static_cast<double>(total_ns) : 0;
  }
};

class KeyAverages {
 public:
  KeyAverages(std::vector<KeyAverage> rows, GroupBy group, bool memory_recorded, bool bounds = false);

  const std::vector<KeyAverage>& rows() const { return rows_; }
  GroupBy group() const { return group_; }
  int64_t self_ns_total() const { return self_ns_total_; }

  // A fixed-width table (with bounds: each step row's bound, C compute, M memory or C+M, and the
  // fraction of it its bounded calls reached) sorted by `sort_by` (descending, "name" ascending): self_time,
  // total_time, avg_time, calls, gflops, self_memory, memory or name, or PyTorch's self_cpu_time_total,
  // cpu_time_total, cpu_time, count, self_cpu_memory_usage, cpu_memory_usage. At most `row_limit`
  // rows (0 or less: all). Throws kiln::Error (invalid_argument) for an unknown sort key.
  std::string table(std::string_view sort_by = "self_time", int row_limit = 0) const;
  // {"group_by": ..., "self_ns_total": ..., "rows": [{"key", "kind", "calls", "self_ns", ...}]},
  // sorted as table() sorts.
  std::string json(std::string_view sort_by = "self_time") const;

 private:
  std::vector<const KeyAverage*> sorted(std::string_view sort_by) const;

  std::vector<KeyAverage> rows_;
  GroupBy group_;
  bool memory_recorded_;
  bool bounds_;
  int64_t self_ns_total_ = 0;
};

// With `roofline`, each step's bound on this machine's `isa` tier (profiler/roofline.h) is summed
// into its row: only for a trace recorded here.
KeyAverages key_averages(const Trace& trace, GroupBy group = GroupBy::op, const Roofline* roofline = nullptr,
                         Isa isa = Isa::baseline);

// A step event's input shapes, "[1, 3, 224, 224] [64, 3, 7, 7]" ("" when shapes were not recorded).
std::string input_shapes_text(const TraceEvent& event);

}  // namespace kiln::profiler
