// Runs the patterns over a trace and reports like TorchTidy's report_all_anti_patterns: the distinct
// messages with their source locations, a summary line per matched pattern, and what kiln adds:
// patterns not evaluated (and why), caveats where a rule is wrong for the trace, flags assumed.
// As text, as JSON, and as TorchTidy's torchtidy_report.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "profiler/trace.h"
#include "tidy/kiln_patterns.h"
#include "tidy/source_location.h"

namespace kiln::tidy {

struct TidyOptions {
  std::vector<std::string> name_patterns;  // a NamePattern per regex, after the others
  bool corrected = true;                   // kiln's corrected patterns (corrected_patterns.h)
  // TinyOpMultithreadedPattern's threshold: steps shorter than this are tiny (tidy/options.h).
  int64_t tiny_step_us = tidy_option("tiny_step_us").default_value;
};

struct TidyMatch {
  std::string pattern;
  std::string message;  // the pattern's description
  SourceLocation location;
  uint64_t event_id = 0;
  std::string detail;  // kiln's patterns: the step or run, and why (Pattern::detail)
  double time_ms = 0;  // the matched event's time in the trace
  // Measured by estimate_savings (tidy_runner/estimate.h): what the fix saves for this event, on this
  // machine.
  std::optional<double> estimated_saving_ms;
  Fix fix;  // what fixing it changes, as its pattern declares it (Fix::steps index trace.events)
};

// What a pattern's fix saves over all its matches, TorchTidy's "Total Estimated Speedup".
struct PatternEstimate {
  std::string pattern;
  double matched_ms = 0;            // the matched events' time in the trace
  std::optional<double> saving_ms;  // over the matches estimated; none: not estimated
  std::string basis;                // how it was measured, or why it was not
};

// One distinct report message (TorchTidy reports each once, at its first match's location).
struct TidyFinding {
  std::string pattern;
  std::string url;
  std::string description;
  std::string message;  // Pattern::report: the description and "[Source Code Location] ..."
  SourceLocation location;
  std::string detail;  // kiln's patterns: the step or run, and why
};

struct PatternNote {
  std::string pattern;
  std::string text;
};

struct TidyReport {
  std::string trace_name;  // the file, or what the trace came from
  std::string source;      // Trace::source
  size_t events = 0;
  std::vector<std::pair<std::string, size_t>> counts;  // every pattern run, in order (0 when skipped)
  std::vector<TidyMatch> matches;                      // every match, pattern by pattern, traversal order
  std::vector<TidyFinding> findings;
  std::vector<std::string> summaries;      // Pattern::summary of each pattern that matched
  std::vector<PatternNote> not_evaluated;  // skipped, or blind to what the trace lacks: the reason
  std::vector<PatternNote> caveats;        // where a pattern that matched is wrong for this trace
  std::vector<std::string> assumed;        // flags the trace lacks, taken at PyTorch's default
  bool exact_locations = true;             // false: locations are enclosing functions' first lines
  double run_ms = 0;                       // kiln traces: the runs' time, what savings compare with
  int runs = 0;
  std::vector<PatternEstimate> estimates;  // estimate_savings: per matched pattern it can estimate

  size_t count(const std::string& pattern) const;
  std::string text() const;
  // The estimated savings over all patterns, ms (each event's saving counted once per pattern).
  double total_estimated_saving_ms() const;
  // {"trace", "source", "events", "counts": {pattern: n}, "matches": [{"pattern", "message", "file",
  // "line", "event_id", "detail", "time_ms", "estimated_saving_ms" where estimated}], "not_evaluated":
  // [{"pattern", "reason"}], "caveats": [{"pattern", "caveat"}], "assumed": [...], "exact_locations",
  // "runs", "run_ms", and after estimate_savings "estimates": [{"pattern", "matched_ms",
  // "estimated_saving_ms" (null: not estimated), "basis"}] and "total_estimated_saving_ms"}.
  std::string json() const;
  // TorchTidy's layout: {file: [{"line_number", "name", "url", "message"}]} for each distinct finding
  // with a location, merged into `directory`/torchtidy_report.json if it exists (its keys replaced,
  // as TorchTidy does). Throws invalid_argument naming the file if it cannot be read or written.
  void write_torchtidy_json(const std::string& directory) const;
};

TidyReport analyse(const profiler::Trace& trace, const std::string& trace_name,
                   const TidyOptions& options = {});

}  // namespace kiln::tidy
