// The one table of what kiln says about a plan step and a trace event: each field's name, the event
// kinds that carry it, its JSON type and meaning, how it is written and how it is read back. Every
// output iterates it: `kiln explain --json` and Python's Session.explain (a step's fields), kiln's
// Chrome traces (an event's args), the trace loader (args back into a TraceEvent) and Python's event
// dicts. Adding a field to StepRecord and a row here is all it takes to show it everywhere;
// docs/record_schema.md is generated from the table (`kiln explain --schema`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_writer.h"
#include "profiler/trace.h"
#include "profiler/trace_json.h"

namespace kiln::profiler {

// The version kiln's Chrome traces write as "schemaVersion". The major version changes when a field
// changes meaning or type, or leaves; new fields keep it. The loader reads every version from 1 to
// this one (version 1 traces lack the fields version 2 added: those read as their defaults, and a
// step's op as the event's name).
constexpr int kTraceSchemaVersion = 2;

// Which events a field is part of: a bit per EventKind.
using KindMask = uint32_t;
constexpr KindMask kind_bit(EventKind kind) {
  return KindMask{1} << static_cast<unsigned>(kind);
}
constexpr KindMask kStepKinds = kind_bit(EventKind::step) | kind_bit(EventKind::reorder);
constexpr KindMask kPlanKinds = kind_bit(EventKind::run) | kind_bit(EventKind::plan);

// When a field is written.
enum class FieldGroup : uint8_t {
  always,
  shapes,  // only where shapes were recorded (a profile's record_shapes)
  memory,  // only where memory was recorded (a profile's profile_memory)
};

struct EventField {
  std::string_view name;
  KindMask kinds;
  FieldGroup group;
  std::string_view type;     // as the docs show it: "string", "integer", "[shape]" ...
  std::string_view meaning;  // one line for the docs
  void (*write)(JsonWriter& json, const TraceEvent& event);
  // From an args value; `record` is the step's record being read (step and reorder events only).
  // Throws invalid_argument naming what was expected.
  void (*read)(const trace::JsonValue& value, TraceEvent& event, StepRecord& record);
};

// Every field, in the order outputs write them.
const std::vector<EventField>& event_fields();

// Which groups to write: a trace recorded without shapes or memory leaves those fields out.
struct FieldFilter {
  bool shapes = true;
  bool memory = true;
};

// The fields of `event`'s kind, as members of the object `json` has open.
void write_fields(JsonWriter& json, const TraceEvent& event, const FieldFilter& filter = {});

// Reads `args` (an object) into `event`, whose kind is set: every field of its kind that `args` has
// (absent fields keep their defaults). A step's record is read whole and shared by the event.
void read_fields(const trace::JsonValue& args, TraceEvent& event);

// The docs' table of every field, as Markdown.
std::string fields_markdown();

}  // namespace kiln::profiler
