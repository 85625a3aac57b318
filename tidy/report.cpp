#include "tidy/report.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>

#include "core/error.h"
#include "core/json_writer.h"
#include "tidy/corrected_patterns.h"
#include "tidy/kiln_patterns.h"
#include "tidy/torchtidy_patterns.h"

namespace kiln::tidy {
namespace {

constexpr const char* kTorchTidyReportFile = "torchtidy_report.json";

std::vector<std::unique_ptr<Pattern>> patterns_for(const TidyOptions& options) {
  std::vector<std::unique_ptr<Pattern>> patterns = torchtidy_patterns();
  for (std::unique_ptr<Pattern>& pattern : kiln_patterns(options.tiny_step_us * 1000))
    patterns.push_back(std::move(pattern));
  if (options.corrected) {
    for (std::unique_ptr<Pattern>& pattern : corrected_patterns()) patterns.push_back(std::move(pattern));
  }
  for (const std::string& regex : options.name_patterns) patterns.push_back(name_pattern(regex));
  return patterns;
}

// The members of the JSON object in `path` as JSON text, in the file's order (empty if no file).
std::vector<std::pair<std::string, std::string>> existing_members(const std::filesystem::path& path) {
  std::vector<std::pair<std::string, std::string>> members;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return members;
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), invalid_argument, "tidy: cannot read ", path.string());
  std::stringstream text;
  text << in.rdbuf();
  rapidjson::Document document;
  document.Parse(text.str().c_str());
  KILN_CHECK(!document.HasParseError(), invalid_argument, "tidy: ", path.string(), " is not JSON (byte ",
             document.GetErrorOffset(), ": ", rapidjson::GetParseError_En(document.GetParseError()),
             "); remove it or write the report elsewhere");
  KILN_CHECK(document.IsObject(), invalid_argument, "tidy: ", path.string(),
             " is not a TorchTidy report (expected a JSON object of files)");
  const auto first = document.MemberBegin();
  for (rapidjson::SizeType i = 0; i < document.MemberCount(); ++i) {
    const auto& member = first[i];
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
    member.value.Accept(writer);
    members.emplace_back(std::string(member.name.GetString(), member.name.GetStringLength()),
                         buffer.GetString());
  }
  return members;
}

std::string format_ms(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f ms", ms);
  return text;
}

// TorchTidy's speedup: the time before over the time after.
std::string speedup_text(double total_ms, double saving_ms) {
  if (total_ms <= 0) return "no matched time";
  if (saving_ms >= total_ms) return "all of it";
  char text[32];
  std::snprintf(text, sizeof text, "%.2fX", total_ms / (total_ms - saving_ms));
  return text;
}

}  // namespace

