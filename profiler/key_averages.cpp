#include "profiler/key_averages.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "core/json_writer.h"
#include "profiler/roofline.h"

namespace kiln::profiler {
namespace {

constexpr const char* kGroupNames[] = {"op", "node", "backend", "kernel", "shape"};

std::string event_key(const TraceEvent& event, GroupBy group) {
  if (event.kind != EventKind::step && event.kind != EventKind::reorder) return event.name;
  switch (group) {
    case GroupBy::op:
      return event.name;
    case GroupBy::node:
      return event.node;
    case GroupBy::backend:
      return event.backend;
    case GroupBy::kernel:
      return event.kernel;
    case GroupBy::shape: {
      const std::string shapes = input_shapes_text(event);
      return shapes.empty() ? event.name : event.name + " " + shapes;
    }
  }
  return event.name;
}

// "812.345us", "12.345ms", "1.234s".
std::string time_text(int64_t ns) {
  char text[32];
  const double value = static_cast<double>(ns);
  if (ns < 1'000'000) {
    std::snprintf(text, sizeof text, "%.3fus", value / 1e3);
  } else if (ns < 1'000'000'000) {
    std::snprintf(text, sizeof text, "%.3fms", value / 1e6);
  } else {
    std::snprintf(text, sizeof text, "%.3fs", value / 1e9);
  }
  return text;
}

// "512 B", "-1.50 MiB".
std::string bytes_text(int64_t bytes) {
  char text[32];
  const double magnitude = static_cast<double>(bytes < 0 ? -bytes : bytes);
  if (magnitude < 1024) {
    std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  } else if (magnitude < 1024.0 * 1024) {
    std::snprintf(text, sizeof text, "%.2f KiB", static_cast<double>(bytes) / 1024);
  } else {
    std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024));
  }
  return text;
}

std::string percent_text(int64_t part, int64_t whole) {
  char text[16];
  std::snprintf(text, sizeof text, "%.2f%%",
                whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0);
  return text;
}

// The sort keys table() and json() take; PyTorch's names map onto kiln's.
enum class SortKey { self_time, total_time, avg_time, calls, gflops, self_memory, memory, name };

// kiln's name of a sort key (the first of its names in parse_sort_key's list).
const char* sort_key_name(SortKey key) {
  static const char* const kNames[] = {"self_time", "total_time",  "avg_time", "calls",
                                       "gflops",    "self_memory", "memory",   "name"};
  return kNames[static_cast<size_t>(key)];
}

SortKey parse_sort_key(std::string_view name) {
  static const std::pair<std::string_view, SortKey> kKeys[] = {
      {"self_time", SortKey::self_time},
      {"total_time", SortKey::total_time},
      {"avg_time", SortKey::avg_time},
      {"calls", SortKey::calls},
      {"gflops", SortKey::gflops},
      {"self_memory", SortKey::self_memory},
      {"memory", SortKey::memory},
      {"name", SortKey::name},
      {"self_cpu_time_total", SortKey::self_time},
      {"cpu_time_total", SortKey::total_time},
      {"cpu_time", SortKey::avg_time},
      {"count", SortKey::calls},
      {"self_cpu_memory_usage", SortKey::self_memory},
      {"cpu_memory_usage", SortKey::memory},
  };
  std::string known;
  for (const auto& [key, value] : kKeys) {
    if (key == name) return value;
    known += str_cat(known.empty() ? "" : ", ", key);
  }
  fail(ErrorKind::invalid_argument, "unknown sort key '", name, "' (expected one of ", known, ")");
}

}  // namespace

GroupBy parse_group_by(std::string_view name) {
  for (size_t i = 0; i < std::size(kGroupNames); ++i) {
    if (name == kGroupNames[i]) return static_cast<GroupBy>(i);
  }
  fail(ErrorKind::invalid_argument, "unknown group_by '", name,
       "' (expected op, node, backend, kernel or shape)");
}

const char* group_by_name(GroupBy group) {
  return kGroupNames[static_cast<size_t>(group)];
}

std::string input_shapes_text(const TraceEvent& event) {
  std::string text;
  for (const Shape& shape : event.input_shapes)
    text += str_cat(text.empty() ? "" : " ", shape_to_string(shape));
  return text;
}

KeyAverages::KeyAverages(std::vector<KeyAverage> rows, GroupBy group, bool memory_recorded, bool bounds)
    : rows_(std::move(rows)), group_(group), memory_recorded_(memory_recorded), bounds_(bounds) {
  for (const KeyAverage& row : rows_) self_ns_total_ += row.self_ns;
}

