// A Chrome-trace JSON file read as a stream: the top-level members and the events of `traceEvents` (or
// of a top-level array) are handed over one at a time, each as a small value, so reading a trace
// holds one event at a time rather than a DOM of the whole file (several times its size).
// What the members and events mean is profiler/trace_load.cpp's business.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::trace {

// One JSON value, held whole: an event or a top-level member. Numbers keep their text, so a
// timestamp like 1234.567 (µs) converts to ns exactly.
struct JsonValue {
  enum class Type : uint8_t { null, boolean, number, string, array, object };
  Type type = Type::null;
  std::string text;               // string: its characters; number: as written; boolean: "true" or "false"
  std::vector<JsonValue> items;   // array elements; object member values
  std::vector<std::string> keys;  // object member names, parallel to items

  const JsonValue* get(std::string_view key) const;  // an object's member, or null
  // Compact JSON text of this value (strings quoted and escaped).
  std::string json() const;
};

const char* type_name(JsonValue::Type type);  // "a string", "an array" ... for messages

class TraceJsonVisitor {
 public:
  virtual ~TraceJsonVisitor() = default;
  // Whether the file is an object (with traceEvents) or an array of events, before anything else.
  virtual void top_level(bool object) = 0;
  // A top-level member other than traceEvents.
  virtual void member(const std::string& key, JsonValue value) = 0;
  // The index-th element of traceEvents (or of the top-level array), in file order.
  virtual void event(JsonValue value, size_t index) = 0;
};

struct TraceJsonLimits {
  int64_t max_bytes = 0;  // a larger file is refused before parsing (0: no cap)
  int max_depth = 32;     // deeper nesting within one event or member is refused
};

// Reads `path`. Throws invalid_argument naming the file, the byte offset and what was expected on
// malformed JSON, a gzip file, a file over the cap or nesting deeper than the limit; not_found when
// the file cannot be opened. Errors thrown by the visitor pass through with the file's name added.
void read_trace_json(const std::string& path, const TraceJsonLimits& limits, TraceJsonVisitor& visitor);
// The same from text in memory; `name` stands for the file in messages.
void read_trace_json_text(std::string_view text, const std::string& name, const TraceJsonLimits& limits,
                          TraceJsonVisitor& visitor);

}  // namespace kiln::trace
