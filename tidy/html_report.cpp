#include "tidy/html_report.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "profiler/key_averages.h"
#include "tidy/markup.h"

namespace kiln::tidy {
namespace {

constexpr int kTimeRows = 15;

constexpr const char* kStyle = R"(
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; width: 100%; margin: 0.5em 0; }
th, td { text-align: left; padding: 0.25em 0.6em; border-bottom: 1px solid #eee; vertical-align: top; }
td.number { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.bar { background: #4a7bd0; height: 0.8em; display: inline-block; }
.facts { color: #555; }
.saving { color: #17693a; font-weight: 600; }
.none { color: #888; }
code { font-size: 0.95em; }
.failed { color: #a61c00; font-weight: 600; }
table.summary th { background: #e3f1e7; }
pre { background: #f6f6f6; padding: 0.5em; overflow-x: auto; }
)";

std::string number(double value, int decimals = 3) {
  char text[48];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// Self time per key, largest first, as a table with bars (at most kTimeRows rows).
void time_table(std::ostringstream& out, const profiler::KeyAverages& averages, const char* key_name) {
  std::vector<const profiler::KeyAverage*> rows;
  for (const profiler::KeyAverage& row : averages.rows()) rows.push_back(&row);
  std::sort(rows.begin(), rows.end(), [](const auto* a, const auto* b) { return a->self_ns > b->self_ns; });
  const double total = static_cast<double>(std::max<int64_t>(averages.self_ns_total(), 1));
  out << "<table><tr><th>" << key_name << "</th><th>calls</th><th>self ms</th><th>share</th><th></th></tr>\n";
  for (size_t i = 0; i < rows.size() && i < static_cast<size_t>(kTimeRows); ++i) {
    const double share = 100.0 * static_cast<double>(rows[i]->self_ns) / total;
    out << "<tr><td><code>" << escape_markup(rows[i]->key) << "</code></td><td class=\"number\">"
        << rows[i]->calls << "</td><td class=\"number\">"
        << number(static_cast<double>(rows[i]->self_ns) * 1e-6) << "</td><td class=\"number\">"
        << number(share, 1) << "%</td><td style=\"width: 40%\"><span class=\"bar\" "
        << "style=\"width: " << number(share, 1) << "%\"></span></td></tr>\n";
  }
  out << "</table>\n";
}

// An id for a pattern's section: its name with anything but letters and digits as '-'.
std::string anchor(const std::string& pattern) {
  std::string id = "pattern-";
  for (const char c : pattern) id += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  return id;
}

}  // namespace

std::string html_report(const TidyReport& report, const profiler::Trace& trace) {
  const bool kiln_trace = trace.source == "kiln" || trace.source == "kiln_json";
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>kiln tidy: "
      << escape_markup(report.trace_name) << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n";
  out << "<h1>kiln tidy</h1>\n<p class=\"facts\">" << escape_markup(report.trace_name) << " ("
      << escape_markup(report.source) << ", " << report.events << " events";
  if (report.runs > 0) out << ", " << report.runs << " runs, " << number(report.run_ms) << " ms";
  out << ")";
  for (const char* fact : {"cpu", "cpu_capability", "framework_version", "kiln_version"}) {
    const auto found = trace.facts.find(fact);
    if (found != trace.facts.end()) out << "<br>" << fact << ": " << escape_markup(found->second);
  }
  out << "</p>\n";

  // The first screen: what to fix, savings first, one row per pattern.
  const std::vector<MatchGroup> groups = report.groups();
  out << "<h2 id=\"findings\">Findings</h2>\n";
  if (groups.empty()) out << "<p class=\"none\">No anti-pattern matched.</p>\n";
  std::vector<std::string> patterns;
  for (const MatchGroup& group : groups) {
    if (std::find(patterns.begin(), patterns.end(), group.pattern) == patterns.end())
      patterns.push_back(group.pattern);
  }
  if (!groups.empty()) {
    out << "<table class=\"summary\"><tr><th>pattern</th><th>matches</th><th>places</th><th>matched ms</th>"
           "<th>estimated saving ms</th></tr>\n";
    for (const std::string& pattern : patterns) {
      size_t matches = 0;
      size_t begin = groups.size();
      size_t end = 0;
      double time_ms = 0;
      std::optional<double> saving_ms;
      for (size_t i = 0; i < groups.size(); ++i) {
        const MatchGroup& group = groups[i];
        if (group.pattern != pattern) continue;
        begin = std::min(begin, i);
        end = i + 1;
        matches += group.matches;
        time_ms += group.time_ms;
        if (group.saving_ms) saving_ms = saving_ms.value_or(0) + *group.saving_ms;
      }
      const auto estimate = std::find_if(report.estimates.begin(), report.estimates.end(),
                                         [&](const PatternEstimate& e) { return e.pattern == pattern; });
      if (estimate != report.estimates.end() && estimate->saving_ms) saving_ms = estimate->saving_ms;
      out << "<tr><td><a href=\"#" << escape_markup(anchor(pattern)) << "\">" << escape_markup(pattern)
          << "</a></td><td class=\"number\">" << matches << "</td><td class=\"number\">"
          << distinct_places(groups, begin, end) << "</td><td class=\"number\">" << number(time_ms)
          << "</td><td class=\"number\">";
      if (saving_ms) {
        out << "<span class=\"saving\">" << number(*saving_ms) << "</span>";
      } else {
        out << "<span class=\"none\">not estimated</span>";
      }
      out << "</td></tr>\n";
    }
    out << "</table>\n";
  }
  for (const PatternNote& failure : report.failed) {
    out << "<p class=\"failed\">" << escape_markup(failure.pattern) << " failed:</p><pre>"
        << escape_markup(failure.text) << "</pre>\n";
  }

  out << "<h2 id=\"time\">Where the time went</h2>\n";
  out << report.time.svg();
  out << "<pre class=\"breakdown\">" << escape_markup(report.time.text()) << "</pre>\n";
  out << "<h3>By op</h3>\n";
  time_table(out, profiler::key_averages(trace, profiler::GroupBy::op), "op");
  if (kiln_trace) {
    out << "<h3>By backend</h3>\n";
    time_table(out, profiler::key_averages(trace, profiler::GroupBy::backend), "backend");
  }

  // One block per pattern: what to change once, then its causes and places.
  out << "<h2 id=\"details\">Findings in detail</h2>\n";
  for (const std::string& pattern : patterns) {
    const auto first = std::find_if(report.matches.begin(), report.matches.end(),
                                    [&](const TidyMatch& match) { return match.pattern == pattern; });
    const auto finding = std::find_if(report.findings.begin(), report.findings.end(),
                                      [&](const TidyFinding& f) { return f.pattern == pattern; });
    out << "<h3 id=\"" << escape_markup(anchor(pattern)) << "\">" << escape_markup(pattern) << " ("
        << report.count(pattern) << " matches)</h3>\n<p>" << escape_markup(first->message);
    if (finding != report.findings.end() && !finding->url.empty())
      out << " <a href=\"" << escape_markup(finding->url) << "\">more</a>";
    out << "</p>\n<table><tr><th>because</th><th>where</th><th>matches</th><th>runs</th><th>ms</th>"
           "<th>saving ms</th><th>first match</th></tr>\n";
    for (const MatchGroup& group : groups) {
      if (group.pattern != pattern) continue;
      out << "<tr><td>" << escape_markup(group.reason) << "</td><td><code>" << escape_markup(group.node)
          << "</code></td><td class=\"number\">" << group.matches << "</td><td class=\"number\">"
          << group.runs << "</td><td class=\"number\">" << number(group.time_ms)
          << "</td><td class=\"number\">" << (group.saving_ms ? number(*group.saving_ms) : std::string("-"))
          << "</td><td><code>" << escape_markup(group.detail) << "</code></td></tr>\n";
    }
    out << "</table>\n";
  }
  if (!report.estimates.empty()) {
    out << "<h2 id=\"estimates\">Estimated savings (measured on this machine)</h2>\n"
        << "<table><tr><th>pattern</th><th>matched ms</th><th>saving ms</th><th>how</th></tr>\n";
    for (const PatternEstimate& estimate : report.estimates) {
      out << "<tr><td>" << escape_markup(estimate.pattern) << "</td><td class=\"number\">"
          << number(estimate.matched_ms) << "</td><td class=\"number\">";
      if (estimate.saving_ms && *estimate.saving_ms < 0) {
        out << "<span class=\"none\">" << number(*estimate.saving_ms) << " (slower)</span>";
      } else if (estimate.saving_ms) {
        out << "<span class=\"saving\">" << number(*estimate.saving_ms) << "</span>";
      } else {
        out << "<span class=\"none\">not estimated</span>";
      }
      out << "</td><td>" << escape_markup(estimate.basis) << "</td></tr>\n";
    }
    out << "</table>\n";
    if (const std::optional<double> total = report.total_estimated_saving_ms(); !total) {
      out << "<p>Total estimated saving: <span class=\"none\">not estimated</span> (no fix could be "
             "measured; the reasons are above).</p>\n";
    } else if (report.run_ms > 0) {
      out << "<p>Total estimated saving: <span class=\"saving\">" << number(*total) << " ms</span> of "
          << number(report.run_ms) << " ms over " << report.runs << " runs.</p>\n";
    }
  }
  if (!report.caveats.empty() || !report.not_evaluated.empty() || !report.assumed.empty()) {
    out << "<h2>What the trace could not tell</h2>\n<ul>\n";
    for (const PatternNote& caveat : report.caveats)
      out << "<li>caveat: " << escape_markup(caveat.pattern) << ": " << escape_markup(caveat.text)
          << "</li>\n";
    for (const PatternNote& note : report.not_evaluated)
      out << "<li>not evaluated: " << escape_markup(note.pattern) << ": " << escape_markup(note.text)
          << "</li>\n";
    for (const std::string& flag : report.assumed) out << "<li>assumed: " << escape_markup(flag) << "</li>\n";
    out << "</ul>\n";
  }
  out << "</body>\n</html>\n";
  return out.str();
}

void write_html_report(const TidyReport& report, const profiler::Trace& trace, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(out.good(), invalid_argument, "tidy: cannot write ", path, " (does the directory exist?)");
  out << html_report(report, trace);
  KILN_CHECK(out.good(), invalid_argument, "tidy: writing ", path, " failed");
}

}  // namespace kiln::tidy
