// `kiln tidy TRACE`: reads a trace (PyTorch's Kineto JSON or legacy array, kiln's own, any Chrome
// trace) and reports anti-patterns with where in the user's code they come from: TorchTidy's
// patterns count for count, kiln's corrections, kiln's runtime patterns over kiln's own traces, the
// user's own patterns (--patterns, Python), and what the trace could not tell. `--benchmark`
// measures what fixing them would save; `--diff A B` compares two traces.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "profiler/trace_load.h"
#include "tidy/html_report.h"
#include "tidy/options.h"
#include "tidy/report.h"
#include "tidy/trace_diff.h"
#include "tidy/user_patterns.h"
#include "tidy_runner/estimate.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/trace_args.h"

namespace kiln {
namespace {

// Set in the environment of the Python that runs `kiln tidy --patterns` for the command line.
constexpr const char* kUnderPython = "KILN_TIDY_UNDER_PYTHON";

// User patterns are Python: the command runs again as `python3 -m kiln tidy ...`, whose module
// registers the pattern runner (tidy/user_patterns.h). Only returns by throwing.
[[noreturn]] void run_under_python(const std::vector<std::string>& args) {
  KILN_CHECK(std::getenv(kUnderPython) == nullptr, invalid_argument,
             "kiln tidy --patterns: kiln's Python module ran but did not register its pattern runner");
  const char* chosen = std::getenv("KILN_PYTHON");
  const std::string python = chosen != nullptr && *chosen != '\0' ? chosen : "/usr/bin/python3";
  // The build tree's package first (an installed kiln's is on Python's own path).
  const std::filesystem::path package = KILN_BUILD_PYTHON_DIR;
  std::error_code error;
  if (std::filesystem::exists(package / "kiln" / "__init__.py", error)) {
    const char* path = std::getenv("PYTHONPATH");
    const std::string value =
        path != nullptr && *path != '\0' ? str_cat(package.string(), ":", path) : package.string();
    setenv("PYTHONPATH", value.c_str(), 1);
  }
  setenv(kUnderPython, "1", 1);
  std::vector<std::string> argv_text = {python, "-m", "kiln", "tidy"};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& text : argv_text) argv.push_back(text.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  execvp(python.c_str(), argv.data());
  fail(ErrorKind::invalid_argument, "kiln tidy --patterns runs the patterns under Python: cannot run ",
       python, " (", std::strerror(errno), "; KILN_PYTHON names another)");
}

int command_diff(const ParsedArgs& parsed) {
  for (const auto& [name, value] : parsed.options) {
    KILN_CHECK(name == "diff" || name == "json" || name == "max-trace-bytes", invalid_argument, "--", name,
               " does not apply to --diff (it takes --json and --max-trace-bytes)");
  }
  KILN_CHECK(parsed.positional.size() == 2, invalid_argument,
             "kiln tidy --diff expects two traces, BEFORE and AFTER, got ", parsed.positional.size());
  const trace::LoadOptions load{.max_bytes = max_trace_bytes(parsed)};
  const profiler::Trace before = trace::load(parsed.positional[0], load);
  const profiler::Trace after = trace::load(parsed.positional[1], load);
  const tidy::TraceDiff diff = tidy::diff_traces(before, parsed.positional[0], after, parsed.positional[1]);
  std::fputs(parsed.has("json") ? (diff.json() + "\n").c_str() : diff.text().c_str(), stdout);
  return 0;
}

}  // namespace

int command_tidy(const std::vector<std::string>& args) {
  // The analysis's and the measurement's options from tidy's table, then what to write.
  std::vector<OptionSpec> specs;
  for (const tidy::TidyOptionRow& row : tidy::kTidyOptions) {
    const bool takes_value = row.type != tidy::TidyOptionType::boolean;
    specs.push_back({std::string(row.cli), takes_value,
                     row.type == tidy::TidyOptionType::integer
                         ? str_cat(row.help, " (default ", row.default_value, ")")
                         : std::string(row.help)});
  }
  for (OptionSpec spec : std::initializer_list<OptionSpec>{
           {"json", false,
            "print the report as one JSON object (counts, matches, groups, not_evaluated, caveats, failed)"},
           {"per-event", false, "list every matched event (TorchTidy's output) instead of grouped findings"},
           {"torchtidy-json", true,
            "DIR: also write DIR/torchtidy_report.json as TorchTidy lays it out (merged)"},
           {"html", true,
            "FILE: also write the report as one self-contained HTML page (grouped findings, where the time "
            "went, estimates)"},
           {"diff", false,
            "kiln tidy --diff BEFORE AFTER [--json]: what changed between two traces (time and calls per op, "
            "kernel and backend switches, reorders, plan changes), largest change first"},
           max_trace_bytes_option(""),
           {"help", false, "show this help"},
       })
    specs.push_back(std::move(spec));
  const ParsedArgs parsed = parse_args("tidy", args, specs);
  if (parsed.has("help")) {
    std::printf(
        "usage: kiln tidy TRACE [options]\n       kiln tidy --diff BEFORE AFTER [--json]\n\nReports "
        "anti-patterns in a trace (TorchTidy's patterns, as PyTorch 1.13 has them, and kiln's corrections, "
        "with the source line each comes from; kiln's runtime patterns in kiln's own traces; your own "
        "kiln.tidy.Pattern classes with --patterns), grouped by pattern, cause and place, savings first; "
        "with --benchmark what fixing them saves.\n\n%s",
        options_help(specs).c_str());
    return 0;
  }
  if (parsed.has("diff")) return command_diff(parsed);
  KILN_CHECK(parsed.positional.size() == 1, invalid_argument, "kiln tidy expects one TRACE file, got ",
             parsed.positional.size());
  // The options that say how to measure would be ignored without --benchmark.
  for (const auto& option : parsed.options) {
    const std::string& name = option.first;  // a name, not a binding: lambdas capture it (clang 14)
    const auto row = std::find_if(std::begin(tidy::kTidyOptions), std::end(tidy::kTidyOptions),
                                  [&](const tidy::TidyOptionRow& r) { return r.cli == name; });
    KILN_CHECK(parsed.has("benchmark") || row == std::end(tidy::kTidyOptions) || !row->measures,
               invalid_argument, "--", name, " applies to --benchmark (how the fixes are measured)");
  }
  const std::vector<std::string> pattern_files = parsed.values("patterns");
  if (!pattern_files.empty() && !tidy::pattern_file_runner()) run_under_python(args);
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
  if (!pattern_files.empty()) options.user_patterns = tidy::pattern_file_runner()(pattern_files, trace);
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
  std::fputs(
      parsed.has("json") ? (report.json() + "\n").c_str() : report.text(parsed.has("per-event")).c_str(),
      stdout);
  return 0;
}

}  // namespace kiln