namespace {

// The run `index` happened in (its id), or 0 outside runs.
uint64_t run_of(const EventTree& tree, EventIndex index) {
  for (EventIndex at = index; at != kNoEvent; at = tree.parent(at)) {
    if (tree.event(at).kind == EventKind::run) return tree.event(at).id;
  }
  return 0;
}

// Where a match is, for grouping: the step's node in a kiln trace, the user's line in a PyTorch trace
// that records it, else the event's name.
std::string node_of(const EventTree& tree, EventIndex index, const SourceLocation& location) {
  const TraceEvent& event = tree.event(index);
  if (!event.node.empty()) return event.node;
  if (location.found()) return location.text();
  return event.name;
}

// Runs `pattern` over the tree and adds what it found to `report`.
void run_pattern(Pattern& pattern, const TidyContext& context, std::set<std::string>& reported,
                 TidyReport& report) {
  const EventTree& tree = context.tree;
  const std::string name = pattern.name();
  const bool readable = pattern.reads_any_trace() || pattern.reads_kiln_steps() != context.from_pytorch;
  Reason not_evaluated;
  if (!readable) {
    not_evaluated = context.from_pytorch
                        ? "a PyTorch trace: the pattern reads kiln's runs and plan steps"
                        : "a kiln trace: the pattern looks for PyTorch's operators and Python calls";
  } else if (Reason skipped = pattern.skip(context)) {
    not_evaluated = skipped;
  } else {
    not_evaluated = pattern.cannot_see(context);
  }
  std::vector<EventIndex> matched;
  if (readable) matched = pattern.matched_events(context);
  if (not_evaluated) report.not_evaluated.push_back({name, *not_evaluated});
  report.counts.emplace_back(name, matched.size());
  if (matched.empty()) return;
  if (Reason caveat = pattern.caveat(context)) report.caveats.push_back({name, *caveat});
  report.summaries.push_back(pattern.summary(context, matched));
  const std::string description = pattern.description();
  for (const EventIndex event : matched) {
    const SourceLocation location = context.location(event);
    std::string detail = pattern.detail(context, event);
    TidyMatch match;
    match.pattern = name;
    match.message = description;
    match.location = location;
    match.event_id = tree.event(event).id;
    match.detail = detail;
    match.time_ms = static_cast<double>(tree.event(event).duration_ns()) * 1e-6;
    match.fix = pattern.fix(context, event);
    match.node = node_of(tree, event, location);
    match.reason = pattern.reason(context, event);
    match.run_id = run_of(tree, event);
    report.matches.push_back(std::move(match));
    std::string message = pattern.report(context, event);
    if (!reported.insert(message).second) continue;
    report.findings.push_back(
        {name, pattern.url(), description, std::move(message), location, std::move(detail)});
  }
}

}  // namespace

TidyReport analyse(const profiler::Trace& trace, const std::string& trace_name, const TidyOptions& options) {
  with_context("tidy", [&] { checked_tidy_option(find_tidy_option("tiny_step_us"), options.tiny_step_us); });
  std::vector<std::unique_ptr<Pattern>> patterns = patterns_for(options);
  const EventTree tree(trace);
  const TidyContext context(tree);
  TidyReport report;
  report.trace_name = trace_name;
  report.source = trace.source;
  report.events = trace.events.size();
  report.assumed = context.assumed;
  report.exact_locations = context.caller_frames || !context.with_stack;
  for (const TraceEvent& event : trace.events) {
    if (event.kind != EventKind::run) continue;
    ++report.runs;
    report.run_ms += static_cast<double>(event.duration_ns()) * 1e-6;
  }
  report.time = time_breakdown(tree, context.flow);
  std::set<std::string> reported;
  for (const std::unique_ptr<Pattern>& pattern : patterns) run_pattern(*pattern, context, reported, report);
  for (const PatternResult& result : options.user_patterns) {
    if (!result.failure.empty()) {
      report.failed.push_back({result.name, result.failure});
      continue;
    }
    for (const EventIndex event : result.matched) {
      KILN_CHECK(event < tree.size(), invalid_argument, "tidy: user pattern '", result.name,
                 "' matched event index ", event, ", the trace has ", tree.size(), " events");
    }
    for (const Fix& fix : result.fixes) {
      for (const EventIndex step : fix.steps) {
        KILN_CHECK(step < tree.size(), invalid_argument, "tidy: user pattern '", result.name,
                   "' declared a fix removing event index ", step, ", the trace has ", tree.size(),
                   " events");
      }
    }
    run_pattern(*recorded_pattern(result), context, reported, report);
  }
  return report;
}

std::optional<double> TidyReport::total_estimated_saving_ms() const {
  std::optional<double> total;
  for (const PatternEstimate& estimate : estimates) {
    if (estimate.saving_ms) total = total.value_or(0) + *estimate.saving_ms;
  }
  return total;
}

size_t TidyReport::count(const std::string& pattern) const {
  for (const auto& [name, n] : counts) {
    if (name == pattern) return n;
  }
  return 0;
}

