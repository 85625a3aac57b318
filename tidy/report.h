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
#include "tidy/time_breakdown.h"
#include "tidy/user_patterns.h"

namespace kiln::tidy {

struct TidyOptions {
  std::vector<std::string> name_patterns;  // a NamePattern per regex, after the others
  bool corrected = true;                   // kiln's corrected patterns (corrected_patterns.h)
  // TinyOpMultithreadedPattern's threshold: steps shorter than this are tiny (tidy/options.h).
  int64_t tiny_step_us = tidy_option("tiny_step_us").default_value;
  // User patterns run over the trace (tidy/user_patterns.h), reported after the built-ins.
  std::vector<PatternResult> user_patterns{};
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
  std::string node;     // the step's node (kiln traces), else the event's name
  std::string reason;   // Pattern::reason: why, in words every match with this cause shares
  uint64_t run_id = 0;  // the run it happened in (kiln traces), 0 outside one
};

// A pattern's matches with one reason at one node, what a person acts on once: TorchTidy's per-event
// output folded (a fallback step matches once per run; the group says how many runs).
struct MatchGroup {
  std::string pattern;
  std::string reason;
  std::string node;
  std::string detail;  // the first match's (Pattern::detail), an example of the group
  size_t matches = 0;
  size_t runs = 0;  // distinct runs among the matches (0: outside runs)
  double time_ms = 0;
  std::optional<double> saving_ms;  // estimate_savings, summed over the matches estimated
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
  std::vector<PatternNote> failed;         // user patterns that raised: the traceback
  TimeBreakdown time;                      // where the trace's time went

  size_t count(const std::string& pattern) const;
  // The matches grouped by pattern, reason and node: the patterns by their estimated saving (then
  // their matched time), largest first; within one, its groups likewise.
  std::vector<MatchGroup> groups() const;
  // The grouped findings, savings first; `per_event`: TorchTidy's per-event lines instead.
  std::string text(bool per_event = false) const;
  // The estimated savings over all patterns, ms (each event's saving counted once per pattern);
  // nothing when no pattern's saving was estimated.
  std::optional<double> total_estimated_saving_ms() const;
  // {"trace", "source", "events", "counts": {pattern: n}, "matches": [{"pattern", "message", "file",
  // "line", "event_id", "detail", "time_ms", "estimated_saving_ms" where estimated, "fix", "node",
  // "reason", "run_id"}], "groups": [{"pattern", "reason", "node", "detail", "matches", "runs", "time_ms",
  // "estimated_saving_ms"}], "failed": [{"pattern", "traceback"}], "time": TimeBreakdown::json(),
  // "not_evaluated":
  // [{"pattern", "reason"}], "caveats": [{"pattern", "caveat"}], "assumed": [...], "exact_locations",
  // "runs", "run_ms", and after estimate_savings "estimates": [{"pattern", "matched_ms",
  // "estimated_saving_ms" (null: not estimated), "basis"}] and "total_estimated_saving_ms" (null:
  // nothing estimated)}.
  std::string json() const;
  // TorchTidy's layout: {file: [{"line_number", "name", "url", "message"}]} for each distinct finding
  // with a location, merged into `directory`/torchtidy_report.json if it exists (its keys replaced,
  // as TorchTidy does). Throws invalid_argument naming the file if it cannot be read or written.
  void write_torchtidy_json(const std::string& directory) const;
};

// The places (nodes) of groups[begin, end): a node matched for two reasons is one place.
size_t distinct_places(const std::vector<MatchGroup>& groups, size_t begin, size_t end);

TidyReport analyse(const profiler::Trace& trace, const std::string& trace_name,
                   const TidyOptions& options = {});

}  // namespace kiln::tidy
