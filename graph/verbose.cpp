#include "graph/verbose.h"

#include <atomic>
#include <cstdio>

#include "backends/selection.h"
#include "backends/verbose_sink.h"
#include "core/version.h"
#include "graph/plan.h"
#include "runtime/cpu_info.h"
#include "runtime/threads.h"

namespace kiln {
namespace {

std::string info_line() {
  std::string backends;
  for (const Backend* backend : all_backends()) {
    backends += str_cat(backends.empty() ? "" : ";", backend->name(), " ", backend->version());
  }
  return str_cat("kiln_verbose,info,kiln ", kiln_version(), ",threads=", get_num_threads(),
                 ",isa=", isa_name(isa_in_effect()), ",backends=", backends);
}

template <typename T, typename Format>
std::string joined(const std::vector<T>& items, Format format) {
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) text += str_cat(i == 0 ? "" : ";", format(items[i]));
  return text;
}

// Everything of a step's line after "kiln_verbose,<kind>,": backend to fused ops, and a comma.
std::string describe(const PlanStep& step) {
  const StepRecord& r = step.record;
  const auto layout = [](Layout value) { return layout_name(value); };
  const auto shape = [](const Shape& value) { return shape_to_compact_string(value); };
  const auto same = [](const std::string& value) { return value; };
  return str_cat(r.backend, ",", r.op_type, ",", r.node_name, ",", r.kernel,
                 ",in:", joined(r.input_layouts, layout), " out:", joined(r.output_layouts, layout),
                 ",in:", joined(r.input_shapes, shape), " out:", joined(r.output_shapes, shape), ",",
                 r.fused.empty() ? "-" : joined(r.fused, same), ",");
}

std::string milliseconds_text(double milliseconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", milliseconds);
  return text;
}

}  // namespace

void write_verbose_line(const Settings& settings, std::string_view line) {
  VerboseSink& sink = settings.verbose_sink ? *settings.verbose_sink : *stdout_verbose_sink();
  static std::atomic<bool> info_written = false;
  if (!info_written.exchange(true)) sink.write(info_line());
  sink.write(line);
}

void report_executed_step(const Settings& settings, const PlanStep& step, double milliseconds) {
  write_verbose_line(settings,
                     str_cat("kiln_verbose,exec,", describe(step), milliseconds_text(milliseconds)));
}

void report_planned_steps(const Settings& settings, const Plan& plan) {
  for (const PlanStep& step : plan.steps()) {
    if (settings.verbose_for(step.backend_index) < 2) continue;
    std::string line =
        str_cat("kiln_verbose,plan,", describe(step), milliseconds_text(step.record.creation_ms));
    if (!step.record.note.empty()) line += str_cat(",note:", step.record.note);
    write_verbose_line(settings, line);
  }
}

}  // namespace kiln