std::vector<MatchGroup> TidyReport::groups() const {
  struct Building {
    MatchGroup group;
    std::set<uint64_t> runs;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Building> by_key;
  std::map<std::string, std::pair<double, double>> pattern_order;  // pattern: saving, time
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> reason_order;  // likewise
  for (const TidyMatch& match : matches) {
    Building& building = by_key[{match.pattern, match.reason, match.node}];
    MatchGroup& group = building.group;
    if (group.matches == 0) {
      group.pattern = match.pattern;
      group.reason = match.reason;
      group.node = match.node;
      group.detail = match.detail;
    }
    ++group.matches;
    group.time_ms += match.time_ms;
    if (match.run_id != 0) building.runs.insert(match.run_id);
    if (match.estimated_saving_ms) group.saving_ms = group.saving_ms.value_or(0) + *match.estimated_saving_ms;
    for (auto* order : {&pattern_order[match.pattern], &reason_order[{match.pattern, match.reason}]}) {
      order->first += match.estimated_saving_ms.value_or(0);
      order->second += match.time_ms;
    }
  }
  // A pattern estimated as a whole (not per match) ranks by its estimate.
  for (const PatternEstimate& estimate : estimates) {
    const auto found = pattern_order.find(estimate.pattern);
    if (found != pattern_order.end() && estimate.saving_ms)
      found->second.first = std::max(found->second.first, *estimate.saving_ms);
  }
  std::vector<MatchGroup> groups;
  for (auto& [key, building] : by_key) {
    building.group.runs = building.runs.size();
    groups.push_back(std::move(building.group));
  }
  // Patterns by saving then time, ties by name; within one its reasons likewise, then its nodes.
  const auto key = [&](const MatchGroup& group) {
    return std::tuple{pattern_order.at(group.pattern), group.pattern,
                      reason_order.at({group.pattern, group.reason}), group.reason,
                      std::pair{group.saving_ms.value_or(0), group.time_ms}};
  };
  std::stable_sort(groups.begin(), groups.end(), [&](const MatchGroup& a, const MatchGroup& b) {
    const auto ka = key(a);
    const auto kb = key(b);
    if (std::get<0>(ka) != std::get<0>(kb)) return std::get<0>(ka) > std::get<0>(kb);
    if (std::get<1>(ka) != std::get<1>(kb)) return std::get<1>(ka) < std::get<1>(kb);
    if (std::get<2>(ka) != std::get<2>(kb)) return std::get<2>(ka) > std::get<2>(kb);
    if (std::get<3>(ka) != std::get<3>(kb)) return std::get<3>(ka) < std::get<3>(kb);
    return std::get<4>(ka) > std::get<4>(kb);
  });
  return groups;
}

namespace {

constexpr size_t kPlacesShown = 5;  // per reason in the grouped text; the JSON has every group

}  // namespace

size_t distinct_places(const std::vector<MatchGroup>& groups, size_t begin, size_t end) {
  std::set<std::string_view> places;
  for (size_t i = begin; i < end; ++i) places.insert(groups[i].node);
  return places.size();
}

namespace {

std::string count_text(size_t n, const char* one, const char* many) {
  return str_cat(n, " ", n == 1 ? one : many);
}

// The grouped findings: per pattern its totals and advice, per reason its places, largest first.
void grouped_text(std::ostringstream& out, const TidyReport& report) {
  const std::vector<MatchGroup> groups = report.groups();
  out << "Findings (" << count_text(report.matches.size(), "match", "matches")
      << ", estimated savings first; --per-event lists each):\n";
  for (size_t begin = 0; begin < groups.size();) {
    size_t end = begin;
    size_t matches = 0;
    double time_ms = 0;
    std::optional<double> saving_ms;
    while (end < groups.size() && groups[end].pattern == groups[begin].pattern) {
      matches += groups[end].matches;
      time_ms += groups[end].time_ms;
      if (groups[end].saving_ms) saving_ms = saving_ms.value_or(0) + *groups[end].saving_ms;
      ++end;
    }
    const std::string& pattern = groups[begin].pattern;
    out << pattern << ": " << count_text(matches, "match", "matches") << " at "
        << count_text(distinct_places(groups, begin, end), "place", "places") << ", " << format_ms(time_ms)
        << " matched";
    const auto estimate = std::find_if(report.estimates.begin(), report.estimates.end(),
                                       [&](const PatternEstimate& e) { return e.pattern == pattern; });
    if (estimate != report.estimates.end() && estimate->saving_ms) saving_ms = estimate->saving_ms;
    if (saving_ms) {
      out << ", estimated saving " << format_ms(*saving_ms);
    } else if (estimate != report.estimates.end()) {
      out << ", not estimated";
    }
    out << "\n";
    const auto first = std::find_if(report.matches.begin(), report.matches.end(),
                                    [&](const TidyMatch& match) { return match.pattern == pattern; });
    if (first != report.matches.end()) out << "  " << first->message << "\n";
    for (size_t reason_begin = begin; reason_begin < end;) {
      size_t reason_end = reason_begin;
      size_t reason_matches = 0;
      while (reason_end < end && groups[reason_end].reason == groups[reason_begin].reason)
        reason_matches += groups[reason_end++].matches;
      const std::string indent = groups[reason_begin].reason.empty() ? "  " : "    ";
      if (!groups[reason_begin].reason.empty()) {
        out << "  because " << groups[reason_begin].reason << ": "
            << count_text(reason_matches, "match", "matches") << " at "
            << count_text(reason_end - reason_begin, "place", "places") << "\n";
      }
      for (size_t i = reason_begin; i < reason_end && i < reason_begin + kPlacesShown; ++i) {
        const MatchGroup& group = groups[i];
        out << indent << group.node << ": " << count_text(group.matches, "match", "matches");
        if (group.runs > 0) out << " in " << count_text(group.runs, "run", "runs");
        out << ", " << format_ms(group.time_ms);
        if (group.saving_ms) out << ", saves " << format_ms(*group.saving_ms);
        out << "\n";
      }
      if (reason_end - reason_begin > kPlacesShown) {
        double rest_ms = 0;
        for (size_t i = reason_begin + kPlacesShown; i < reason_end; ++i) rest_ms += groups[i].time_ms;
        out << indent << "... and "
            << count_text(reason_end - reason_begin - kPlacesShown, "more place", "more places") << " ("
            << format_ms(rest_ms) << ")\n";
      }
      reason_begin = reason_end;
    }
    begin = end;
  }
}

}  // namespace

std::string TidyReport::text(bool per_event) const {
  const std::string rule(40, '-');
  std::ostringstream out;
  out << rule << "kiln tidy" << rule << "\n";
  out << "trace: " << trace_name << " (" << source << ", " << events << " events)\n";
  if (per_event) {
    out << "Matched Events:\n";
    for (const TidyFinding& finding : findings) {
      if (finding.detail.empty()) {
        out << finding.location.text() << ": " << finding.pattern << ": " << finding.description << "\n";
      } else {
        out << finding.pattern << ": " << finding.detail << "\n";
      }
    }
  } else {
    grouped_text(out, *this);
  }
  out << "Summary:\n";
  for (const std::string& summary : summaries) out << summary << "\n";
  if (!estimates.empty()) {
    out << "Estimates (each fix measured on this machine at the trace's shapes):\n";
    for (const PatternEstimate& estimate : estimates) {
      out << estimate.pattern << ": ";
      if (estimate.saving_ms) {
        out << "Total Estimated Speedup: " << format_ms(*estimate.saving_ms) << " of "
            << format_ms(estimate.matched_ms) << " matched ("
            << speedup_text(estimate.matched_ms, *estimate.saving_ms) << "); " << estimate.basis << "\n";
      } else {
        out << "not estimated: " << estimate.basis << "\n";
      }
    }
    const std::optional<double> saving = total_estimated_saving_ms();
    if (!saving) {
      out << "Total Estimated Speedup: not estimated (no fix could be measured; the reasons are above)\n";
    } else if (run_ms > 0) {
      out << "Total Estimated Speedup: " << format_ms(*saving) << " of " << format_ms(run_ms) << " over "
          << runs << " runs (" << speedup_text(run_ms, *saving) << ")\n";
    }
  }
  for (const PatternNote& failure : failed)
    out << "failed: " << failure.pattern << " raised:\n" << failure.text << "\n";
  out << time.text();
  for (const PatternNote& caveat : caveats)
    out << "caveat: " << caveat.pattern << ": " << caveat.text << "\n";
  if (!not_evaluated.empty()) {
    // Patterns sharing a reason on one line (every TorchTidy rule on a kiln trace says the same).
    out << "Not evaluated:\n";
    std::vector<std::pair<std::string, std::string>> by_reason;  // reason, patterns
    for (const PatternNote& note : not_evaluated) {
      const auto same = std::find_if(by_reason.begin(), by_reason.end(),
                                     [&](const auto& entry) { return entry.first == note.text; });
      if (same == by_reason.end()) {
        by_reason.emplace_back(note.text, note.pattern);
      } else {
        same->second += ", " + note.pattern;
      }
    }
    for (const auto& [reason, names] : by_reason) out << names << ": " << reason << "\n";
  }
  for (const std::string& flag : assumed) out << "assumed: " << flag << "\n";
  if (!exact_locations && !findings.empty()) {
    out << "locations: the first line of the enclosing function outside PyTorch (this trace records no "
           "caller frames; PyTorch's live profiler does, read it with kiln.tidy.report(prof))\n";
  }
  out << rule << "kiln tidy" << rule << "\n";
  return out.str();
}

namespace {

// {"kind", "what", "settings": {name: value}, "step_ids": [...], "torch_fix"}: the last three where
// the kind has them. Steps are written as event ids, as matches name events.
void write_fix(JsonWriter& json, const Fix& fix) {
  json.key("fix").begin_object().member("kind", fix_kind_name(fix.kind)).member("what", fix.what);
  if (fix.kind == Fix::Kind::settings) {
    json.key("settings").begin_object();
    for (const auto& [name, value] : fix.settings) json.member(name, value);
    json.end_object();
  }
  if (fix.kind == Fix::Kind::step_removed) {
    json.key("step_ids").begin_array();
    for (const EventIndex step : fix.steps) json.value(static_cast<uint64_t>(step) + 1);
    json.end_array();
  }
  if (fix.kind == Fix::Kind::torch_benchmark) json.member("torch_fix", fix.torch_fix);
  json.end_object();
}

}  // namespace

std::string TidyReport::json() const {
  JsonWriter json;
  json.begin_object();
  json.member("trace", trace_name).member("source", source).member("events", static_cast<uint64_t>(events));
  json.key("counts").begin_object();
  for (const auto& [name, n] : counts) json.member(name, static_cast<uint64_t>(n));
  json.end_object();
  json.key("matches").begin_array();
  for (const TidyMatch& match : matches) {
    json.begin_object().member("pattern", match.pattern).member("message", match.message);
    json.key("file");
    if (match.location.found()) {
      json.value(match.location.file).member("line", match.location.line);
    } else {
      json.null().key("line").null();
    }
    json.member("event_id", match.event_id);
    if (!match.detail.empty()) json.member("detail", match.detail);
    json.member("time_ms", match.time_ms);
    if (match.estimated_saving_ms) json.member("estimated_saving_ms", *match.estimated_saving_ms);
    write_fix(json, match.fix);
    json.member("node", match.node).member("reason", match.reason).member("run_id", match.run_id);
    json.end_object();
  }
  json.end_array();
  json.key("groups").begin_array();
  for (const MatchGroup& group : groups()) {
    json.begin_object()
        .member("pattern", group.pattern)
        .member("reason", group.reason)
        .member("node", group.node)
        .member("detail", group.detail)
        .member("matches", static_cast<uint64_t>(group.matches))
        .member("runs", static_cast<uint64_t>(group.runs))
        .member("time_ms", group.time_ms)
        .key("estimated_saving_ms");
    if (group.saving_ms) {
      json.value(*group.saving_ms);
    } else {
      json.null();
    }
    json.end_object();
  }
  json.end_array();
  json.key("time").raw(time.json());
  json.key("failed").begin_array();
  for (const PatternNote& failure : failed) {
    json.begin_object().member("pattern", failure.pattern).member("traceback", failure.text).end_object();
  }
  json.end_array();
  json.key("not_evaluated").begin_array();
  for (const PatternNote& note : not_evaluated) {
    json.begin_object().member("pattern", note.pattern).member("reason", note.text).end_object();
  }
  json.end_array();
  json.key("caveats").begin_array();
  for (const PatternNote& caveat : caveats) {
    json.begin_object().member("pattern", caveat.pattern).member("caveat", caveat.text).end_object();
  }
  json.end_array();
  json.key("assumed").value(assumed);
  json.member("exact_locations", exact_locations);
  json.member("runs", runs).member("run_ms", run_ms);
  if (!estimates.empty()) {
    json.key("estimates").begin_array();
    for (const PatternEstimate& estimate : estimates) {
      json.begin_object().member("pattern", estimate.pattern).member("matched_ms", estimate.matched_ms);
      json.key("estimated_saving_ms");
      if (estimate.saving_ms) {
        json.value(*estimate.saving_ms);
      } else {
        json.null();
      }
      json.member("basis", estimate.basis).end_object();
    }
    json.end_array();
    json.key("total_estimated_saving_ms");
    if (const std::optional<double> total = total_estimated_saving_ms()) {
      json.value(*total);
    } else {
      json.null();
    }
  }
  json.end_object();
  return json.take();
}

void TidyReport::write_torchtidy_json(const std::string& directory) const {
  const std::filesystem::path path = std::filesystem::path(directory) / kTorchTidyReportFile;
  // TorchTidy groups by file, in the order files first appear.
  std::vector<std::string> files;
  std::map<std::string, std::vector<const TidyFinding*>> by_file;
  for (const TidyFinding& finding : findings) {
    if (!finding.location.found()) continue;  // TorchTidy raises here; its layout has no place for it
    std::vector<const TidyFinding*>& entries = by_file[finding.location.file];
    if (entries.empty()) files.push_back(finding.location.file);
    entries.push_back(&finding);
  }
  const auto write_file = [](JsonWriter& json, const std::vector<const TidyFinding*>& entries) {
    json.begin_array();
    for (const TidyFinding* finding : entries) {
      json.begin_object()
          .member("line_number", finding->location.line)
          .member("name", finding->pattern)
          .member("url", finding->url)
          .member("message", finding->description)
          .end_object();
    }
    json.end_array();
  };
  // TorchTidy's dict.update: files already in the report keep their place and take the new entries.
  JsonWriter json;
  json.begin_object();
  for (const auto& [file, value] : existing_members(path)) {
    json.key(file);
    const auto ours = by_file.find(file);
    if (ours == by_file.end()) {
      json.raw(value);
    } else {
      write_file(json, ours->second);
      by_file.erase(ours);
    }
  }
  for (const std::string& file : files) {
    const auto ours = by_file.find(file);
    if (ours == by_file.end()) continue;  // written in its place above
    json.key(file);
    write_file(json, ours->second);
  }
  json.end_object();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(out.good(), invalid_argument, "tidy: cannot write ", path.string(),
             " (does the directory exist?)");
  out << json.text() << "\n";
  KILN_CHECK(out.good(), invalid_argument, "tidy: writing ", path.string(), " failed");
}

}  // namespace kiln::tidy
