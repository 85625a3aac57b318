#include "graph/verbose.h"

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
  return str_cat("kiln_verbose,info,kiln ", kiln_version(), ",threads=", intra_op_threads(),
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
  const auto dtype = [](DType value) { return value == DType::undefined ? "-" : dtype_name(value); };
  const auto layout = [](Layout value) { return layout_name(value); };
  const auto shape = [](const Shape& value) { return shape_to_compact_string(value); };
  const auto fused = [](const FusedNode& node) { return node.text(); };
  return str_cat(r.backend, ",", r.op_type, ",", csv_field(r.node_name), ",", r.kernel,
                 ",in:", joined(r.input_dtypes, dtype), " out:", joined(r.output_dtypes, dtype),
                 ",in:", joined(r.input_layouts, layout), " out:", joined(r.output_layouts, layout),
                 ",in:", joined(r.input_shapes, shape), " out:", joined(r.output_shapes, shape), ",",
                 r.fused.empty() ? "-" : csv_field(joined(r.fused, fused)), ",");
}

std::string milliseconds_text(double milliseconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", milliseconds);
  return text;
}

}  // namespace

std::string csv_field(std::string_view field) {
  if (field.find_first_of(",\"\n") == std::string_view::npos) return std::string(field);
  std::string quoted = "\"";
  for (char c : field) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + '"';
}

bool VerboseCallLog::wants(std::string_view backend) const {
  for (int i = 0; i < kBackendCount; ++i) {
    if (kBackendNames[i] == backend) return settings_.verbose_for(i) >= 1;
  }
  return settings_.get("verbose") >= 1;
}

void write_verbose_line(const Settings& settings, std::string_view line) {
  VerboseSink& sink = settings.verbose_sink() ? *settings.verbose_sink() : *stdout_verbose_sink();
  sink.write_line(line, info_line);
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
    // Appended in two steps: GCC 12 warns falsely (-Wrestrict) about `"," + std::string` here.
    for (const std::string& note : step.record.notes)
      line.append(",").append(csv_field(str_cat("note:", note)));
    // Why the other candidates did not take the step (attention: each kernel of sdpa_kernels before it).
    std::string refusals;
    for (const Refusal& refusal : step.record.decision.refusals)
      refusals += str_cat(refusals.empty() ? "" : "; ", refusal.text());
    if (!refusals.empty()) line.append(",").append(csv_field(str_cat("rejected:", refusals)));
    write_verbose_line(settings, line);
  }
}

}  // namespace kiln
