#include "profiler/trace_load.h"

#include <sys/mman.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <optional>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "profiler/fields.h"
#include "profiler/trace_json.h"

namespace kiln::trace {
namespace {

using profiler::EventKind;
using Type = JsonValue::Type;

// Kineto's categories (libkineto's ActivityType names) that kiln reads as its own kinds.
EventKind kind_of_category(std::string_view category) {
  if (category == "cpu_op") return EventKind::op;
  if (category == "user_annotation") return EventKind::annotation;
  if (category == "python_function") return EventKind::python;
  return EventKind::other;
}

std::optional<int64_t> integer(const JsonValue& value) {
  if (value.type != Type::number) return std::nullopt;
  int64_t result = 0;
  const char* end = value.text.data() + value.text.size();
  const auto [stop, error] = std::from_chars(value.text.data(), end, result);
  if (error != std::errc() || stop != end) return std::nullopt;
  return result;
}

// A number of µs as written ("1234", "1234.567", "1.2e3") in ns: exact to the ns for decimals (what
// Kineto writes), rounded half up beyond three decimals. `fractional` is set when it has a decimal
// point (a writer with ns precision writes "12.000" for a whole µs).
std::optional<int64_t> microseconds_to_ns(const std::string& text, bool& fractional) {
  constexpr int64_t kMaxMicroseconds = 9'000'000'000'000'000;  // ~285 years: ns still fit in int64
  if (text.find_first_of("eE") != std::string::npos) {
    const double value = std::strtod(text.c_str(), nullptr);
    if (!std::isfinite(value) || std::fabs(value) > static_cast<double>(kMaxMicroseconds))
      return std::nullopt;
    fractional = true;
    return std::llround(value * 1000.0);
  }
  size_t at = 0;
  const bool negative = at < text.size() && text[at] == '-';
  if (negative) ++at;
  int64_t whole = 0;
  size_t digits = 0;
  for (; at < text.size() && text[at] >= '0' && text[at] <= '9'; ++at, ++digits) {
    whole = whole * 10 + (text[at] - '0');
    if (whole > kMaxMicroseconds) return std::nullopt;
  }
  if (digits == 0) return std::nullopt;
  int64_t ns = 0;
  if (at < text.size() && text[at] == '.') {
    fractional = true;
    ++at;
    int64_t scale = 100;
    for (size_t place = 0; at < text.size() && text[at] >= '0' && text[at] <= '9'; ++at, ++place) {
      const int digit = text[at] - '0';
      if (place < 3) {
        ns += digit * scale;
        scale /= 10;
      } else if (place == 3 && digit >= 5) {
        ns += 1;
      }
    }
  }
  if (at != text.size()) return std::nullopt;
  ns += whole * 1000;
  return negative ? -ns : ns;
}

// A scalar's text, or an array's or object's JSON.
std::string text_of(const JsonValue& value) {
  return value.type == Type::array || value.type == Type::object || value.type == Type::null ? value.json()
                                                                                             : value.text;
}

// PyTorch names a Python call "file(line): function"; module calls ("nn.Module: Linear_0") have no frame.
void parse_frame(TraceEvent& event) {
  const size_t close = event.name.find("): ");
  if (close == std::string::npos) return;
  const size_t open = event.name.rfind('(', close);
  if (open == std::string::npos || open == 0) return;
  int line = 0;
  const char* first = event.name.data() + open + 1;
  const char* last = event.name.data() + close;
  const auto [stop, error] = std::from_chars(first, last, line);
  if (error != std::errc() || stop != last) return;
  event.file = event.name.substr(0, open);
  event.line = line;
}

struct ThreadKey {
  std::string pid;
  std::string tid;
  bool operator<(const ThreadKey& other) const {
    return pid != other.pid ? pid < other.pid : tid < other.tid;
  }
};

class Loader final : public TraceJsonVisitor {
 public:
  void member(const std::string& key, JsonValue value) override {
    if (key == "baseTimeNanoseconds") {
      base_ns_ = integer(value);
      KILN_CHECK(base_ns_.has_value(), invalid_argument, "\"baseTimeNanoseconds\" must be an integer, got ",
                 value.type == Type::number ? value.text : type_name(value.type));
      return;
    }
    if (key == "schemaVersion") schema_version_ = text_of(value);
    if (key == "kiln" && value.type == Type::object) {
      kiln_facts_ = true;
      for (size_t i = 0; i < value.keys.size(); ++i) {
        const std::string& name = value.keys[i];
        const JsonValue& item = value.items[i];
        if (name == "record_shapes") {
          kiln_record_shapes_ = item.text == "true";
        } else if (name == "profile_memory") {
          kiln_profile_memory_ = item.text == "true";
        } else if (name == "unparented_events") {
          trace_.unparented = static_cast<int>(integer(item).value_or(0));
        } else {
          trace_.facts[name] = text_of(item);
        }
      }
      return;
    }
    trace_.facts[key] = text_of(value);
  }

