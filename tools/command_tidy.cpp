// `kiln tidy TRACE`: reads a trace (PyTorch's Kineto JSON or legacy array, kiln's own, any Chrome
// trace) and reports anti-patterns with where in the user's code they come from: TorchTidy's
// patterns count for count, kiln's corrections, and what the trace could not tell.
#include <cstdio>

#include "core/error.h"
#include "profiler/trace_load.h"
#include "tidy/report.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/trace_args.h"

namespace kiln {

int command_tidy(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> specs = {
      {"json", false, "print the report as one JSON object (counts, matches, not_evaluated, caveats)"},
      {"torchtidy-json", true, "DIR: also write DIR/torchtidy_report.json as TorchTidy lays it out (merged)"},
      {"name", true,
       "REGEX: also report events whose name matches REGEX (TorchTidy's NamePattern; repeatable)"},
      {"no-corrected", false, "only TorchTidy's patterns, without kiln's corrected ones"},
      max_trace_bytes_option(""),
      {"help", false, "show this help"},
  };
  const ParsedArgs parsed = parse_args("tidy", args, specs);
  if (parsed.has("help")) {
    std::printf(
        "usage: kiln tidy TRACE [options]\n\nReports anti-patterns in a trace (TorchTidy's patterns, as "
        "PyTorch "
        "1.13 has them, and kiln's corrections), with the source line each comes from.\n\n%s",
        options_help(specs).c_str());
    return 0;
  }
  KILN_CHECK(parsed.positional.size() == 1, invalid_argument, "kiln tidy expects one TRACE file, got ",
             parsed.positional.size());
  const std::string& path = parsed.positional[0];
  tidy::TidyOptions options;
  options.name_patterns = parsed.values("name");
  options.corrected = !parsed.has("no-corrected");
  const profiler::Trace trace = trace::load(path, {.max_bytes = max_trace_bytes(parsed)});
  const tidy::TidyReport report = tidy::analyse(trace, path, options);
  if (parsed.has("torchtidy-json")) report.write_torchtidy_json(parsed.value("torchtidy-json"));
  std::fputs(parsed.has("json") ? (report.json() + "\n").c_str() : report.text().c_str(), stdout);
  return 0;
}

}  // namespace kiln
