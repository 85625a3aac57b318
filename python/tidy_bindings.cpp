#include "python/tidy_bindings.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <filesystem>

#include "core/error.h"
#include "python/tidy_pattern_bindings.h"
#include "tidy/html_report.h"
#include "tidy/options.h"
#include "tidy/report.h"
#include "tidy/trace_diff.h"
#include "tidy_runner/estimate.h"

namespace py = pybind11;

namespace kiln {
namespace {

py::object location_file(const tidy::SourceLocation& location) {
  return location.found() ? py::object(py::str(location.file)) : py::object(py::none());
}

py::object location_line(const tidy::SourceLocation& location) {
  return location.found() ? py::object(py::int_(location.line)) : py::object(py::none());
}

py::list notes(const std::vector<tidy::PatternNote>& notes, const char* text_key) {
  py::list list;
  for (const tidy::PatternNote& note : notes) {
    py::dict item;
    item["pattern"] = note.pattern;
    item[text_key] = note.text;
    list.append(item);
  }
  return list;
}

// A match's fix as the report's JSON has it: {"kind", "what"} and, where the kind has them,
// "settings" ({name: value}), "step_ids" (event ids) or "torch_fix".
py::dict fix_dict(const tidy::Fix& fix) {
  py::dict dict;
  dict["kind"] = tidy::fix_kind_name(fix.kind);
  dict["what"] = fix.what;
  if (fix.kind == tidy::Fix::Kind::settings) {
    py::dict settings;
    for (const auto& [name, value] : fix.settings) settings[py::str(name)] = value;
    dict["settings"] = settings;
  }
  if (fix.kind == tidy::Fix::Kind::step_removed) {
    py::list ids;
    for (const tidy::EventIndex step : fix.steps) ids.append(static_cast<uint64_t>(step) + 1);
    dict["step_ids"] = ids;
  }
  if (fix.kind == tidy::Fix::Kind::torch_benchmark) dict["torch_fix"] = fix.torch_fix;
  return dict;
}

py::object optional_number(const std::optional<double>& number) {
  return number ? py::object(py::float_(*number)) : py::object(py::none());
}

py::object json_value(const std::string& text) {
  return py::module_::import("json").attr("loads")(text);
}

// The command line's `--patterns` runner: python/kiln/tidy.py's _run_pattern_files, under the GIL.
std::vector<tidy::PatternResult> run_pattern_files(const std::vector<std::string>& files,
                                                   const profiler::Trace& trace) {
  // The trace is the command's, on its stack: a pattern that keeps its events past the run (a
  // global) must not use them after the command returns (`kiln tidy` runs in a process of its own).
  py::gil_scoped_acquire acquire;
  try {
    const py::object results =
        py::module_::import("kiln.tidy")
            .attr("_run_pattern_files")(files, py::cast(trace, py::return_value_policy::reference));
    std::vector<tidy::PatternResult> converted;
    for (const py::handle result : results) converted.push_back(pattern_result_from(result));
    return converted;
  } catch (py::error_already_set& error) {
    // The message alone (a pattern's own failures are reported with their tracebacks, not here).
    const std::string message = py::str(error.value());
    fail(ErrorKind::invalid_argument, message);
  }
}

}  // namespace

void bind_tidy(py::module_& m) {
  py::module_ t = m.def_submodule("tidy", "kiln::tidy");
  py::class_<tidy::TidyReport>(t, "Report")
      .def_readonly("trace_name", &tidy::TidyReport::trace_name)
      .def_readonly("source", &tidy::TidyReport::source)
      .def_readonly("events", &tidy::TidyReport::events)
      .def_property_readonly("counts",
                             [](const tidy::TidyReport& report) {
                               py::dict counts;
                               for (const auto& [name, n] : report.counts) counts[py::str(name)] = n;
                               return counts;
                             })
      .def_property_readonly("matches",
                             [](const tidy::TidyReport& report) {
                               py::list matches;
                               for (const tidy::TidyMatch& match : report.matches) {
                                 py::dict item;
                                 item["pattern"] = match.pattern;
                                 item["message"] = match.message;
                                 item["file"] = location_file(match.location);
                                 item["line"] = location_line(match.location);
                                 item["event_id"] = match.event_id;
                                 item["detail"] = match.detail;
                                 item["time_ms"] = match.time_ms;
                                 item["estimated_saving_ms"] = optional_number(match.estimated_saving_ms);
                                 item["fix"] = fix_dict(match.fix);
                                 item["node"] = match.node;
                                 item["reason"] = match.reason;
                                 item["run_id"] = match.run_id;
                                 matches.append(item);
                               }
                               return matches;
                             })
      .def_property_readonly("findings",
                             [](const tidy::TidyReport& report) {
                               py::list findings;
                               for (const tidy::TidyFinding& finding : report.findings) {
                                 py::dict item;
                                 item["pattern"] = finding.pattern;
                                 item["url"] = finding.url;
                                 item["description"] = finding.description;
                                 item["message"] = finding.message;
                                 item["file"] = location_file(finding.location);
                                 item["line"] = location_line(finding.location);
                                 item["detail"] = finding.detail;
                                 findings.append(item);
                               }
                               return findings;
                             })
      .def_property_readonly(
          "not_evaluated",
          [](const tidy::TidyReport& report) { return notes(report.not_evaluated, "reason"); })
      .def_property_readonly("caveats",
                             [](const tidy::TidyReport& report) { return notes(report.caveats, "caveat"); })
      .def_readonly("summaries", &tidy::TidyReport::summaries)
      .def_readonly("assumed", &tidy::TidyReport::assumed)
      .def_readonly("exact_locations", &tidy::TidyReport::exact_locations)
      .def_readonly("runs", &tidy::TidyReport::runs)
      .def_readonly("run_ms", &tidy::TidyReport::run_ms)
      .def_property_readonly("estimates",
                             [](const tidy::TidyReport& report) {
                               py::list estimates;
                               for (const tidy::PatternEstimate& estimate : report.estimates) {
                                 py::dict item;
                                 item["pattern"] = estimate.pattern;
                                 item["matched_ms"] = estimate.matched_ms;
                                 item["estimated_saving_ms"] = optional_number(estimate.saving_ms);
                                 item["basis"] = estimate.basis;
                                 estimates.append(item);
                               }
                               return estimates;
                             })
      .def_property_readonly(
          "total_estimated_saving_ms",
          [](const tidy::TidyReport& report) { return optional_number(report.total_estimated_saving_ms()); })
      .def_property_readonly("groups",
                             [](const tidy::TidyReport& report) {
                               py::list groups;
                               for (const tidy::MatchGroup& group : report.groups()) {
                                 py::dict item;
                                 item["pattern"] = group.pattern;
                                 item["reason"] = group.reason;
                                 item["node"] = group.node;
                                 item["detail"] = group.detail;
                                 item["matches"] = group.matches;
                                 item["runs"] = group.runs;
                                 item["time_ms"] = group.time_ms;
                                 item["estimated_saving_ms"] = optional_number(group.saving_ms);
                                 groups.append(item);
                               }
                               return groups;
                             })
      .def_property_readonly("failed",
                             [](const tidy::TidyReport& report) { return notes(report.failed, "traceback"); })
      .def_property_readonly("time",
                             [](const tidy::TidyReport& report) { return json_value(report.time.json()); })
      .def("count", &tidy::TidyReport::count, py::arg("pattern"))
      .def("text", &tidy::TidyReport::text, py::arg("per_event") = false)
      .def("json", &tidy::TidyReport::json)
      .def(
          "write_torchtidy_json",
          [](const tidy::TidyReport& report, const std::filesystem::path& directory) {
            report.write_torchtidy_json(directory.string());
          },
          py::arg("directory"))
      .def("__str__", [](const tidy::TidyReport& report) { return report.text(); });
  t.def(
      "analyse",
      [](const profiler::Trace& trace, const std::string& name, const std::vector<std::string>& names,
         bool corrected, int64_t tiny_step_us, const py::list& user_patterns) {
        tidy::TidyOptions options;
        options.name_patterns = names;
        options.corrected = corrected;
        options.tiny_step_us = tiny_step_us;
        for (const py::handle result : user_patterns)
          options.user_patterns.push_back(pattern_result_from(result));
        py::gil_scoped_release release;
        return tidy::analyse(trace, name, options);
      },
      py::arg("trace"), py::arg("name"), py::arg("names") = std::vector<std::string>{},
      py::arg("corrected") = true, py::arg("tiny_step_us") = tidy::TidyOptions{}.tiny_step_us,
      py::arg("user_patterns") = py::list());
  t.def(
      "diff",
      [](const profiler::Trace& before, const std::string& before_name, const profiler::Trace& after,
         const std::string& after_name) {
        return json_value(tidy::diff_traces(before, before_name, after, after_name).json());
      },
      py::arg("before"), py::arg("before_name"), py::arg("after"), py::arg("after_name"));
  t.def(
      "diff_text",
      [](const profiler::Trace& before, const std::string& before_name, const profiler::Trace& after,
         const std::string& after_name) {
        return tidy::diff_traces(before, before_name, after, after_name).text();
      },
      py::arg("before"), py::arg("before_name"), py::arg("after"), py::arg("after_name"));
  bind_tidy_patterns(t);
  tidy::set_pattern_file_runner(run_pattern_files);
  t.def("option_rows", [] {
    // tidy's options table (tidy/options.h), for kiln.tidy.report's defaults and checks.
    py::list rows;
    for (const tidy::TidyOptionRow& row : tidy::kTidyOptions) {
      py::dict item;
      item["name"] = row.name;
      item["cli"] = row.cli;
      item["type"] = row.type == tidy::TidyOptionType::boolean   ? "bool"
                     : row.type == tidy::TidyOptionType::integer ? "int"
                     : row.type == tidy::TidyOptionType::list    ? "list"
                                                                 : "text";
      item["default"] = row.default_value;
      item["min"] = row.min;
      item["max"] = row.max;
      item["measures"] = row.measures;
      item["help"] = row.help;
      rows.append(item);
    }
    return rows;
  });
  t.def(
      "write_html",
      [](const tidy::TidyReport& report, const profiler::Trace& trace, const std::filesystem::path& path) {
        tidy::write_html_report(report, trace, path.string());
      },
      py::arg("report"), py::arg("trace"), py::arg("path"));
  t.def(
      "estimate_savings",
      [](tidy::TidyReport& report, const profiler::Trace& trace, const std::filesystem::path& model,
         int runs) {
        KILN_CHECK(runs >= 1, invalid_argument, "estimate_savings: runs must be at least 1, got ", runs);
        // Measured on a copy without Python's lock (it takes seconds); the report changes with it held.
        tidy::TidyReport measured = report;
        {
          py::gil_scoped_release release;
          tidy::estimate_savings(measured, trace, {.model = model.string(), .runs = runs});
        }
        report = std::move(measured);
      },
      py::arg("report"), py::arg("trace"), py::arg("model"), py::arg("runs") = 20);
}

}  // namespace kiln