  void top_level(bool object) override { top_level_array_ = !object; }

  // Room for as many events as a file of `bytes` can hold, so the events never move while loading
  // (a growing vector holds the old and the new copy at once). Pages never written stay unmapped,
  // so reserving for the smallest events costs address space, not memory.
  void expect_bytes(uintmax_t bytes) {
    constexpr uintmax_t kSmallestEventBytes = 96;  // {"ph": "X", "name": "a", "pid": 1, ... "dur": 1},
    trace_.events.reserve(static_cast<size_t>(std::min<uintmax_t>(bytes / kSmallestEventBytes, 64u << 20)));
    // Millions of events fault in page by page; huge pages fault 512 times less often (Linux only
    // honours the hint where transparent huge pages are enabled for madvise).
    constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
    const uintptr_t begin =
        (reinterpret_cast<uintptr_t>(trace_.events.data()) + kHugePage - 1) & ~(kHugePage - 1);
    const uintptr_t end =
        (reinterpret_cast<uintptr_t>(trace_.events.data() + trace_.events.capacity())) & ~(kHugePage - 1);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }

  void event(JsonValue value, size_t index) override {
    const JsonValue* name_field = value.get("name");
    const bool named = name_field != nullptr && name_field->type == Type::string;
    // The context is built only for an error: most events have none, and a string per event costs.
    try {
      const std::string ph = string_field(value, "ph", "");
      KILN_CHECK(!ph.empty(), invalid_argument, "no \"ph\" (its phase: X, i, M ...)");
      const std::string name = string_field(value, "name", "");
      if (ph == "M") {
        metadata(value, name);
      } else if (ph == "X") {
        complete(value, name);
      } else if ((ph == "i" || ph == "I") && name == "[memory]") {
        memory(value);
      } else {
        ++skipped_[ph == "i" || ph == "I"
                       ? str_cat("instant events '", name, "' (kiln reads only [memory] instants)")
                       : str_cat("events of phase '", ph, "'")];
      }
      if (!legacy_pids_ || ph == "M") return;
      const JsonValue* pid = value.get("pid");
      legacy_pids_ = pid != nullptr && pid->type == Type::string && pid->text == "CPU functions";
    } catch (Error& error) {
      error.add_context(str_cat("event ", index, named ? str_cat(" ('", name_field->text, "')") : ""));
      throw;
    }
  }

