// What a trace is written as: Chrome's Trace Event Format (Perfetto and chrome://tracing open it)
// and a JSON summary for scripts.
//
// The Chrome trace is one object: {"schemaVersion": 2, "displayTimeUnit": "ms", "traceEvents": [...],
// "kiln": {machine facts and what was recorded}}. Process and thread names are "M" events; every
// run, step, reorder, inter-op task and annotation is an "X" event whose args carry "id" (> 0,
// unique) and "parent_id" (0 for a root), so nesting is exact instead of guessed from times; a
// task started on another thread than its parent gets a flow arrow ("s"/"f") from it. Memory
// events are "i" events named "[memory]" (PyTorch's name) with a "C" counter of live bytes.
// Timestamps are microseconds from the trace's first event, with three decimals: exact ns.
#pragma once

#include <filesystem>
#include <string>

#include "profiler/trace.h"
#include "runtime/roofline.h"

namespace kiln::profiler {

std::string chrome_trace_json(const Trace& trace);
// Writes chrome_trace_json(trace) to `path`; throws kiln::Error (runtime) naming the path when it
// cannot be written.
void export_chrome_trace(const Trace& trace, const std::filesystem::path& path);

// {"facts": {...}, "events": N, "runs": {"count", "median_ms", "min_ms", "max_ms", "arena_bytes",
// "peak_bytes", "allocated_bytes_per_run"}, "key_averages": key_averages(trace, group).json()}; with
// `roofline` (a trace recorded here), the rows' bounds and "roofline": the per-run totals
// (profiler/roofline.h's write_bound_totals).
std::string summary_json(const Trace& trace, const std::string& group_by = "op",
                         const Roofline* roofline = nullptr, Isa isa = Isa::baseline);

// "runs: 20, median 3.412 ms (min 3.301, max 4.020); peak memory 12.25 MiB (arena 12.00 MiB)".
std::string runs_text(const Trace& trace);

}  // namespace kiln::profiler