KeyAverages key_averages(const Trace& trace, GroupBy group, const Roofline* roofline, Isa isa) {
  const size_t count = trace.events.size();
  std::vector<int64_t> child_ns(count + 1, 0);  // by id: time of children on the same thread
  std::vector<int64_t> self_memory(count + 1, 0);
  std::vector<int64_t> memory(count + 1, 0);
  for (const TraceEvent& event : trace.events) {
    const TraceEvent* parent = trace.find(event.parent_id);
    if (event.kind == EventKind::memory) {
      if (parent != nullptr) self_memory[parent->id] += event.memory_bytes;
      for (; parent != nullptr; parent = trace.find(parent->parent_id))
        memory[parent->id] += event.memory_bytes;
      continue;
    }
    if (parent != nullptr && parent->thread == event.thread) child_ns[parent->id] += event.duration_ns();
  }

  const int64_t model_weight_bytes = roofline != nullptr ? weight_bytes_per_run(trace) : 0;
  std::map<std::string, KeyAverage> by_key;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == EventKind::memory) continue;
    const std::string key = event_key(event, group);
    auto [it, added] = by_key.try_emplace(key);
    KeyAverage& row = it->second;
    const bool is_step = event.kind == EventKind::step || event.kind == EventKind::reorder;
    if (added) {
      row.key = key;
      row.kind = kind_name(event.kind);
      row.backend = event.backend;
      row.kernel = event.kernel;
    } else {
      if (row.kind != kind_name(event.kind)) row.kind = "(several)";
      if (is_step && row.backend != event.backend) row.backend = "(several)";
      if (is_step && row.kernel != event.kernel) row.kernel = "(several)";
    }
    ++row.calls;
    row.total_ns += event.duration_ns();
    row.self_ns += std::max<int64_t>(0, event.duration_ns() - child_ns[event.id]);
    row.flops += event.flops;
    row.self_memory += self_memory[event.id];
    row.memory += memory[event.id];
    if (is_step && roofline != nullptr) {
      const StepBound bound =
          step_bound(*roofline, isa, event_work(event), model_weight_bytes, std::max(event.threads, 1),
                     static_cast<double>(event.duration_ns()) * 1e-6);
      row.bound_ns += static_cast<int64_t>(bound.bound_ms * 1e6);
      row.compute_bound_calls += bound.bounded && bound.compute_bound ? 1 : 0;
      if (!bound.bounded) {
        ++row.unbounded_calls;
        row.unbounded_ns += event.duration_ns();
      }
    }
  }
  std::vector<KeyAverage> rows;
  rows.reserve(by_key.size());
  for (auto& entry : by_key) rows.push_back(std::move(entry.second));
  return KeyAverages(std::move(rows), group, trace.memory_recorded, roofline != nullptr);
}

std::vector<const KeyAverage*> KeyAverages::sorted(std::string_view sort_by) const {
  const SortKey key = parse_sort_key(sort_by);
  std::vector<const KeyAverage*> order;
  for (const KeyAverage& row : rows_) order.push_back(&row);
  const auto value = [key](const KeyAverage& row) -> double {
    switch (key) {
      case SortKey::self_time:
        return static_cast<double>(row.self_ns);
      case SortKey::total_time:
        return static_cast<double>(row.total_ns);
      case SortKey::avg_time:
        return static_cast<double>(row.total_ns) / static_cast<double>(std::max<int64_t>(row.calls, 1));
      case SortKey::calls:
        return static_cast<double>(row.calls);
      case SortKey::gflops:
        return row.gflops_per_s();
      case SortKey::self_memory:
        return static_cast<double>(row.self_memory);
      case SortKey::memory:
        return static_cast<double>(row.memory);
      case SortKey::name:
        return 0;
    }
    return 0;
  };
  std::stable_sort(order.begin(), order.end(), [&](const KeyAverage* a, const KeyAverage* b) {
    if (key == SortKey::name) return a->key < b->key;
    return value(*a) > value(*b);
  });
  return order;
}

