#include "profiler/export.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "core/json_writer.h"
#include "profiler/fields.h"
#include "profiler/key_averages.h"
#include "profiler/roofline.h"

namespace kiln::profiler {
namespace {

// Microseconds with three decimals, from integer ns: exact, and locale-free.
std::string microseconds(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  return text;
}

std::string thread_name(const TraceThread& thread, int64_t pid) {
  if (thread.os_thread == pid) return "main";
  return thread.name.empty() ? str_cat("thread ", thread.os_thread) : thread.name;
}

void write_event_args(JsonWriter& json, const Trace& trace, const TraceEvent& event) {
  json.key("args").begin_object();
  json.member("id", event.id);
  json.member("parent_id", event.parent_id);
  json.member("kind", kind_name(event.kind));
  write_fields(json, event, {trace.shapes_recorded, trace.memory_recorded});
  // What the recorder named beyond its kind's fields (a served request's queue time and batch).
  if (!event.attributes.empty()) {
    json.key("attributes").begin_object();
    for (const auto& [key, value] : event.attributes) json.member(key, value);
    json.end_object();
  }
  json.end_object();
}

std::vector<double> run_times_ms(const Trace& trace) {
  std::vector<double> times;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == EventKind::run) times.push_back(static_cast<double>(event.duration_ns()) * 1e-6);
  }
  std::sort(times.begin(), times.end());
  return times;
}

}  // namespace

std::string chrome_trace_json(const Trace& trace) {
  const int64_t pid = getpid();
  JsonWriter json;
  json.begin_object();
  json.member("schemaVersion", kTraceSchemaVersion);
  json.member("displayTimeUnit", "ms");
  json.key("traceEvents").begin_array();
  json.begin_object().member("ph", "M").member("name", "process_name").member("pid", pid).member("tid", 0);
  json.key("args").begin_object().member("name", "kiln").end_object().end_object();
  for (const TraceThread& thread : trace.threads) {
    json.begin_object().member("ph", "M").member("name", "thread_name").member("pid", pid);
    json.member("tid", thread.os_thread);
    json.key("args").begin_object().member("name", thread_name(thread, pid)).end_object().end_object();
  }
  int64_t flow_id = 0;
  for (const TraceEvent& event : trace.events) {
    const int64_t tid = trace.threads[event.thread].os_thread;
    const std::string ts = microseconds(event.start_ns - trace.origin_ns);
    if (event.kind == EventKind::memory) {
      json.begin_object()
          .member("ph", "i")
          .member("s", "t")
          .member("name", "[memory]")
          .member("cat", "memory");
      json.member("pid", pid).member("tid", tid).key("ts").raw(ts);
      write_event_args(json, trace, event);
      json.end_object();
      json.begin_object().member("ph", "C").member("name", "kiln live bytes").member("pid", pid);
      json.key("ts").raw(ts);
      json.key("args").begin_object().member("bytes", event.memory_total).end_object().end_object();
      continue;
    }
    json.begin_object().member("ph", "X").member("name", event.name).member("cat", kind_name(event.kind));
    json.member("pid", pid).member("tid", tid).key("ts").raw(ts);
    json.key("dur").raw(microseconds(event.duration_ns()));
    write_event_args(json, trace, event);
    json.end_object();
    // A parent on another thread (a run that queued this task): an arrow from it.
    const TraceEvent* parent = trace.find(event.parent_id);
    if (parent == nullptr || parent->thread == event.thread) continue;
    const int64_t from = std::clamp(event.start_ns, parent->start_ns, parent->end_ns);
    ++flow_id;
    json.begin_object()
        .member("ph", "s")
        .member("name", "queued")
        .member("cat", "flow")
        .member("id", flow_id);
    json.member("pid", pid).member("tid", trace.threads[parent->thread].os_thread);
    json.key("ts").raw(microseconds(from - trace.origin_ns)).end_object();
    json.begin_object().member("ph", "f").member("bp", "e").member("name", "queued").member("cat", "flow");
    json.member("id", flow_id).member("pid", pid).member("tid", tid).key("ts").raw(ts).end_object();
  }
  json.end_array();
  json.key("kiln").begin_object();
  for (const auto& [name, value] : trace.facts) json.member(name, value);
  json.member("record_shapes", trace.shapes_recorded);
  json.member("profile_memory", trace.memory_recorded);
  json.member("unparented_events", trace.unparented);
  json.end_object();
  json.end_object();
  return json.take();
}

void export_chrome_trace(const Trace& trace, const std::filesystem::path& path) {
  const std::string text = chrome_trace_json(trace);
  std::ofstream file(path, std::ios::binary);
  KILN_CHECK(file.good(), runtime, "cannot write the trace to '", path.string(), "'");
  file << text << '\n';
  file.close();
  KILN_CHECK(file.good(), runtime, "writing the trace to '", path.string(), "' failed");
}

std::string summary_json(const Trace& trace, const std::string& group_by, const Roofline* roofline, Isa isa) {
  const std::vector<double> times = run_times_ms(trace);
  int64_t arena = 0, peak = 0, allocated = 0;
  for (const TraceEvent& event : trace.events) {
    if (event.kind != EventKind::run) continue;
    arena = std::max(arena, event.arena_bytes);
    peak = std::max(peak, event.peak_bytes);
    allocated = std::max(allocated, event.allocated_bytes);
  }
  JsonWriter json;
  json.begin_object();
  json.key("facts").begin_object();
  for (const auto& [name, value] : trace.facts) json.member(name, value);
  json.end_object();
  json.member("events", trace.events.size());
  json.member("source", trace.source);
  json.member("unavailable", trace.unavailable);
  json.member("notes", trace.notes);
  json.key("runs").begin_object();
  json.member("count", times.size());
  if (!times.empty()) {
    json.key("median_ms").value(times[times.size() / 2], 6);
    json.key("min_ms").value(times.front(), 6);
    json.key("max_ms").value(times.back(), 6);
  }
  if (trace.memory_recorded) {
    json.member("arena_bytes", arena);
    json.member("peak_bytes", peak);
    json.member("max_allocated_bytes", allocated);
  }
  json.end_object();
  json.key("key_averages").raw(key_averages(trace, parse_group_by(group_by), roofline, isa).json());
  if (roofline != nullptr) {
    json.key("roofline");
    write_bound_totals(json, trace_bound_totals(trace, *roofline, isa), *roofline, isa, trace_threads(trace));
  }
  json.end_object();
  return json.take();
}

std::string runs_text(const Trace& trace) {
  const std::vector<double> times = run_times_ms(trace);
  if (times.empty()) return "runs: none recorded\n";
  char text[256];
  std::snprintf(text, sizeof text, "runs: %zu, median %.3f ms (min %.3f, max %.3f)", times.size(),
                times[times.size() / 2], times.front(), times.back());
  std::string result = text;
  if (trace.memory_recorded) {
    int64_t arena = 0, peak = 0;
    for (const TraceEvent& event : trace.events) {
      if (event.kind != EventKind::run) continue;
      arena = std::max(arena, event.arena_bytes);
      peak = std::max(peak, event.peak_bytes);
    }
    std::snprintf(text, sizeof text,
                  "; peak memory per run %.2f MiB (arena %.2f MiB, the rest outputs and scratch)",
                  static_cast<double>(peak) / (1 << 20), static_cast<double>(arena) / (1 << 20));
    result += text;
  }
  return result + "\n";
}

}  // namespace kiln::profiler