  Trace finish() {
    for (const auto& [key, index] : threads_) {
      const auto name = thread_names_.find(key);
      if (name != thread_names_.end()) trace_.threads[index].name = name->second;
    }
    detect_source(top_level_array_);
    if (trace_.source == "kiln_json") check_schema_version();
    const bool explicit_tree = !trace_.events.empty() && explicit_parents_ == trace_.events.size();
    if (!explicit_tree) nest_by_time();
    const int64_t base = base_ns_.value_or(0);
    for (TraceEvent& event : trace_.events) {
      event.start_ns += base;
      event.end_ns += base;
    }
    const int unparented_before = trace_.unparented;
    number_events(trace_);
    if (explicit_tree && trace_.unparented > unparented_before)
      trace_.notes.push_back(str_cat(trace_.unparented - unparented_before,
                                     " events name a parent that is not in the file: read as roots"));
    say_what_is_missing();
    for (const auto& [what, count] : skipped_) trace_.notes.push_back(str_cat("skipped ", count, " ", what));
    return std::move(trace_);
  }

 private:
  // A string member; `fallback` when absent; an error naming the member when it is not a string.
  static std::string string_field(const JsonValue& value, std::string_view key, std::string_view fallback) {
    const JsonValue* field = value.get(key);
    if (field == nullptr) return std::string(fallback);
    KILN_CHECK(field->type == Type::string, invalid_argument, "\"", key, "\" must be a string, got ",
               type_name(field->type));
    return field->text;
  }
  // "pid" and "tid": numbers (Kineto, kiln) or strings (the legacy "CPU functions", Kineto's spans).
  static std::string id_field(const JsonValue& value, std::string_view key) {
    const JsonValue* field = value.get(key);
    if (field == nullptr) return {};
    KILN_CHECK(field->type == Type::number || field->type == Type::string, invalid_argument, "\"", key,
               "\" must be a number or a string, got ", type_name(field->type));
    return field->text;
  }
  int64_t time_field(const JsonValue& value, std::string_view key) {
    const JsonValue* field = value.get(key);
    KILN_CHECK(field != nullptr, invalid_argument, "no \"", key, "\" (µs)");
    KILN_CHECK(field->type == Type::number, invalid_argument, "\"", key, "\" must be a number of µs, got ",
               type_name(field->type));
    bool fractional = false;
    const std::optional<int64_t> ns = microseconds_to_ns(field->text, fractional);
    KILN_CHECK(ns.has_value(), invalid_argument, "\"", key, "\" is out of range: ", field->text, " µs");
    if (fractional) ns_precision_ = true;
    return *ns;
  }
  static const JsonValue* args_of(const JsonValue& value) {
    const JsonValue* args = value.get("args");
    if (args == nullptr) return nullptr;
    KILN_CHECK(args->type == Type::object, invalid_argument, "\"args\" must be an object, got ",
               type_name(args->type));
    return args;
  }

  void metadata(const JsonValue& value, const std::string& name) {
    if (name != "thread_name") return;
    const JsonValue* args = args_of(value);
    const JsonValue* thread_name = args != nullptr ? args->get("name") : nullptr;
    if (thread_name != nullptr && thread_name->type == Type::string)
      thread_names_[{id_field(value, "pid"), id_field(value, "tid")}] = thread_name->text;
  }

  TraceEvent& begin(const JsonValue& value, const std::string& name) {
    const std::string category = string_field(value, "cat", "");
    const uint32_t thread = thread_index({id_field(value, "pid"), id_field(value, "tid")});
    const int64_t start = time_field(value, "ts");
    TraceEvent& event = trace_.events.emplace_back();
    event.name = name;
    event.category = category;
    event.thread = thread;
    event.start_ns = event.end_ns = start;
    event.id = trace_.events.size();
    return event;
  }

  void complete(const JsonValue& value, const std::string& name) {
    const int64_t duration = time_field(value, "dur");
    KILN_CHECK(duration >= 0, invalid_argument, "ends before it starts (\"dur\" ", duration / 1000.0, " µs)");
    TraceEvent& event = begin(value, name);
    event.end_ns = event.start_ns + duration;
    event.kind = event.category.empty() ? EventKind::op : kind_of_category(event.category);
    const JsonValue* args = args_of(value);
    if (args == nullptr) return;
    if (kiln_event(event, *args)) return;
    if (event.kind == EventKind::python) parse_frame(event);
    for (size_t i = 0; i < args->keys.size(); ++i) {
      const std::string& key = args->keys[i];
      const JsonValue& item = args->items[i];
      if (key == "Input Dims") {
        input_dims(event, item);
      } else if (key == "Input type") {
        input_types(event, item);
      } else {
        event.attributes.emplace_back(key, text_of(item));
      }
    }
  }

