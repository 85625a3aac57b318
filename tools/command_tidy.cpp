// `kiln tidy TRACE`: reads a trace (PyTorch's Kineto JSON or legacy array, kiln's own, any Chrome
// trace) and reports anti-patterns with where in the user's code they come from: TorchTidy's
// patterns count for count, kiln's corrections, kiln's runtime patterns over kiln's own traces, and
// what the trace could not tell. `--benchmark` measures what fixing kiln's patterns would save.
#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "profiler/trace_load.h"
#include "tidy/html_report.h"
#include "tidy/report.h"
#include "tidy_runner/estimate.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/setting_options.h"
#include "tools/trace_args.h"

namespace kiln {

int command_tidy(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> own_specs = {
      {"json", false, "print the report as one JSON object (counts, matches, not_evaluated, caveats)"},
      {"benchmark", false,
       "measure what fixing kiln's runtime patterns saves, on this machine (the model planned again at the "
       "trace's shapes, under the settings given here and under each fix)"},
      {"model", true, "MODEL: with --benchmark, the ONNX file the trace ran (default: the one it names)"},
      {"runs", true, "N: with --benchmark, timed runs per measurement (default 20)"},
      {"torchtidy-json", true, "DIR: also write DIR/torchtidy_report.json as TorchTidy lays it out (merged)"},
      {"html", true,
       "FILE: also write the report as one self-contained HTML page (time by op and backend, findings, "
       "estimates)"},
      {"name", true,
       "REGEX: also report events whose name matches REGEX (TorchTidy's NamePattern; repeatable)"},
      {"tiny-step-us", true,
       "US: TinyOpMultithreadedPattern counts steps shorter than US microseconds as tiny (default 20)"},
      {"no-corrected", false,
       "leave out kiln's corrected versions of TorchTidy's patterns (kiln's runtime patterns stay)"},
      max_trace_bytes_option(""),
      {"help", false, "show this help"},
  };
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
  // Settings, --model and --runs say how to measure: without --benchmark they would be ignored.
  for (const auto& option : parsed.options) {
    const std::string& name = option.first;
    const bool own = std::any_of(own_specs.begin(), own_specs.end(),
                                 [&](const OptionSpec& spec) { return spec.name == name; });
    KILN_CHECK(parsed.has("benchmark") || (own && name != "model" && name != "runs"), invalid_argument, "--",
               name, " applies to --benchmark (how the fixes are measured)");
  }
  apply_setting_options(parsed);
  const std::string& path = parsed.positional[0];
  tidy::TidyOptions options;
  options.name_patterns = parsed.values("name");
  options.corrected = !parsed.has("no-corrected");
  options.tiny_step_us = parsed.int_value("tiny-step-us", static_cast<int>(options.tiny_step_us), 1,
                                          static_cast<int>(tidy::kMaxTinyStepUs));
  const profiler::Trace trace = trace::load(path, {.max_bytes = max_trace_bytes(parsed)});
  tidy::TidyReport report = tidy::analyse(trace, path, options);
  if (parsed.has("benchmark")) {
    const auto named = trace.facts.find("model");
    tidy::EstimateOptions estimate;
    estimate.model = parsed.value("model", named != trace.facts.end() ? named->second : std::string());
    estimate.runs = parsed.int_value("runs", 20, 1, 1 << 20);
    tidy::estimate_savings(report, trace, estimate);
  }
  if (parsed.has("torchtidy-json")) report.write_torchtidy_json(parsed.value("torchtidy-json"));
  if (parsed.has("html")) tidy::write_html_report(report, trace, parsed.value("html"));
  std::fputs(parsed.has("json") ? (report.json() + "\n").c_str() : report.text().c_str(), stdout);
  return 0;
}

}  // namespace kiln
