// `kiln tidy TRACE`: reads a trace (PyTorch's Kineto JSON or legacy array, kiln's own, any Chrome
// trace) and reports anti-patterns with where in the user's code they come from: TorchTidy's
// patterns count for count, kiln's corrections, kiln's runtime patterns over kiln's own traces, and
// what the trace could not tell. `--benchmark` measures what fixing kiln's patterns would save.
#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "profiler/trace_load.h"
#include "tidy/html_report.h"
#include "tidy/options.h"
#include "tidy/report.h"
#include "tidy_runner/estimate.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/setting_options.h"
#include "tools/trace_args.h"

namespace kiln {

int command_tidy(const std::vector<std::string>& args) {
  // The analysis's and the measurement's options from tidy's table, then what to write.
  std::vector<OptionSpec> own_specs;
  for (const tidy::TidyOptionRow& row : tidy::kTidyOptions) {
    const bool takes_value = row.type != tidy::TidyOptionType::boolean;
    own_specs.push_back({std::string(row.cli), takes_value,
                         row.type == tidy::TidyOptionType::integer
                             ? str_cat(row.help, " (default ", row.default_value, ")")
                             : std::string(row.help)});
  }
  for (OptionSpec spec : std::initializer_list<OptionSpec>{
           {"json", false, "print the report as one JSON object (counts, matches, not_evaluated, caveats)"},
           {"torchtidy-json", true,
            "DIR: also write DIR/torchtidy_report.json as TorchTidy lays it out (merged)"},
           {"html", true,
            "FILE: also write the report as one self-contained HTML page (time by op and backend, findings, "
            "estimates)"},
           max_trace_bytes_option(""),
           {"help", false, "show this help"},
       })
    own_specs.push_back(std::move(spec));
  const std::vector<OptionSpec> specs = with_setting_options(own_specs);
  const ParsedArgs parsed = parse_args("tidy", args, specs);
  if (parsed.has("help")) {
    std::printf(
        "usage: kiln tidy TRACE [options]\n\nReports anti-patterns in a trace (TorchTidy's patterns, as "
        "PyTorch 1.13 has them, and kiln's corrections, with the source line each comes from; kiln's "
        "runtime patterns in kiln's own traces, with --benchmark what fixing them saves).\n\n%s",
        options_help(specs).c_str());
    return 0;
  }
  KILN_CHECK(parsed.positional.size() == 1, invalid_argument, "kiln tidy expects one TRACE file, got ",
             parsed.positional.size());
  // Settings and the options that say how to measure would be ignored without --benchmark.
  for (const auto& option : parsed.options) {
    const std::string& name = option.first;
    const bool own = std::any_of(own_specs.begin(), own_specs.end(),
                                 [&](const OptionSpec& spec) { return spec.name == name; });
    const bool measures =
        own && std::any_of(std::begin(tidy::kTidyOptions), std::end(tidy::kTidyOptions),
                           [&](const tidy::TidyOptionRow& row) { return row.cli == name && row.measures; });
    KILN_CHECK(parsed.has("benchmark") || (own && !measures), invalid_argument, "--", name,
               " applies to --benchmark (how the fixes are measured)");
  }
  apply_setting_options(parsed);
  const std::string& path = parsed.positional[0];
  tidy::TidyOptions options;
  options.name_patterns = parsed.values("name");
  options.corrected = !parsed.has("no-corrected");
  const auto integer = [&](const char* name, int64_t fallback) -> int64_t {
    const tidy::TidyOptionRow& row = tidy::find_tidy_option(name);
    return parsed.int_value(std::string(row.cli), static_cast<int>(fallback), static_cast<int>(row.min),
                            static_cast<int>(row.max));
  };
  options.tiny_step_us = integer("tiny_step_us", options.tiny_step_us);
  const profiler::Trace trace = trace::load(path, {.max_bytes = max_trace_bytes(parsed)});
  tidy::TidyReport report = tidy::analyse(trace, path, options);
  if (parsed.has("benchmark")) {
    const auto named = trace.facts.find("model");
    tidy::EstimateOptions estimate;
    estimate.model = parsed.value("model", named != trace.facts.end() ? named->second : std::string());
    estimate.runs = static_cast<int>(integer("runs", estimate.runs));
    tidy::estimate_savings(report, trace, estimate);
  }
  if (parsed.has("torchtidy-json")) report.write_torchtidy_json(parsed.value("torchtidy-json"));
  if (parsed.has("html")) tidy::write_html_report(report, trace, parsed.value("html"));
  std::fputs(parsed.has("json") ? (report.json() + "\n").c_str() : report.text().c_str(), stdout);
  return 0;
}

}  // namespace kiln
