// kiln._kiln.profiler: the profiler (profiler/) as seen from Python. kiln/profiler.py builds the
// user-facing profile(...) context manager, schedules and record_function on top of these.
#include "python/profiler_bindings.h"

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <memory>

#include "core/error.h"
#include "core/json_writer.h"
#include "profiler/export.h"
#include "profiler/fields.h"
#include "profiler/key_averages.h"
#include "profiler/profile.h"
#include "profiler/trace_load.h"

namespace py = pybind11;

namespace kiln {
namespace {

using profiler::TraceEvent;

// Every event as a dict: where it sits (id, parent, kind, name, thread, times), then the fields
// profiler/fields.h gives its kind, as kiln's Chrome trace writes them (one JSON text, parsed once).
py::list event_dicts(const profiler::Trace& trace) {
  JsonWriter json;
  json.begin_array();
  for (const TraceEvent& event : trace.events) {
    json.begin_object();
    profiler::write_fields(json, event, {trace.shapes_recorded, trace.memory_recorded});
    json.end_object();
  }
  json.end_array();
  const py::list fields = py::module_::import("json").attr("loads")(json.take());
  py::list list;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    py::dict dict;
    dict["id"] = event.id;
    dict["parent_id"] = event.parent_id;
    dict["kind"] = profiler::kind_name(event.kind);
    dict["name"] = event.name;
    dict["tid"] = trace.threads[event.thread].os_thread;
    dict["thread_name"] = trace.threads[event.thread].name;
    dict["start_ns"] = event.start_ns - trace.origin_ns;
    dict["end_ns"] = event.end_ns - trace.origin_ns;
    dict.attr("update")(fields[i]);
    if (event.kind == profiler::EventKind::op && trace.shapes_recorded) {  // a framework's operator
      py::list shapes;
      for (const Shape& shape : event.input_shapes) shapes.append(py::tuple(py::cast(shape)));
      dict["input_shapes"] = shapes;
      dict["input_dtypes"] = event.input_dtypes;
    }
    if (trace.source != "kiln") {  // what a loaded trace's source said beyond kiln's own fields
      dict["category"] = event.category;
      dict["file"] = event.file;
      dict["line"] = event.line;
      py::dict attributes;
      for (const auto& [key, value] : event.attributes) attributes[py::str(key)] = value;
      dict["attributes"] = attributes;
    }
    list.append(dict);
  }
  return list;
}

template <typename T>
T get_or(const py::dict& dict, const char* key, T fallback) {
  return dict.contains(key) ? dict[key].cast<T>() : fallback;
}

// A trace from events described as event_dicts writes them (kiln/torch_trace.py builds these from
// PyTorch's live profiler); ids and parents are any distinct numbers, numbered as trace::load does.
profiler::Trace trace_from_events(const py::list& events,
                                  const std::vector<std::pair<int64_t, std::string>>& threads,
                                  const std::string& source, const std::map<std::string, std::string>& facts,
                                  const std::vector<std::string>& unavailable,
                                  const std::vector<std::string>& notes, bool shapes_recorded,
                                  bool memory_recorded) {
  profiler::Trace trace;
  trace.source = source;
  trace.facts = facts;
  trace.unavailable = unavailable;
  trace.notes = notes;
  trace.shapes_recorded = shapes_recorded;
  trace.memory_recorded = memory_recorded;
  for (const auto& [tid, name] : threads) trace.threads.push_back({tid, name});
  trace.events.reserve(events.size());
  for (const py::handle item : events) {
    const py::dict dict = py::reinterpret_borrow<py::dict>(item);
    TraceEvent& event = trace.events.emplace_back();
    event.id = dict["id"].cast<uint64_t>();
    event.parent_id = get_or<uint64_t>(dict, "parent_id", 0);
    event.kind = profiler::parse_kind(dict["kind"].cast<std::string>());
    event.name = dict["name"].cast<std::string>();
    event.thread = get_or<uint32_t>(dict, "thread", 0);
    KILN_CHECK(event.thread < trace.threads.size(), invalid_argument, "event ", event.id, " ('", event.name,
               "'): thread ", event.thread, " is not in the thread table (", trace.threads.size(),
               " threads)");
    event.start_ns = dict["start_ns"].cast<int64_t>();
    event.end_ns = get_or<int64_t>(dict, "end_ns", event.start_ns);
    KILN_CHECK(event.end_ns >= event.start_ns, invalid_argument, "event ", event.id, " ('", event.name,
               "') ends before it starts");
    event.category = get_or<std::string>(dict, "category", {});
    event.file = get_or<std::string>(dict, "file", {});
    event.line = get_or<int>(dict, "line", 0);
    event.input_shapes = get_or<std::vector<Shape>>(dict, "input_shapes", {});
    event.input_dtypes = get_or<std::vector<std::string>>(dict, "input_dtypes", {});
    event.memory_bytes = get_or<int64_t>(dict, "bytes", 0);
    event.memory_total = get_or<int64_t>(dict, "total_bytes", 0);
    if (dict.contains("attributes")) {
      for (const auto& [key, value] : dict["attributes"].cast<py::dict>())
        event.attributes.emplace_back(py::str(key), py::str(value));
    }
  }
  trace::number_events(trace);
  return trace;
}

py::dict row_dict(const profiler::KeyAverage& row) {
  py::dict dict;
  dict["key"] = row.key;
  dict["kind"] = row.kind;
  dict["calls"] = row.calls;
  dict["self_ns"] = row.self_ns;
  dict["total_ns"] = row.total_ns;
  dict["flops"] = row.flops;
  dict["gflops_per_s"] = row.gflops_per_s();
  dict["self_memory_bytes"] = row.self_memory;
  dict["memory_bytes"] = row.memory;
  dict["backend"] = row.backend;
  dict["kernel"] = row.kernel;
  return dict;
}

// A with-block annotation: the C++ scope lives from __enter__ to __exit__.
class PythonRecordFunction {
 public:
  explicit PythonRecordFunction(std::string name) : name_(std::move(name)) {}
  void enter() { scope_ = std::make_unique<profiler::RecordFunction>(name_); }
  void exit() { scope_.reset(); }