std::string KeyAverages::table(std::string_view sort_by, int row_limit) const {
  std::vector<const KeyAverage*> order = sorted(sort_by);
  if (row_limit > 0 && order.size() > static_cast<size_t>(row_limit))
    order.resize(static_cast<size_t>(row_limit));
  constexpr size_t kMaxName = 48;
  size_t name_width = 4;
  for (const KeyAverage* row : order) name_width = std::max(name_width, std::min(row->key.size(), kMaxName));
  const auto name_cell = [&](const std::string& key) {
    return key.size() <= kMaxName ? key : key.substr(0, kMaxName - 3) + "...";
  };
  std::string text;
  char line[512];
  const int width = static_cast<int>(name_width);
  const auto row_text = [&](const std::string& name, const std::string& self_pct, const std::string& self,
                            const std::string& total_pct, const std::string& total, const std::string& avg,
                            const std::string& calls, const std::string& gflops, const std::string& bound,
                            const std::string& of_bound, const std::string& self_mem, const std::string& mem,
                            const std::string& kernel) {
    std::snprintf(line, sizeof line, "%-*s  %8s  %12s  %8s  %12s  %12s  %6s  %8s", width, name.c_str(),
                  self_pct.c_str(), self.c_str(), total_pct.c_str(), total.c_str(), avg.c_str(),
                  calls.c_str(), gflops.c_str());
    std::string result = line;
    if (bounds_) {
      std::snprintf(line, sizeof line, "  %5s  %8s", bound.c_str(), of_bound.c_str());
      result += line;
    }
    if (memory_recorded_) {
      std::snprintf(line, sizeof line, "  %11s  %11s", self_mem.c_str(), mem.c_str());
      result += line;
    }
    return result + (kernel.empty() ? "" : "  " + kernel) + "\n";
  };
  const std::string kernel_heading = group_ == GroupBy::kernel ? "Backend" : "Kernel";
  const std::string header =
      row_text("Name", "Self %", "Self time", "Total %", "Total time", "Avg time", "Calls", "GFLOP/s",
               "Bound", "Of bound", "Self mem", "Mem", kernel_heading);
  const std::string rule(header.size() - 1, '-');
  text += rule + "\n" + header + rule + "\n";
  for (const KeyAverage* row : order) {
    char gflops[32] = "";
    if (row->flops > 0) std::snprintf(gflops, sizeof gflops, "%.1f", row->gflops_per_s());
    const bool is_step = row->kind == "step" || row->kind == "reorder" || row->kind == "(several)";
    const std::string kernel = is_step ? (group_ == GroupBy::kernel ? row->backend : row->kernel) : "";
    std::string bound;
    std::string of_bound;
    const int64_t bounded_calls = row->calls - row->unbounded_calls;
    const int64_t bounded_ns = row->total_ns - row->unbounded_ns;
    if (bounds_ && is_step && bounded_calls > 0 && bounded_ns > 0) {
      bound = row->compute_bound_calls == bounded_calls ? "C" : row->compute_bound_calls == 0 ? "M" : "C+M";
      of_bound = percent_text(row->bound_ns, bounded_ns);
    }
    text += row_text(name_cell(row->key), percent_text(row->self_ns, self_ns_total_), time_text(row->self_ns),
                     percent_text(row->total_ns, self_ns_total_), time_text(row->total_ns),
                     time_text(row->total_ns / std::max<int64_t>(row->calls, 1)), std::to_string(row->calls),
                     gflops, bound, of_bound, bytes_text(row->self_memory), bytes_text(row->memory), kernel);
  }
  text += rule + "\n";
  text += str_cat("Self time total: ", time_text(self_ns_total_), " (grouped by ", group_by_name(group_),
                  ", sorted by ", sort_key_name(parse_sort_key(sort_by)), ")\n");
  return text;
}

std::string KeyAverages::json(std::string_view sort_by) const {
  JsonWriter json;
  json.begin_object();
  json.member("group_by", group_by_name(group_));
  json.member("self_ns_total", self_ns_total_);
  json.member("memory_recorded", memory_recorded_);
  json.key("rows").begin_array();
  for (const KeyAverage* row : sorted(sort_by)) {
    json.begin_object();
    json.member("key", row->key);
    json.member("kind", row->kind);
    json.member("calls", row->calls);
    json.member("self_ns", row->self_ns);
    json.member("total_ns", row->total_ns);
    json.member("flops", row->flops);
    json.key("gflops_per_s").value(row->gflops_per_s(), 3);
    json.member("self_memory_bytes", row->self_memory);
    json.member("memory_bytes", row->memory);
    json.member("backend", row->backend);
    json.member("kernel", row->kernel);
    if (bounds_) {
      json.member("bound_ns", row->bound_ns);
      json.member("compute_bound_calls", row->compute_bound_calls);
      json.member("unbounded_calls", row->unbounded_calls);
    }
    json.end_object();
  }
  json.end_array();
  json.end_object();
  return json.take();
}

}  // namespace kiln::profiler
