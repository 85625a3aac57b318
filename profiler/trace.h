// A recorded profile as an event tree: what the recording half (core/events.h) collected, with each
// step resolved against its plan's static record (node, fused nodes, op, backend, kernel, layouts,
// shapes, dtypes, FLOPs, bytes, the plan's settings), ids renumbered 1..N in start order and
// parents remapped. Traces read from files and from PyTorch's profiler (profiler/trace_load.h,
// python/kiln/torch_trace.py) land in the same model, with what their source could not provide said in
// Trace::unavailable. The anti-pattern analysis and every export read this, never the raw events.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/base/refusal.h"
#include "core/events.h"
#include "core/tensor.h"
#include "graph/fused_node.h"
#include "graph/plan.h"

namespace kiln::profiler {

// What an event is. The first seven are what kiln records (core/events.h, same order); the rest come
// only from traces kiln reads: `op` a framework operator (PyTorch's cpu_op), `python` a Python
// function or module call, `other` anything else the source had (GPU kernels, trace spans ...).
enum class EventKind : uint8_t {
  run,
  step,
  reorder,
  interop_task,
  memory,
  annotation,
  plan,
  op,
  python,
  other
};

EventKind from_recorded(events::EventKind kind);
const char* kind_name(EventKind kind);
// The kind named `name` (as kind_name writes it); throws invalid_argument naming the kinds otherwise.
EventKind parse_kind(std::string_view name);

struct TraceEvent {
  uint64_t id = 0;         // 1..N in start order (a parent before its children)
  uint64_t parent_id = 0;  // 0: a root (or a parent that was not recorded, see Trace::unparented)
  EventKind kind = EventKind::run;
  std::string name;      // step/reorder: op type; run, plan: "run", "plan"; task and annotation: their names;
                         // memory: "[memory]"
  uint32_t thread = 0;   // index into Trace::threads
  int64_t start_ns = 0;  // steady clock; Trace::origin_ns is the earliest
  int64_t end_ns = 0;
  int64_t duration_ns() const { return end_ns - start_ns; }

  // Steps and reorders: the plan's static record (shapes and dtypes only when shapes were recorded;
  // runs and plans: input_shapes are the graph inputs').
  int step = -1;  // index in its plan
  std::string node;
  std::string backend;
  std::string kernel;
  std::vector<FusedNode> fused;
  std::vector<Shape> input_shapes;
  std::vector<Shape> output_shapes;
  std::vector<std::string> input_dtypes;
  std::vector<std::string> output_dtypes;
  std::vector<std::string> input_layouts;
  std::vector<std::string> output_layouts;
  int64_t flops = 0;  // multiply-adds x 2 (convolutions and products; 0 for other ops)
  int64_t bytes = 0;  // bytes its inputs and outputs occupy as stored
  int64_t weight_bytes = 0;  // of those, what its constant inputs (weights, biases) occupy
  int threads = 0;    // steps: intra-op threads its kernel runs with; runs and plans: the plan's
  // Steps: the values it reads and writes, by name (the plan's data flow between the steps that run:
  // a view step's output is named by the value it views; "" for an absent optional input or a
  // constant packed into the kernel), and each candidate kernel selection did not choose.
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<Refusal> refusals;
  // Steps and reorders: the plan's whole record of the step, shared by every event of that step; the
  // fields above (node to refusals, shapes to layouts) are its source-neutral copies, set with it by
  // set_step_record. profiler/fields.h says which of its fields each output writes.
  std::shared_ptr<const StepRecord> record;

  // Runs and plans (planning for new input shapes or settings; a failed one has no settings): the
  // plan's settings, its graph inputs' shapes, its step count; runs: memory: the arena its context
  // holds throughout, what the run itself allocated (outputs, scratch; a new context's arena
  // excluded) and its peak (arena + the most the run's own allocations held at once).
  std::string settings;
  int plan_steps = 0;
  int64_t arena_bytes = 0;
  int64_t allocated_bytes = 0;
  int64_t peak_bytes = 0;

  // Memory: bytes allocated (> 0) or freed (< 0), what for ("arena", "scratch", "tensor"), and the
  // bytes live through kiln's allocator registry, process-wide, after it (a loaded trace: its
  // framework's total allocated).
  int64_t memory_bytes = 0;
  std::string memory_tag;
  int64_t memory_total = 0;

  // Loaded traces: the source's category ("cpu_op", "python_function" ...), the source frame of a
  // Python event (its function's file and first line, as PyTorch names it "file(line): function"),
  // and everything else the source said of the event, by the source's own names ("Sequence number",
  // "Python id" ...), values as written (JSON text for arrays and objects).
  std::string category;
  std::string file;
  int line = 0;
  std::vector<std::pair<std::string, std::string>> attributes;
  const std::string* attribute(std::string_view name) const;
};

struct TraceThread {
  int64_t os_thread = 0;
  std::string name;
};

struct Trace {
  std::vector<TraceEvent> events;  // by id: events[i].id == i + 1
  std::vector<TraceThread> threads;
  int64_t origin_ns = 0;  // the earliest start
  bool shapes_recorded = true;
  bool memory_recorded = true;
  int unparented = 0;  // events whose parent was still open or dropped when the profile stopped
  // What produced it: "kiln_version", "cpu", "cpu_capability", "isa", "onednn_isa", "threads" ...
  // (a loaded trace: what its source said, e.g. "framework_version", "cpu_capability").
  std::map<std::string, std::string> facts;

  // Where it came from: "kiln" (recorded in this process), "kiln_json" (kiln's Chrome trace),
  // "torch" (PyTorch's live profiler), "kineto_json" (PyTorch 2.x's Kineto trace), "torch_legacy_json"
  // (PyTorch 1.x's export without Kineto) or "chrome_json" (any other Chrome trace).
  std::string source = "kiln";
  // What the source could not provide, one phrase each ("Python frames", "input shapes" ...).
  std::vector<std::string> unavailable;
  // How it was read where the source left a choice (events nested by time, ties, skipped events).
  std::vector<std::string> notes;

  const TraceEvent* find(uint64_t id) const {
    return id >= 1 && id <= events.size() ? &events[id - 1] : nullptr;
  }
  // Direct children of `id` (0: the roots), in start order.
  std::vector<const TraceEvent*> children(uint64_t id) const;
};

struct TraceOptions {
  bool record_shapes = true;
  bool profile_memory = true;
};

// Builds the tree from what a collection returned. Steps and runs are resolved against the plans
// `collected` keeps alive.
Trace build_trace(const events::Collected& collected, const TraceOptions& options);

// A plan's steps as step and reorder events without times: what a trace's events say of them and
// what `kiln explain` shows.
std::vector<TraceEvent> plan_step_events(const Plan& plan);

// Sets a step or reorder event's record and the fields copied from it (shapes, dtypes and layouts only
// with `shapes`).
void set_step_record(TraceEvent& event, std::shared_ptr<const StepRecord> record, bool shapes);

// This process's machine facts, as `kiln info` prints them.
std::map<std::string, std::string> machine_facts();

}  // namespace kiln::profiler