 private:
  std::string name_;
  std::unique_ptr<profiler::RecordFunction> scope_;
};

}  // namespace

void bind_profiler(py::module_& m) {
  py::module_ p = m.def_submodule("profiler", "kiln::profiler");

  py::class_<profiler::KeyAverages>(p, "KeyAverages")
      .def("table", &profiler::KeyAverages::table, py::arg("sort_by") = "self_time", py::arg("row_limit") = 0)
      .def("json", &profiler::KeyAverages::json, py::arg("sort_by") = "self_time")
      .def("rows",
           [](const profiler::KeyAverages& averages) {
             py::list rows;
             for (const profiler::KeyAverage& row : averages.rows()) rows.append(row_dict(row));
             return rows;
           })
      .def_property_readonly(
          "group_by", [](const profiler::KeyAverages& averages) { return group_by_name(averages.group()); })
      .def_property_readonly("self_ns_total", &profiler::KeyAverages::self_ns_total)
      .def("__len__", [](const profiler::KeyAverages& averages) { return averages.rows().size(); });

  py::class_<profiler::Trace>(p, "Trace")
      .def("events", [](const profiler::Trace& trace) { return event_dicts(trace); })
      .def(
          "key_averages",
          [](const profiler::Trace& trace, const std::string& group_by) {
            return profiler::key_averages(trace, profiler::parse_group_by(group_by));
          },
          py::arg("group_by") = "op")
      .def("export_chrome_trace", &profiler::export_chrome_trace, py::arg("path"))
      .def("chrome_trace_json", &profiler::chrome_trace_json)
      .def(
          "summary_json",
          [](const profiler::Trace& trace, const std::string& group_by) {
            return profiler::summary_json(trace, group_by);
          },
          py::arg("group_by") = "op")
      .def("runs_text", &profiler::runs_text)
      .def_readonly("facts", &profiler::Trace::facts)
      .def_readonly("shapes_recorded", &profiler::Trace::shapes_recorded)
      .def_readonly("memory_recorded", &profiler::Trace::memory_recorded)
      .def_readonly("unparented", &profiler::Trace::unparented)
      .def_readonly("origin_ns", &profiler::Trace::origin_ns)
      .def_readonly("source", &profiler::Trace::source)
      .def_readonly("unavailable", &profiler::Trace::unavailable)
      .def_readonly("notes", &profiler::Trace::notes)
      .def_property_readonly("threads",
                             [](const profiler::Trace& trace) {
                               py::list threads;
                               for (const profiler::TraceThread& thread : trace.threads)
                                 threads.append(py::make_tuple(thread.os_thread, thread.name));
                               return threads;
                             })
      .def("__len__", [](const profiler::Trace& trace) { return trace.events.size(); });

  p.def(
      "load_trace",
      [](const std::string& path, int64_t max_bytes) { return trace::load(path, {.max_bytes = max_bytes}); },
      py::arg("path"), py::arg("max_bytes") = trace::kDefaultMaxTraceBytes,
      "Reads a trace file (Kineto JSON, PyTorch's legacy array, kiln's or any Chrome trace).");
  p.def("machine_facts", &profiler::machine_facts,
        "This process's machine facts, as kiln info prints them and kiln's traces record them.");
  p.def("trace_from_events", &trace_from_events, py::arg("events"), py::arg("threads"), py::arg("source"),
        py::arg("facts"), py::arg("unavailable"), py::arg("notes"), py::arg("shapes_recorded"),
        py::arg("memory_recorded"));
  p.attr("DEFAULT_MAX_TRACE_BYTES") = trace::kDefaultMaxTraceBytes;

  py::class_<profiler::Profile>(p, "Profile")
      .def(py::init([](bool record_shapes, bool profile_memory) {
             return std::make_unique<profiler::Profile>(
                 profiler::ProfileOptions{.record_shapes = record_shapes, .profile_memory = profile_memory});
           }),
           py::arg("record_shapes") = true, py::arg("profile_memory") = true)
      .def("start", &profiler::Profile::start)
      .def("stop", &profiler::Profile::stop)
      .def("discard", &profiler::Profile::discard)
      .def("take", &profiler::Profile::take)
      .def_property_readonly("recording", &profiler::Profile::recording);

  py::class_<PythonRecordFunction>(p, "RecordFunction")
      .def(py::init<std::string>(), py::arg("name"))
      .def("enter", &PythonRecordFunction::enter)
      .def("exit", &PythonRecordFunction::exit);
}

}  // namespace kiln
