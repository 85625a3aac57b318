// Reading traces written elsewhere into kiln's trace model (profiler/trace.h): PyTorch 2.x's Kineto
// JSON, PyTorch 1.x's legacy array (export_chrome_trace without Kineto), kiln's own Chrome traces and
// any other Chrome trace. Each event gets an id and a parent (0 for a root) exactly where the file
// has them (kiln's ids, Python events' time nesting) and by nesting in time per thread where it does
// not (PyTorch's operators carry no parent link); Trace::unavailable says what the file could not
// provide and Trace::notes how ties were settled. docs/trace_loading.md has the rules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "profiler/trace.h"

namespace kiln::trace {

using profiler::Trace;
using profiler::TraceEvent;

// 2 GiB: a trace over it is refused before it is read (a loaded event takes about twice the bytes
// it took in the file).
constexpr int64_t kDefaultMaxTraceBytes = int64_t{2} << 30;

struct LoadOptions {
  int64_t max_bytes = kDefaultMaxTraceBytes;  // 0: no cap
};

// Throws invalid_argument naming the file and the event (index in the file, name) for a missing or
// unreadable file, malformed JSON, a field of the wrong type, an event ending before it starts, ids
// that repeat or parents that form a cycle, and a file over the cap.
Trace load(const std::string& path, const LoadOptions& options = {});
// The same from JSON text; `name` stands for the file in messages.
Trace load_text(std::string_view json, const std::string& name = "<text>", const LoadOptions& options = {});

// Orders and numbers the events of `trace`: each arrives with any distinct nonzero `id` and a
// `parent_id` naming another's id (0: a root). Afterwards ids are 1..N in start order, a parent
// always before its children (a child that starts before its parent is ordered at its parent's
// start), parents remapped, and origin_ns is the earliest start. A parent id that names no event
// makes a root and counts in `unparented`. Throws invalid_argument on a repeated id or a cycle.
void number_events(Trace& trace);

}  // namespace kiln::trace
