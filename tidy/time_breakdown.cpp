#include "tidy/time_breakdown.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/json_writer.h"
#include "tidy/event_tree.h"
#include "tidy/markup.h"
#include "tidy/step_flow.h"

namespace kiln::tidy {
namespace {

std::string number(double value, int decimals = 3) {
  char text[48];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// The category of an event's self time.
std::string category_of(const profiler::TraceEvent& event) {
  switch (event.kind) {
    case EventKind::step:
      return "compute: " + (event.backend.empty() ? std::string("unknown") : event.backend);
    case EventKind::reorder:
      return "data movement";
    case EventKind::plan:
      return "planning";
    case EventKind::run:
      return "waiting";
    case EventKind::op:
      return "compute: ops";
    case EventKind::python:
      return "python";
    default:
      return "other";
  }
}

// The slowest parallel-mode run's longest chain of dependent steps (by the data flow).
std::vector<CriticalPath> critical_path(const EventTree& tree, const StepFlow& flow) {
  std::vector<int64_t> chain_ns(tree.size(), 0);
  std::vector<EventIndex> previous(tree.size(), kNoEvent);
  std::map<EventIndex, std::pair<EventIndex, std::vector<uint32_t>>> runs;  // run: (its chain's end, threads)
  for (EventIndex i = 0; i < tree.size(); ++i) {  // start order: producers before readers
    const profiler::TraceEvent& event = tree.event(i);
    if (!is_step(event)) continue;
    const EventIndex run = flow.run_of(i);
    if (run == kNoEvent) continue;
    int64_t before = 0;
    for (size_t input = 0; input < event.inputs.size(); ++input) {
      const EventIndex producer = flow.producer(i, input);
      if (producer != kNoEvent && chain_ns[producer] > before) {
        before = chain_ns[producer];
        previous[i] = producer;
      }
    }
    chain_ns[i] = before + event.duration_ns();
    auto& [end, threads] = runs.try_emplace(run, i, std::vector<uint32_t>{}).first->second;
    if (chain_ns[i] > chain_ns[end]) end = i;
    if (std::find(threads.begin(), threads.end(), event.thread) == threads.end())
      threads.push_back(event.thread);
  }
  CriticalPath slowest;
  for (const auto& [run, found] : runs) {
    if (found.second.size() < 2) continue;
    ++slowest.parallel_runs;
    const double run_ms = static_cast<double>(tree.event(run).duration_ns()) * 1e-6;
    if (slowest.run_id != 0 && run_ms <= slowest.run_ms) continue;
    slowest.run_id = tree.event(run).id;
    slowest.run_ms = run_ms;
    slowest.path_ms = static_cast<double>(chain_ns[found.first]) * 1e-6;
    slowest.steps.clear();
    for (EventIndex at = found.first; at != kNoEvent; at = previous[at])
      slowest.steps.push_back(tree.event(at).node);
    std::reverse(slowest.steps.begin(), slowest.steps.end());
  }
  if (slowest.parallel_runs == 0) return {};
  return {slowest};
}

RunOverlap overlap_of(const profiler::Trace& trace) {
  RunOverlap overlap;
  std::vector<std::pair<int64_t, int>> edges;
  int64_t run_ns = 0;
  for (const profiler::TraceEvent& event : trace.events) {
    if (event.kind != EventKind::run) continue;
    ++overlap.runs;
    run_ns += event.duration_ns();
    edges.emplace_back(event.start_ns, 1);
    edges.emplace_back(event.end_ns, -1);
  }
  std::sort(edges.begin(), edges.end());  // ends (-1) before starts at the same time
  int in_flight = 0;
  int64_t since = 0;
  int64_t covered = 0;
  int64_t overlapped = 0;
  for (const auto& [time, change] : edges) {
    if (in_flight >= 1) covered += time - since;
    if (in_flight >= 2) overlapped += time - since;
    in_flight += change;
    overlap.most_at_once = std::max(overlap.most_at_once, in_flight);
    since = time;
  }
  overlap.covered_ms = static_cast<double>(covered) * 1e-6;
  overlap.overlapped_ms = static_cast<double>(overlapped) * 1e-6;
  overlap.mean_in_flight = covered > 0 ? static_cast<double>(run_ns) / static_cast<double>(covered) : 0;
  return overlap;
}

// A fixed colour per category, so the picture and its legend agree across reports.
const char* colour_of(const std::string& category) {
  static const std::pair<const char*, const char*> kColours[] = {
      {"compute: onednn", "#4a7bd0"}, {"compute: blas", "#6aa84f"}, {"compute: winograd", "#8e7cc3"},
      {"compute: native", "#e69138"}, {"compute: ops", "#4a7bd0"},  {"data movement", "#cc4125"},
      {"planning", "#f1c232"},        {"waiting", "#999999"},       {"python", "#45818e"},
  };
  for (const auto& [name, colour] : kColours) {
    if (category == name) return colour;
  }
  return category.starts_with("compute") ? "#3d85c6" : "#b4a7d6";
}

}  // namespace

TimeBreakdown time_breakdown(const EventTree& tree, const StepFlow& flow) {
  const profiler::Trace& trace = tree.trace();
  TimeBreakdown breakdown;
  if (trace.events.empty()) return breakdown;
  int64_t first = trace.events.front().start_ns;
  int64_t last = first;
  for (const profiler::TraceEvent& event : trace.events) {
    first = std::min(first, event.start_ns);
    last = std::max(last, event.end_ns);
  }
  breakdown.span_ms = static_cast<double>(last - first) * 1e-6;
  std::vector<std::map<std::string, int64_t>> self_by_thread(std::max<size_t>(trace.threads.size(), 1));
  std::vector<int64_t> busy_by_thread(self_by_thread.size(), 0);
  for (EventIndex i = 0; i < tree.size(); ++i) {
    const profiler::TraceEvent& event = tree.event(i);
    if (event.thread >= self_by_thread.size()) continue;
    if (event.kind == EventKind::memory) continue;  // instants
    int64_t self_ns = event.duration_ns();
    for (const EventIndex child : tree.children(i)) {
      if (tree.event(child).thread == event.thread) self_ns -= tree.event(child).duration_ns();
    }
    self_by_thread[event.thread][category_of(event)] += std::max<int64_t>(self_ns, 0);
    const EventIndex parent = tree.parent(i);
    if (parent == kNoEvent || tree.event(parent).thread != event.thread)
      busy_by_thread[event.thread] += event.duration_ns();
  }
  for (size_t t = 0; t < self_by_thread.size(); ++t) {
    if (self_by_thread[t].empty()) continue;
    ThreadTime thread;
    thread.name = t < trace.threads.size()
                      ? (trace.threads[t].name.empty() ? str_cat("thread ", trace.threads[t].os_thread)
                                                       : trace.threads[t].name)
                      : "thread";
    for (const auto& [category, ns] : self_by_thread[t])
      thread.categories.emplace_back(category, static_cast<double>(ns) * 1e-6);
    std::sort(thread.categories.begin(), thread.categories.end(),
              [](const auto& a, const auto& b) { return a.second > b.second; });
    thread.busy_ms = static_cast<double>(busy_by_thread[t]) * 1e-6;
    thread.idle_ms = std::max(0.0, breakdown.span_ms - thread.busy_ms);
    breakdown.threads.push_back(std::move(thread));
  }
  breakdown.critical_path = critical_path(tree, flow);
  breakdown.overlap = overlap_of(trace);
  return breakdown;
}

std::string TimeBreakdown::text() const {
  std::ostringstream out;
  out << "Where the time went (" << number(span_ms) << " ms span; self time per thread):\n";
  for (const ThreadTime& thread : threads) {
    out << "  " << thread.name << ": ";
    for (const auto& [category, ms] : thread.categories) out << category << " " << number(ms) << " ms, ";
    out << "idle " << number(thread.idle_ms) << " ms\n";
  }
  for (const CriticalPath& path : critical_path) {
    out << "  critical path of the slowest parallel run (run " << path.run_id << ", " << number(path.run_ms)
        << " ms): " << number(path.path_ms) << " ms through " << path.steps.size()
        << " dependent steps; the rest is waiting and overhead (" << path.parallel_runs
        << " parallel runs)\n";
  }
  if (overlap.most_at_once > 1) {
    out << "  concurrent runs: up to " << overlap.most_at_once << " at once, "
        << number(overlap.mean_in_flight, 2) << " in flight on average; " << number(overlap.overlapped_ms)
        << " of " << number(overlap.covered_ms) << " ms overlapped\n";
  }
  return out.str();
}

std::string TimeBreakdown::json() const {
  JsonWriter json;
  json.begin_object().member("span_ms", span_ms);
  json.key("threads").begin_array();
  for (const ThreadTime& thread : threads) {
    json.begin_object()
        .member("name", thread.name)
        .member("busy_ms", thread.busy_ms)
        .member("idle_ms", thread.idle_ms);
    json.key("categories").begin_object();
    for (const auto& [category, ms] : thread.categories) json.member(category, ms);
    json.end_object().end_object();
  }
  json.end_array();
  json.key("critical_path").begin_array();
  for (const CriticalPath& path : critical_path) {
    json.begin_object()
        .member("run_id", path.run_id)
        .member("run_ms", path.run_ms)
        .member("path_ms", path.path_ms);
    json.key("steps").value(path.steps);
    json.member("parallel_runs", path.parallel_runs).end_object();
  }
  json.end_array();
  json.key("overlap")
      .begin_object()
      .member("runs", overlap.runs)
      .member("most_at_once", overlap.most_at_once);
  json.member("covered_ms", overlap.covered_ms).member("overlapped_ms", overlap.overlapped_ms);
  json.member("mean_in_flight", overlap.mean_in_flight).end_object();
  json.end_object();
  return json.take();
}

std::string TimeBreakdown::svg() const {
  constexpr int kLabel = 160, kBar = 560, kRow = 26;
  std::vector<std::string> legend;
  std::ostringstream bars;
  int y = 0;
  for (const ThreadTime& thread : threads) {
    bars << "<text x=\"0\" y=\"" << y + 17 << "\" class=\"label\">" << escape_markup(thread.name)
         << "</text>\n";
    double x = kLabel;
    auto segment = [&](const std::string& category, double ms, const char* colour) {
      const double width = span_ms > 0 ? kBar * ms / span_ms : 0;
      if (width <= 0) return;
      bars << "<rect x=\"" << number(x, 1) << "\" y=\"" << y + 4 << "\" width=\"" << number(width, 1)
           << "\" height=\"18\" fill=\"" << colour << "\"><title>" << escape_markup(category) << ": "
           << number(ms) << " ms</title></rect>\n";
      x += width;
      if (std::find(legend.begin(), legend.end(), category) == legend.end()) legend.push_back(category);
    };
    for (const auto& [category, ms] : thread.categories) segment(category, ms, colour_of(category));
    segment("idle", thread.idle_ms, "#eeeeee");
    y += kRow;
  }
  std::ostringstream out;
  const int legend_rows = static_cast<int>((legend.size() + 3) / 4);
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"time-breakdown\" width=\"" << kLabel + kBar + 10
      << "\" height=\"" << y + 8 + legend_rows * 20
      << "\" role=\"img\" aria-label=\"time per thread by category\">\n"
      << "<style>.label { font: 12px sans-serif; fill: #333; }</style>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"#f8f5ec\"/>\n"
      << bars.str();
  for (size_t i = 0; i < legend.size(); ++i) {
    const int lx = static_cast<int>(i % 4) * 180;
    const int ly = y + 8 + static_cast<int>(i / 4) * 20;
    out << "<rect x=\"" << lx << "\" y=\"" << ly << "\" width=\"12\" height=\"12\" fill=\""
        << (legend[i] == "idle" ? "#eeeeee" : colour_of(legend[i])) << "\"/><text x=\"" << lx + 16
        << "\" y=\"" << ly + 11 << "\" class=\"label\">" << escape_markup(legend[i]) << "</text>\n";
  }
  out << "</svg>\n";
  return out.str();
}

}  // namespace kiln::tidy