  static void input_dims(TraceEvent& event, const JsonValue& dims) {
    KILN_CHECK(dims.type == Type::array, invalid_argument, "\"Input Dims\" must be an array of shapes, got ",
               type_name(dims.type));
    for (const JsonValue& input : dims.items) {
      KILN_CHECK(input.type == Type::array, invalid_argument, "\"Input Dims\" must hold arrays, got ",
                 type_name(input.type));
      Shape shape;
      bool flat = true;
      for (const JsonValue& dim : input.items) {
        const std::optional<int64_t> size = integer(dim);
        if (!size.has_value()) flat = false;
        shape.push_back(size.value_or(0));
      }
      // A TensorList input (written as a list of shapes) has no single shape; the attribute keeps it.
      event.input_shapes.push_back(flat ? shape : Shape{});
      if (!flat && event.attribute("Input Dims") == nullptr)
        event.attributes.emplace_back("Input Dims", dims.json());
    }
  }

  static void input_types(TraceEvent& event, const JsonValue& types) {
    KILN_CHECK(types.type == Type::array, invalid_argument,
               "\"Input type\" must be an array of strings, got ", type_name(types.type));
    for (const JsonValue& type : types.items) {
      KILN_CHECK(type.type == Type::string, invalid_argument, "\"Input type\" must hold strings, got ",
                 type_name(type.type));
      event.input_dtypes.push_back(type.text);
    }
  }

  void memory(const JsonValue& value) {
    TraceEvent& event = begin(value, "[memory]");
    event.kind = EventKind::memory;
    const JsonValue* args = args_of(value);
    if (args == nullptr) return;
    if (kiln_event(event, *args)) return;
    for (size_t i = 0; i < args->keys.size(); ++i) {
      const std::string& key = args->keys[i];
      const JsonValue& item = args->items[i];
      const auto number = [&] {
        const std::optional<int64_t> bytes = integer(item);
        KILN_CHECK(bytes.has_value(), invalid_argument, "\"", key,
                   "\" must be an integer number of bytes, got ",
                   item.type == Type::number ? item.text : type_name(item.type));
        return *bytes;
      };
      if (key == "Bytes") {
        event.memory_bytes = number();
      } else if (key == "Total Allocated") {
        event.memory_total = number();
      } else {
        event.attributes.emplace_back(key, text_of(item));
      }
    }
  }

  // A kiln trace's fields are read as the version it claims (other Chrome traces have their own
  // versions): a newer major version may mean fields this kiln would misread.
  void check_schema_version() const {
    if (!schema_version_) return;
    int64_t major = 0;
    const std::string& text = *schema_version_;
    const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), major);
    const bool whole = error == std::errc() && (stop == text.data() + text.size() || *stop == '.');
    KILN_CHECK(whole && major >= 1 && major <= profiler::kTraceSchemaVersion, invalid_argument,
               "kiln trace schemaVersion ", text, " is not one this kiln reads (1 to ",
               profiler::kTraceSchemaVersion,
               "): read it with the kiln that wrote it, or record the profile again "
               "with this one");
  }

