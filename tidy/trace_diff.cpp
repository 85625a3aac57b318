#include "tidy/trace_diff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "core/json_writer.h"
#include "tidy/event_tree.h"

namespace kiln::tidy {
namespace {

bool is_kiln(const profiler::Trace& trace) {
  return trace.source == "kiln" || trace.source == "kiln_json";
}

std::string shapes_text(const std::vector<Shape>& shapes) {
  std::string text;
  for (const Shape& shape : shapes) text += str_cat(text.empty() ? "" : " ", shape_to_string(shape));
  return text;
}

// kind, op, node, shapes: a kiln step is its node (its shapes may change with a fusion: a residual
// input more), a PyTorch op its name at each input shape.
using PlaceKey = std::tuple<std::string, std::string, std::string, std::string>;

struct Place {
  std::string shapes;  // kiln: the first event's input shapes
  int64_t self_ns = 0;
  int64_t calls = 0;
  std::map<std::pair<std::string, std::string>, int64_t> kernels;  // (kernel, backend): calls
};

struct Side {
  DiffTotals totals;
  std::map<PlaceKey, Place> places;
};

// Every compared event's self time (its time less its children's), by place.
Side summarise(const profiler::Trace& trace, const std::string& name) {
  Side side;
  side.totals.trace = name;
  side.totals.source = trace.source;
  const bool kiln = is_kiln(trace);
  const EventTree tree(trace);
  std::map<std::pair<std::string, int>, int> plans;  // (settings, steps): runs
  for (EventIndex i = 0; i < tree.size(); ++i) {
    const profiler::TraceEvent& event = tree.event(i);
    if (event.kind == EventKind::run) {
      ++side.totals.runs;
      ++plans[{event.settings, event.plan_steps}];
    }
    const bool compared = kiln ? (event.kind == EventKind::step || event.kind == EventKind::reorder)
                               : (event.kind == EventKind::op || event.kind == EventKind::python);
    if (!compared) continue;
    int64_t self_ns = event.duration_ns();
    for (const EventIndex child : tree.children(i)) self_ns -= tree.event(child).duration_ns();
    const std::string shapes = shapes_text(event.input_shapes);
    Place& place = side.places[{profiler::kind_name(event.kind), event.name, event.node, kiln ? "" : shapes}];
    if (place.calls == 0) place.shapes = shapes;
    place.self_ns += std::max<int64_t>(self_ns, 0);
    ++place.calls;
    if (kiln) ++place.kernels[{event.kernel, event.backend}];
  }
  int most = 0;
  for (const auto& [plan, runs] : plans) {
    if (runs <= most) continue;
    most = runs;
    side.totals.settings = plan.first;
    side.totals.plan_steps = plan.second;
  }
  return side;
}

DiffSide side_of(const Place* place, double per) {
  DiffSide side;
  if (place == nullptr) return side;
  side.present = true;
  side.ms = static_cast<double>(place->self_ns) * 1e-6 / per;
  side.calls = static_cast<double>(place->calls) / per;
  int64_t most = 0;
  for (const auto& [kernel, calls] : place->kernels) {
    if (calls <= most) continue;
    most = calls;
    side.kernel = kernel.first;
    side.backend = kernel.second;
  }
  return side;
}

std::string number(double value, int decimals = 3) {
  char text[48];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string side_text(const DiffSide& side) {
  if (!side.present) return "-";
  return str_cat(number(side.ms), " ms x", number(side.calls, side.calls == std::floor(side.calls) ? 0 : 2),
                 side.kernel.empty() ? "" : str_cat(" ", side.kernel));
}

void write_side(JsonWriter& json, const char* key, const DiffSide& side) {
  json.key(key);
  if (!side.present) {
    json.null();
    return;
  }
  json.begin_object().member("ms", side.ms).member("calls", side.calls);
  json.member("kernel", side.kernel).member("backend", side.backend).end_object();
}

void write_totals(JsonWriter& json, const char* key, const DiffTotals& totals) {
  json.key(key).begin_object().member("trace", totals.trace).member("source", totals.source);
  json.member("runs", totals.runs).member("ms", totals.ms).member("settings", totals.settings);
  json.member("plan_steps", totals.plan_steps).end_object();
}

}  // namespace

TraceDiff diff_traces(const profiler::Trace& before, const std::string& before_name,
                      const profiler::Trace& after, const std::string& after_name) {
  KILN_CHECK(is_kiln(before) == is_kiln(after), invalid_argument,
             "tidy --diff compares two kiln traces or two ", "PyTorch traces: ", before_name, " is ",
             before.source, ", ", after_name, " is ", after.source);
  Side a = summarise(before, before_name);
  Side b = summarise(after, after_name);
  const bool kiln = is_kiln(before);
  // kiln traces compare one run's worth (traces record different numbers of runs).
  const double per_a = kiln ? std::max(a.totals.runs, 1) : 1.0;
  const double per_b = kiln ? std::max(b.totals.runs, 1) : 1.0;
  TraceDiff diff;
  std::map<PlaceKey, std::pair<const Place*, const Place*>> keys;
  for (const auto& [key, place] : a.places) keys[key].first = &place;
  for (const auto& [key, place] : b.places) keys[key].second = &place;
  for (const auto& [key, places] : keys) {
    DiffRow row{std::get<0>(key),
                std::get<1>(key),
                std::get<2>(key),
                (places.second != nullptr ? places.second : places.first)->shapes,
                side_of(places.first, per_a),
                side_of(places.second, per_b),
                {}};
    if (!row.before.present) {
      row.change = "appeared";
    } else if (!row.after.present) {
      row.change = "disappeared";
    } else if (row.before.backend != row.after.backend) {
      row.change = "backend switched";
    } else if (row.before.kernel != row.after.kernel) {
      row.change = "kernel switched";
    }
    a.totals.ms += row.before.ms;
    b.totals.ms += row.after.ms;
    diff.rows.push_back(std::move(row));
  }
  std::stable_sort(diff.rows.begin(), diff.rows.end(), [](const DiffRow& x, const DiffRow& y) {
    const double dx = std::abs(x.delta_ms());
    const double dy = std::abs(y.delta_ms());
    if (dx != dy) return dx > dy;
    return !x.change.empty() && y.change.empty();
  });
  if (kiln) {
    if (a.totals.settings != b.totals.settings)
      diff.plan_changes.push_back(str_cat("settings: ", a.totals.settings, " -> ", b.totals.settings));
    if (a.totals.plan_steps != b.totals.plan_steps)
      diff.plan_changes.push_back(str_cat("plan steps: ", a.totals.plan_steps, " -> ", b.totals.plan_steps));
  }
  diff.before = std::move(a.totals);
  diff.after = std::move(b.totals);
  return diff;
}

std::string TraceDiff::text(size_t rows_shown) const {
  std::ostringstream out;
  const bool per_run = before.source == "kiln" || before.source == "kiln_json";
  out << "kiln tidy --diff (self time" << (per_run ? " per run" : "") << ", largest change first)\n";
  out << "before: " << before.trace << " (" << before.source
      << (per_run ? str_cat(", ", before.runs, " runs") : "") << "): " << number(before.ms) << " ms\n";
  out << "after:  " << after.trace << " (" << after.source
      << (per_run ? str_cat(", ", after.runs, " runs") : "") << "): " << number(after.ms) << " ms ("
      << (after.ms >= before.ms ? "+" : "") << number(after.ms - before.ms) << " ms)\n";
  for (const std::string& change : plan_changes) out << "plan: " << change << "\n";
  std::map<std::string, int> changes;
  for (const DiffRow& row : rows) {
    if (!row.change.empty()) ++changes[row.change];
  }
  for (const auto& [change, n] : changes) out << change << ": " << n << "\n";
  out << "\n";
  for (size_t i = 0; i < rows.size() && i < rows_shown; ++i) {
    const DiffRow& row = rows[i];
    out << (row.delta_ms() >= 0 ? "+" : "") << number(row.delta_ms()) << " ms  " << row.kind << " " << row.op;
    if (!row.node.empty()) out << " '" << row.node << "'";
    if (!row.shapes.empty()) out << " " << row.shapes;
    out << "\n    " << side_text(row.before) << "  ->  " << side_text(row.after);
    if (!row.change.empty()) {
      out << "  [" << row.change;
      if (row.change == "backend switched") out << ": " << row.before.backend << " -> " << row.after.backend;
      out << "]";
    }
    out << "\n";
  }
  // Every switch, appearance and disappearance, even past the table.
  size_t unchanged_left = 0;
  bool header = false;
  for (size_t i = rows_shown; i < rows.size(); ++i) {
    const DiffRow& row = rows[i];
    if (row.change.empty()) {
      ++unchanged_left;
      continue;
    }
    if (!header) out << "other changes, largest first:\n";
    header = true;
    out << "  " << (row.delta_ms() >= 0 ? "+" : "") << number(row.delta_ms()) << " ms  " << row.kind << " "
        << row.op;
    if (!row.node.empty()) out << " '" << row.node << "'";
    out << "  [" << row.change;
    if (row.change == "backend switched") out << ": " << row.before.backend << " -> " << row.after.backend;
    out << "]\n";
  }
  if (unchanged_left > 0)
    out << "... and " << unchanged_left << " more places whose time alone changed (--json lists all)\n";
  return out.str();
}

std::string TraceDiff::json() const {
  JsonWriter json;
  json.begin_object();
  write_totals(json, "before", before);
  write_totals(json, "after", after);
  json.key("plan_changes").value(plan_changes);
  json.key("rows").begin_array();
  for (const DiffRow& row : rows) {
    json.begin_object().member("kind", row.kind).member("op", row.op).member("node", row.node);
    json.member("shapes", row.shapes).member("change", row.change).member("delta_ms", row.delta_ms());
    write_side(json, "before", row.before);
    write_side(json, "after", row.after);
    json.end_object();
  }
  json.end_array();
  json.end_object();
  return json.take();
}

}  // namespace kiln::tidy
