// kiln._kiln.profiler: the profiler (profiler/) as seen from Python. kiln/profiler.py builds the
// user-facing profile(...) context manager, schedules and record_function on top of these.
#include "python/profiler_bindings.h"

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <memory>

#include "profiler/export.h"
#include "profiler/key_averages.h"
#include "profiler/profile.h"

namespace py = pybind11;

namespace kiln {
namespace {

using profiler::TraceEvent;

py::list shapes_list(const std::vector<Shape>& shapes) {
  py::list list;
  for (const Shape& shape : shapes) list.append(py::tuple(py::cast(shape)));
  return list;
}

// One event as a dict; keys present only where its kind has them.
py::dict event_dict(const profiler::Trace& trace, const TraceEvent& event) {
  py::dict dict;
  dict["id"] = event.id;
  dict["parent_id"] = event.parent_id;
  dict["kind"] = events::kind_name(event.kind);
  dict["name"] = event.name;
  dict["tid"] = trace.threads[event.thread].os_thread;
  dict["thread_name"] = trace.threads[event.thread].name;
  dict["start_ns"] = event.start_ns - trace.origin_ns;
  dict["end_ns"] = event.end_ns - trace.origin_ns;
  switch (event.kind) {
    case profiler::EventKind::step:
    case profiler::EventKind::reorder:
      dict["step"] = event.step;
      dict["node"] = event.node;
      dict["backend"] = event.backend;
      dict["kernel"] = event.kernel;
      dict["fused"] = event.fused;
      dict["threads"] = event.threads;
      dict["flops"] = event.flops;
      dict["bytes"] = event.bytes;
      if (trace.shapes_recorded) {
        dict["input_shapes"] = shapes_list(event.input_shapes);
        dict["input_dtypes"] = event.input_dtypes;
        dict["input_layouts"] = event.input_layouts;
        dict["output_shapes"] = shapes_list(event.output_shapes);
        dict["output_dtypes"] = event.output_dtypes;
        dict["output_layouts"] = event.output_layouts;
      }
      break;
    case profiler::EventKind::run:
      dict["threads"] = event.threads;
      dict["plan_settings"] = event.settings;
      dict["plan_steps"] = event.plan_steps;
      if (trace.memory_recorded) {
        dict["arena_bytes"] = event.arena_bytes;
        dict["allocated_bytes"] = event.allocated_bytes;
        dict["peak_bytes"] = event.peak_bytes;
      }
      break;
    case profiler::EventKind::memory:
      dict["bytes"] = event.memory_bytes;
      dict["tag"] = event.memory_tag;
      dict["total_bytes"] = event.memory_total;
      break;
    case profiler::EventKind::interop_task:
    case profiler::EventKind::annotation:
      break;
  }
  return dict;
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
      .def("events",
           [](const profiler::Trace& trace) {
             py::list list;
             for (const TraceEvent& event : trace.events) list.append(event_dict(trace, event));
             return list;
           })
      .def(
          "key_averages",
          [](const profiler::Trace& trace, const std::string& group_by) {
            return profiler::key_averages(trace, profiler::parse_group_by(group_by));
          },
          py::arg("group_by") = "op")
      .def("export_chrome_trace", &profiler::export_chrome_trace, py::arg("path"))
      .def("chrome_trace_json", &profiler::chrome_trace_json)
      .def("summary_json", &profiler::summary_json, py::arg("group_by") = "op")
      .def("runs_text", &profiler::runs_text)
      .def_readonly("facts", &profiler::Trace::facts)
      .def_readonly("shapes_recorded", &profiler::Trace::shapes_recorded)
      .def_readonly("memory_recorded", &profiler::Trace::memory_recorded)
      .def_readonly("unparented", &profiler::Trace::unparented)
      .def("__len__", [](const profiler::Trace& trace) { return trace.events.size(); });

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