  // kiln's own Chrome trace (profiler/export.cpp): args carry id, parent_id, kind and the step's record.
  bool kiln_event(TraceEvent& event, const JsonValue& args) {
    const JsonValue* id = args.get("id");
    const JsonValue* parent = args.get("parent_id");
    const JsonValue* kind = args.get("kind");
    if (id == nullptr || parent == nullptr || kind == nullptr || kind->type != Type::string) return false;
    const std::optional<int64_t> id_value = integer(*id);
    const std::optional<int64_t> parent_value = integer(*parent);
    KILN_CHECK(id_value.has_value() && *id_value > 0, invalid_argument,
               "args \"id\" must be a positive integer");
    KILN_CHECK(parent_value.has_value() && *parent_value >= 0, invalid_argument,
               "args \"parent_id\" must be a non-negative integer");
    if (explicit_parents_++ == 0) check_schema_version();
    event.id = static_cast<uint64_t>(*id_value);
    event.parent_id = static_cast<uint64_t>(*parent_value);
    event.kind = profiler::parse_kind(kind->text);
    event.category.clear();
    profiler::read_fields(args, event);
    if (const JsonValue* attributes = args.get("attributes"); attributes != nullptr) {
      KILN_CHECK(attributes->type == Type::object, invalid_argument, "args \"attributes\" must be an object");
      for (size_t i = 0; i < attributes->keys.size(); ++i) {
        KILN_CHECK(attributes->items[i].type == Type::string, invalid_argument,
                   "args \"attributes\" must hold strings");
        event.attributes.emplace_back(attributes->keys[i], attributes->items[i].text);
      }
    }
    return true;
  }

  uint32_t thread_index(const ThreadKey& key) {
    const auto [it, added] = threads_.try_emplace(key, static_cast<uint32_t>(trace_.threads.size()));
    if (added) {
      profiler::TraceThread thread;
      int64_t tid = 0;
      const auto [stop, error] = std::from_chars(key.tid.data(), key.tid.data() + key.tid.size(), tid);
      const bool numeric = error == std::errc() && stop == key.tid.data() + key.tid.size();
      thread.os_thread = numeric ? tid : 0;
      if (!numeric) thread.name = key.tid;  // named by finish() where metadata names it
      trace_.threads.push_back(std::move(thread));
    }
    return it->second;
  }

  void detect_source(bool top_level_array) {
    bool kineto = base_ns_.has_value();
    const bool kiln = kiln_facts_ || explicit_parents_ > 0;
    for (const TraceEvent& event : trace_.events) {
      const std::string& category = event.category;
      kineto = kineto || category == "cpu_op" || category == "python_function" ||
               category == "user_annotation" || category == "cpu_instant_event";
    }
    const bool legacy = top_level_array && !trace_.events.empty() && legacy_pids_;
    trace_.source = kiln     ? "kiln_json"
                    : kineto ? "kineto_json"
                    : legacy ? "torch_legacy_json"
                             : "chrome_json";
  }

  // Events without parent links nest by time as PyTorch's own profiler builds its event tree, so a
  // PyTorch trace read from a file has the tree PyTorch had: in start order (ties: file order), an
  // event's parent is the innermost event still open on its thread when it starts; an event closes
  // once a later one starts after its end, and closing it closes whatever it left open inside it.
  // So a child may end after its parent (a record_function range opened by a short call), and an
  // event that lasts 0 (an instant, or an op under 1 µs in whole-µs files) is no one's parent.
  void nest_by_time() {
    for (size_t i = 0; i < trace_.events.size(); ++i)
      trace_.events[i].id = i + 1;  // kiln's own ids are set aside
    std::vector<size_t> order(trace_.events.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return trace_.events[a].start_ns < trace_.events[b].start_ns;
    });
    constexpr size_t kNone = SIZE_MAX;
    std::vector<size_t> parent(trace_.events.size(), kNone);
    std::vector<bool> closed(trace_.events.size(), false);
    std::vector<size_t> top(trace_.threads.size(), kNone);  // the innermost open event per thread
    // Open events by end, earliest first (ties: the earlier started).
    using Ending = std::pair<int64_t, size_t>;
    std::priority_queue<Ending, std::vector<Ending>, std::greater<>> ending;
    const auto close = [&](size_t index) {
      if (closed[index]) return;
      const uint32_t thread = trace_.events[index].thread;
      for (size_t frame = top[thread]; frame != index && frame != kNone; frame = parent[frame])
        closed[frame] = true;
      closed[index] = true;
      top[thread] = parent[index];
    };
    size_t past_parent = 0;
    for (const size_t index : order) {
      const TraceEvent& event = trace_.events[index];
      while (!ending.empty() && ending.top().first < event.start_ns) {
        close(ending.top().second);
        ending.pop();
      }
      parent[index] = top[event.thread];
      if (parent[index] != kNone && event.end_ns > trace_.events[parent[index]].end_ns) ++past_parent;
      if (event.end_ns > event.start_ns) {
        top[event.thread] = index;
        ending.emplace(event.end_ns, index);
      }
    }
    for (size_t i = 0; i < trace_.events.size(); ++i)
      trace_.events[i].parent_id = parent[i] == kNone ? 0 : parent[i] + 1;
    trace_.notes.push_back(
        "parents found by nesting in time per thread as PyTorch builds its event tree (the file has no "
        "parent links)");
    if (past_parent > 0)
      trace_.notes.push_back(
          str_cat(past_parent,
                  " events end after their parent (open when they started): kept under it, as PyTorch does"));
  }

  void say_what_is_missing() {
    bool python = false;
    bool shapes = false;
    bool memory = false;
    for (const TraceEvent& event : trace_.events) {
      python = python || event.kind == EventKind::python;
      shapes = shapes || !event.input_shapes.empty() || !event.input_dtypes.empty();
      memory = memory || event.kind == EventKind::memory;
    }
    std::vector<std::string>& unavailable = trace_.unavailable;
    if (trace_.source == "kiln_json") {
      trace_.shapes_recorded = kiln_record_shapes_.value_or(shapes);
      trace_.memory_recorded = kiln_profile_memory_.value_or(memory);
      if (!trace_.shapes_recorded)
        unavailable.push_back("input shapes and dtypes (recorded without record_shapes)");
      if (!trace_.memory_recorded) unavailable.push_back("memory events (recorded without profile_memory)");
      return;
    }
    trace_.shapes_recorded = shapes;
    trace_.memory_recorded = memory;
    if (trace_.source == "torch_legacy_json") {
      unavailable = {"Python frames (the legacy format has none)",
                     "memory events (the legacy format has none)",
                     "input shapes and dtypes (the legacy format has none)",
                     "ns timestamps (whole µs: events less than 1 µs apart may nest wrongly)",
                     "categories (record_function ranges cannot be told from operators: all are read as ops)",
                     "OS thread ids (tid is PyTorch's own thread index)",
                     "machine facts (CPU capability, framework version, precision flags)"};
      return;
    }
    if (!python) unavailable.push_back("Python frames (none in the file: recorded without with_stack?)");
    if (!shapes)
      unavailable.push_back("input shapes and dtypes (none in the file: recorded without record_shapes?)");
    if (!memory) unavailable.push_back("memory events (none in the file: recorded without profile_memory?)");
    if (!ns_precision_)
      unavailable.push_back("ns timestamps (whole µs: events less than 1 µs apart may nest wrongly)");
    unavailable.push_back(
        "machine facts (the format records no CPU capability, framework version or precision flags such as "
        "TF32)");
  }

  Trace trace_;
  std::map<ThreadKey, uint32_t> threads_;
  std::map<ThreadKey, std::string> thread_names_;
  std::map<std::string, size_t> skipped_;
  std::optional<int64_t> base_ns_;
  std::optional<bool> kiln_record_shapes_;
  std::optional<bool> kiln_profile_memory_;
  bool kiln_facts_ = false;
  std::optional<std::string> schema_version_;  // as the file wrote it
  bool ns_precision_ = false;
  bool top_level_array_ = false;
  bool legacy_pids_ = true;      // every event so far has PyTorch 1.x's "pid": "CPU functions"
  size_t explicit_parents_ = 0;  // events with kiln's own id and parent_id
};

}  // namespace

Trace load(const std::string& path, const LoadOptions& options) {
  Loader loader;
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (!error && (options.max_bytes <= 0 || size <= static_cast<uintmax_t>(options.max_bytes)))
    loader.expect_bytes(size);
  read_trace_json(path, {.max_bytes = options.max_bytes}, loader);
  return with_context(str_cat("trace '", path, "'"), [&] { return loader.finish(); });
}

Trace load_text(std::string_view json, const std::string& name, const LoadOptions& options) {
  Loader loader;
  if (options.max_bytes <= 0 || json.size() <= static_cast<uint64_t>(options.max_bytes))
    loader.expect_bytes(json.size());
  read_trace_json_text(json, name, {.max_bytes = options.max_bytes}, loader);
  return with_context(str_cat("trace '", name, "'"), [&] { return loader.finish(); });
}

void number_events(Trace& trace) {
  std::vector<TraceEvent>& events = trace.events;
  const size_t count = events.size();
  std::unordered_map<uint64_t, size_t> index_of;
  index_of.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    KILN_CHECK(events[i].id != 0, invalid_argument, "event ", i, " ('", events[i].name, "') has id 0");
    const auto [it, added] = index_of.emplace(events[i].id, i);
    KILN_CHECK(added, invalid_argument, "two events have id ", events[i].id, ": '", events[it->second].name,
               "' and '", events[i].name, "'");
  }
  constexpr size_t kRoot = SIZE_MAX;
  std::vector<size_t> parent(count, kRoot);
  for (size_t i = 0; i < count; ++i) {
    if (events[i].parent_id == 0) continue;
    const auto found = index_of.find(events[i].parent_id);
    if (found == index_of.end()) {
      ++trace.unparented;
    } else {
      parent[i] = found->second;
    }
  }
  // Depth and effective start (never before the parent's), parents first, without recursion.
  enum : uint8_t { unvisited, visiting, done };
  std::vector<uint8_t> state(count, unvisited);
  std::vector<uint32_t> depth(count, 0);
  std::vector<int64_t> start(count, 0);
  std::vector<size_t> path;
  for (size_t i = 0; i < count; ++i) {
    for (size_t at = i; at != kRoot && state[at] != done; at = parent[at]) {
      KILN_CHECK(state[at] != visiting, invalid_argument, "parent links form a cycle through event id ",
                 events[at].id, " ('", events[at].name, "')");
      state[at] = visiting;
      path.push_back(at);
    }
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      const size_t at = *it;
      const size_t up = parent[at];
      depth[at] = up == kRoot ? 0 : depth[up] + 1;
      start[at] = up == kRoot ? events[at].start_ns : std::max(events[at].start_ns, start[up]);
      state[at] = done;
    }
    path.clear();
  }
  std::vector<size_t> order(count);
  for (size_t i = 0; i < count; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (start[a] != start[b]) return start[a] < start[b];
    if (depth[a] != depth[b]) return depth[a] < depth[b];
    return a < b;
  });
  std::vector<uint64_t> new_id(count);
  for (size_t rank = 0; rank < count; ++rank) new_id[order[rank]] = rank + 1;
  for (size_t i = 0; i < count; ++i) {
    events[i].id = new_id[i];
    events[i].parent_id = parent[i] == kRoot ? 0 : new_id[parent[i]];
  }
  // Into place by following the permutation's cycles: no second copy of the events.
  for (size_t i = 0; i < count; ++i) {
    while (events[i].id != i + 1) std::swap(events[i], events[events[i].id - 1]);
  }
  trace.origin_ns = 0;
  if (!events.empty()) {
    trace.origin_ns = events.front().start_ns;
    for (const TraceEvent& event : events) trace.origin_ns = std::min(trace.origin_ns, event.start_ns);
  }
}

}  // namespace kiln::trace
