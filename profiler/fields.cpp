#include "profiler/fields.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "core/error.h"
#include "graph/plan.h"

namespace kiln::profiler {
namespace {

using trace::JsonValue;
using Type = JsonValue::Type;
constexpr KindMask kRun = kind_bit(EventKind::run);
constexpr KindMask kMemory = kind_bit(EventKind::memory);

// --- reading: each helper names what it expected; the loader adds the field's and event's name ---

int64_t read_integer(const JsonValue& value) {
  int64_t result = 0;
  const char* end = value.text.data() + value.text.size();
  const auto [stop, error] = std::from_chars(value.text.data(), end, result);
  KILN_CHECK(value.type == Type::number && error == std::errc() && stop == end, invalid_argument,
             "must be an integer");
  return result;
}

double read_number(const JsonValue& value) {
  double result = 0;
  const char* end = value.text.data() + value.text.size();
  const auto [stop, error] = std::from_chars(value.text.data(), end, result);
  KILN_CHECK(value.type == Type::number && error == std::errc() && stop == end, invalid_argument,
             "must be a number");
  return result;
}

bool read_boolean(const JsonValue& value) {
  KILN_CHECK(value.type == Type::boolean, invalid_argument, "must be true or false");
  return value.text == "true";
}

std::string read_string(const JsonValue& value) {
  KILN_CHECK(value.type == Type::string, invalid_argument, "must be a string");
  return value.text;
}

const std::vector<JsonValue>& read_array(const JsonValue& value) {
  KILN_CHECK(value.type == Type::array, invalid_argument, "must be an array");
  return value.items;
}

std::vector<std::string> read_strings(const JsonValue& value) {
  std::vector<std::string> result;
  for (const JsonValue& item : read_array(value)) {
    KILN_CHECK(item.type == Type::string, invalid_argument, "must hold strings");
    result.push_back(item.text);
  }
  return result;
}

std::vector<Shape> read_shapes(const JsonValue& value) {
  std::vector<Shape> result;
  for (const JsonValue& item : read_array(value)) {
    KILN_CHECK(item.type == Type::array, invalid_argument, "must hold arrays of integer dimensions");
    Shape& shape = result.emplace_back();
    for (const JsonValue& dim : item.items) {
      try {
        shape.push_back(read_integer(dim));
      } catch (const Error&) {
        fail(ErrorKind::invalid_argument, "must hold arrays of integer dimensions");
      }
    }
  }
  return result;
}

// An object's member `key`, which must be there.
const JsonValue& member(const JsonValue& object, std::string_view key) {
  KILN_CHECK(object.type == Type::object, invalid_argument, "must hold objects");
  const JsonValue* value = object.get(key);
  KILN_CHECK(value != nullptr, invalid_argument, "objects must have \"", key, "\"");
  return *value;
}

// `object`'s member `key` read with `read`; an error names the member.
template <typename Read>
decltype(auto) read_member(const JsonValue& object, std::string_view key, Read read) {
  const JsonValue& value = member(object, key);
  try {
    return read(value);
  } catch (const Error& error) {
    throw Error(error.kind(), str_cat("objects' \"", key, "\" ", error.message()));
  }
}

// A scale as written: a number, or null for one that is not finite.
double read_scale(const JsonValue& value) {
  return value.type == Type::null ? std::numeric_limits<double>::quiet_NaN() : read_number(value);
}

template <typename Enum, typename Name>
Enum enum_named(const std::string& name, Enum last, Name name_of, std::string_view what) {
  std::string known;
  for (int i = 0; i <= static_cast<int>(last); ++i) {
    const Enum candidate = static_cast<Enum>(i);
    if (name == name_of(candidate)) return candidate;
    known += str_cat(i ? ", " : "", name_of(candidate));
  }
  fail(ErrorKind::invalid_argument, "has unknown ", what, " '", name, "' (known: ", known, ")");
}

std::vector<DType> read_dtypes(const JsonValue& value) {
  std::vector<DType> result;
  for (const std::string& name : read_strings(value))
    result.push_back(enum_named(name, DType::boolean, dtype_name, "dtype"));
  return result;
}

std::vector<Layout> read_layouts(const JsonValue& value) {
  std::vector<Layout> result;
  for (const std::string& name : read_strings(value))
    result.push_back(enum_named(name, Layout::nhwc_bf16, layout_name, "layout"));
  return result;
}

std::vector<FusedNode> read_fused(const JsonValue& value) {
  std::vector<FusedNode> result;
  for (const JsonValue& item : read_array(value))
    result.push_back({read_member(item, "op", read_string), read_member(item, "node", read_string)});
  return result;
}

std::vector<Refusal> read_refusals(const JsonValue& value) {
  std::vector<Refusal> result;
  for (const JsonValue& item : read_array(value)) {
    const std::string kind = read_member(item, "kind", read_string);
    const std::optional<RefusalKind> parsed = refusal_kind_from_name(kind);
    KILN_CHECK(parsed.has_value(), invalid_argument, "has unknown kind '", kind,
               "' (known: ", refusal_kind_names(), ")");
    result.push_back({read_member(item, "backend", read_string), read_member(item, "kernel", read_string),
                      *parsed, read_member(item, "detail", read_string)});
  }
  return result;
}

std::optional<QuantizationSummary> read_quantization(const JsonValue& value) {
  if (value.type == Type::null) return std::nullopt;
  QuantizationSummary summary;
  for (const JsonValue& item : read_member(value, "operands", read_array)) {
    QuantizedOperand& operand = summary.operands.emplace_back();
    operand.name = read_member(item, "name", read_string);
    operand.dtype = enum_named(read_member(item, "dtype", read_string), DType::boolean, dtype_name, "dtype");
    for (const JsonValue& scale : read_member(item, "scales", read_array))
      operand.scales.push_back(read_scale(scale));
    for (const JsonValue& zero_point : read_member(item, "zero_points", read_array))
      operand.zero_points.push_back(static_cast<double>(read_integer(zero_point)));
    operand.per = read_member(item, "per", read_string);
  }
  summary.accumulation = read_member(value, "accumulation", read_string);
  summary.bias = read_member(value, "bias", read_string);
  summary.output = read_member(value, "output", read_string);
  return summary;
}

std::optional<ErrorShare> read_error_share(const JsonValue& value) {
  if (value.type == Type::null) return std::nullopt;
  ErrorShare share;
  share.baseline = read_member(value, "baseline", read_string);
  share.form = read_member(value, "form", read_string);
  share.error = read_member(value, "error", read_number);
  share.output_change = read_member(value, "output_change", read_scale);
  share.saving = read_member(value, "saving", read_number);
  share.taken = read_member(value, "taken", read_boolean);
  return share;
}

// --- writing ---

template <typename T, typename Name>
std::vector<std::string> names_of(const std::vector<T>& values, Name name) {
  std::vector<std::string> names;
  for (const T& value : values) names.emplace_back(name(value));
  return names;
}

void write_fused(JsonWriter& json, const std::vector<FusedNode>& nodes) {
  json.begin_array();
  for (const FusedNode& node : nodes)
    json.begin_object().member("op", node.op_type).member("node", node.node).end_object();
  json.end_array();
}

void write_refusals(JsonWriter& json, const std::vector<Refusal>& refusals) {
  json.begin_array();
  for (const Refusal& refusal : refusals) {
    json.begin_object()
        .member("backend", refusal.backend)
        .member("kernel", refusal.variant)
        .member("kind", refusal_kind_name(refusal.kind))
        .member("detail", refusal.detail)
        .end_object();
  }
  json.end_array();
}

void write_error_share(JsonWriter& json, const std::optional<ErrorShare>& share) {
  if (!share) {
    json.null();
    return;
  }
  const auto number = [&](const char* key, double value) {
    json.key(key);
    if (!std::isfinite(value)) {  // a form that made an output infinite: no number to write
      json.null();
      return;
    }
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", value);
    json.raw(text);
  };
  json.begin_object().member("baseline", share->baseline).member("form", share->form);
  number("error", share->error);
  number("output_change", share->output_change);
  number("saving", share->saving);
  json.member("taken", share->taken).end_object();
}

// Scales with 9 significant digits, which give back the float32 value exactly.
void write_quantization(JsonWriter& json, const std::optional<QuantizationSummary>& quantization) {
  if (!quantization) {
    json.null();
    return;
  }
  json.begin_object().key("operands").begin_array();
  for (const QuantizedOperand& operand : quantization->operands) {
    json.begin_object().member("name", operand.name).member("dtype", dtype_name(operand.dtype));
    json.key("scales").begin_array();
    char text[32];
    for (double scale : operand.scales) {
      if (!std::isfinite(scale)) {
        json.null();
        continue;
      }
      std::snprintf(text, sizeof text, "%.9g", scale);
      json.raw(text);
    }
    json.end_array().key("zero_points").begin_array();
    for (double zero_point : operand.zero_points) json.value(static_cast<int64_t>(zero_point));
    json.end_array().member("per", operand.per).end_object();
  }
  json.end_array();
  json.member("accumulation", quantization->accumulation)
      .member("bias", quantization->bias)
      .member("output", quantization->output)
      .end_object();
}

// Values JsonWriter writes as they are: strings, numbers, booleans, shapes, string lists.
template <typename T>
void plain(JsonWriter& json, const T& value) {
  json.value(value);
}
// Milliseconds to the nanosecond.
void milliseconds(JsonWriter& json, double value) {
  json.value(value, 6);
}
void dtypes(JsonWriter& json, const std::vector<DType>& value) {
  json.value(names_of(value, dtype_name));
}
void layouts(JsonWriter& json, const std::vector<Layout>& value) {
  json.value(names_of(value, layout_name));
}

void timed(JsonWriter& json, const std::vector<TimedCandidate>& value) {
  json.begin_array();
  for (const TimedCandidate& candidate : value)
    json.begin_object()
        .member("kernel", candidate.kernel)
        .key("ms")
        .value(candidate.milliseconds, 6)
        .end_object();
  json.end_array();
}
std::vector<TimedCandidate> read_timed(const JsonValue& value) {
  std::vector<TimedCandidate> result;
  for (const JsonValue& item : read_array(value))
    result.push_back({read_member(item, "kernel", read_string), read_member(item, "ms", read_number)});
  return result;
}
void rule(JsonWriter& json, DecisionRule value) {
  json.value(decision_rule_name(value));
}
DecisionRule read_rule(const JsonValue& value) {
  return enum_named(read_string(value), DecisionRule::autotune, decision_rule_name, "rule");
}
// -1 (not in a parallel group) is null.
void group_index(JsonWriter& json, int value) {
  if (value < 0) {
    json.null();
  } else {
    json.value(value);
  }
}
int read_group_index(const JsonValue& value) {
  return value.type == Type::null ? -1 : static_cast<int>(read_integer(value));
}

// A step's record: set on every step and reorder event kiln builds or loads; a step event made
// elsewhere (Python's trace_from_events) may lack one and writes an empty record.
const StepRecord& record_of(const TraceEvent& event) {
  static const StepRecord empty;
  return event.record != nullptr ? *event.record : empty;
}

// Row makers: a field of the step's record, or of the event itself.
template <typename Write, typename Read>
EventField field(std::string_view name, KindMask kinds, FieldGroup group, std::string_view type,
                 std::string_view meaning, Write, Read) {
  static_assert(std::is_empty_v<Write> && std::is_empty_v<Read>, "rows are captureless lambdas");
  return {
      name,
      kinds,
      group,
      type,
      meaning,
      [](JsonWriter& json, const TraceEvent& event) { Write{}(json, event); },
      [](const JsonValue& value, TraceEvent& event, StepRecord& record) { Read{}(value, event, record); }};
}

#define KILN_RECORD_FIELD(name, group, type, member, write_value, read_value, meaning)               \
  field(                                                                                             \
      name, kStepKinds, group, type, meaning,                                                        \
      [](JsonWriter& json, const TraceEvent& event) { write_value(json, record_of(event).member); }, \
      [](const JsonValue& value, TraceEvent&, StepRecord& record) { record.member = read_value(value); })

#define KILN_EVENT_FIELD(name, kinds, group, type, member, read_value, meaning)    \
  field(                                                                           \
      name, kinds, group, type, meaning,                                           \
      [](JsonWriter& json, const TraceEvent& event) { json.value(event.member); }, \
      [](const JsonValue& value, TraceEvent& event, StepRecord&) {                 \
        event.member = static_cast<decltype(event.member)>(read_value(value));     \
      })

std::vector<EventField> make_fields() {
  constexpr FieldGroup always = FieldGroup::always;
  constexpr FieldGroup shapes = FieldGroup::shapes;
  constexpr FieldGroup memory = FieldGroup::memory;
  return {
      KILN_EVENT_FIELD("step", kStepKinds, always, "integer", step, read_integer,
                       "the step's index in its plan"),
      KILN_RECORD_FIELD("op", always, "string", op_type, plain, read_string,
                        "the ONNX op type (a reorder step: Reorder)"),
      KILN_RECORD_FIELD("node", always, "string", node_name, plain, read_string, "the ONNX node's name"),
      KILN_RECORD_FIELD("backend", always, "string", backend, plain, read_string, "the backend that runs it"),
      KILN_RECORD_FIELD("kernel", always, "string", kernel, plain, read_string,
                        "the backend's kernel, as verbose names it"),
      KILN_EVENT_FIELD("threads", kStepKinds | kPlanKinds, always, "integer", threads, read_integer,
                       "steps: the intra-op threads its kernel runs with; runs and plans: the plan's"),
      KILN_EVENT_FIELD("flops", kStepKinds, always, "integer", flops, read_integer,
                       "multiply-adds x 2 of the op itself (0 for ops without products)"),
      KILN_EVENT_FIELD("bytes", kStepKinds, always, "integer", bytes, read_integer,
                       "bytes its inputs and outputs occupy as stored"),
      KILN_EVENT_FIELD("weight_bytes", kStepKinds, always, "integer", weight_bytes, read_integer,
                       "of those bytes, what its constant inputs (weights, biases) occupy"),
      KILN_EVENT_FIELD("inputs", kStepKinds, always, "[string]", inputs, read_strings,
                       "the values it reads, by name (\"\" for an absent input or a constant in the kernel)"),
      KILN_EVENT_FIELD("outputs", kStepKinds, always, "[string]", outputs, read_strings,
                       "the values it writes, by name (a view's output: the value it views)"),
      KILN_RECORD_FIELD("input_shapes", shapes, "[shape]", input_shapes, plain, read_shapes,
                        "logical (ONNX) shapes of its inputs"),
      KILN_RECORD_FIELD("input_dtypes", shapes, "[dtype]", input_dtypes, dtypes, read_dtypes,
                        "logical dtypes of its inputs (a bf16 layout stores a float32 value)"),
      KILN_RECORD_FIELD("input_layouts", shapes, "[layout]", input_layouts, layouts, read_layouts,
                        "how each input is stored: plain, nhwc, plain_bf16, nhwc_bf16"),
      KILN_RECORD_FIELD("output_shapes", shapes, "[shape]", output_shapes, plain, read_shapes,
                        "logical shapes of its outputs"),
      KILN_RECORD_FIELD("output_dtypes", shapes, "[dtype]", output_dtypes, dtypes, read_dtypes,
                        "logical dtypes of its outputs"),
      KILN_RECORD_FIELD("output_layouts", shapes, "[layout]", output_layouts, layouts, read_layouts,
                        "how each output is stored"),
      KILN_RECORD_FIELD("in_place", always, "boolean", in_place, plain, read_boolean,
                        "output 0 reuses the storage of a dying input"),
      KILN_RECORD_FIELD("fused", always, "[{op, node}]", fused, write_fused, read_fused,
                        "each node fused into this one, in graph order"),
      KILN_RECORD_FIELD("notes", always, "[string]", notes, plain, read_strings,
                        "what the kernel does differently from what was asked, what planning rewrote"),
      KILN_RECORD_FIELD("quantization", always, "object or null", quantization, write_quantization,
                        read_quantization,
                        "a quantized step's operands {name, dtype, scales, zero_points, per}, accumulation, "
                        "bias and output; null otherwise"),
      KILN_RECORD_FIELD(
          "error_share", always, "object or null", error_share, write_error_share, read_error_share,
          "conv_algorithm auto's error budget for this layer: the form taken without it "
          "(baseline), the faster form weighed (form) and its probe error, how far the outputs "
          "moved with this layer alone on it (output_change, of their scale), the predicted "
          "share of the layer's direct time it saves, and whether it was taken; null for layers "
          "it did not weigh"),
      KILN_RECORD_FIELD("parallel_group", always, "integer or null", parallel_group, group_index,
                        read_group_index, "parallel execution: its fork-join group; null otherwise"),
      KILN_RECORD_FIELD("parallel_note", always, "string", parallel_note, plain, read_string,
                        "parallel execution: why it keeps the run's thread count, if it does"),
      KILN_RECORD_FIELD("creation_ms", always, "number", creation_ms, milliseconds, read_number,
                        "kernel selection and creation at plan time (primitives, weight reorders)"),
      KILN_RECORD_FIELD("rule", always, "string", decision.rule, rule, read_rule,
                        "how the kernel was chosen: first_offer or autotune"),
      KILN_RECORD_FIELD("reused", always, "boolean", decision.reused, plain, read_boolean,
                        "autotune's choice came from the choice cache (an earlier plan's timing)"),
      KILN_RECORD_FIELD("settings", always, "[string]", settings, plain, read_strings,
                        "the settings its selection consulted besides the candidate list, as name=value: "
                        "its op's precision and each asked backend's options for the op"),
      KILN_RECORD_FIELD("refusals", always, "[{backend, kernel, kind, detail}]", decision.refusals,
                        write_refusals, read_refusals, "each candidate that did not take the step, and why"),
      KILN_RECORD_FIELD("timed", always, "[{kernel, ms}]", decision.timed, timed, read_timed,
                        "the offers autotune timed"),
      KILN_RECORD_FIELD(
          "unfused", always, "[{op, node}]", unfused, write_fused, read_fused,
          "a fused form planning proposed that no candidate took: the nodes it would have fused"),
      KILN_RECORD_FIELD("fused_form_refusals", always, "[{backend, kernel, kind, detail}]",
                        fused_form_refusals, write_refusals, read_refusals,
                        "each candidate's refusal of that fused form"),
      KILN_EVENT_FIELD("plan_settings", kPlanKinds, always, "string", settings, read_string,
                       "the settings the plan was made with (a failed planning: empty)"),
      KILN_EVENT_FIELD("plan_steps", kPlanKinds, always, "integer", plan_steps, read_integer,
                       "the plan's step count"),
      field(
          "input_shapes", kPlanKinds, shapes, "[shape]", "the graph inputs' shapes",
          [](JsonWriter& json, const TraceEvent& event) { json.value(event.input_shapes); },
          [](const JsonValue& value, TraceEvent& event, StepRecord&) {
            event.input_shapes = read_shapes(value);
          }),
      KILN_EVENT_FIELD("arena_bytes", kRun, memory, "integer", arena_bytes, read_integer,
                       "the arena its run context holds throughout"),
      KILN_EVENT_FIELD("allocated_bytes", kRun, memory, "integer", allocated_bytes, read_integer,
                       "what the run itself allocated (outputs, scratch)"),
      KILN_EVENT_FIELD("peak_bytes", kRun, memory, "integer", peak_bytes, read_integer,
                       "the arena plus the most the run's own allocations held at once"),
      KILN_EVENT_FIELD("bytes", kMemory, always, "integer", memory_bytes, read_integer,
                       "bytes allocated (> 0) or freed (< 0)"),
      KILN_EVENT_FIELD("tag", kMemory, always, "string", memory_tag, read_string,
                       "what for: arena, scratch, tensor"),
      KILN_EVENT_FIELD("total_bytes", kMemory, always, "integer", memory_total, read_integer,
                       "bytes live through kiln's allocator, process-wide, after it"),
  };
}

#undef KILN_RECORD_FIELD
#undef KILN_EVENT_FIELD

bool wanted(const EventField& field, const TraceEvent& event, const FieldFilter& filter) {
  if ((field.kinds & kind_bit(event.kind)) == 0) return false;
  if (field.group == FieldGroup::shapes) return filter.shapes;
  if (field.group == FieldGroup::memory) return filter.memory;
  return true;
}

std::string kinds_text(KindMask kinds) {
  std::string text;
  for (int kind = 0; kind <= static_cast<int>(EventKind::other); ++kind) {
    if (kinds & kind_bit(static_cast<EventKind>(kind)))
      text += str_cat(text.empty() ? "" : ", ", kind_name(static_cast<EventKind>(kind)));
  }
  return text;
}

}  // namespace

const std::vector<EventField>& event_fields() {
  static const std::vector<EventField> fields = make_fields();
  return fields;
}

void write_fields(JsonWriter& json, const TraceEvent& event, const FieldFilter& filter) {
  for (const EventField& field : event_fields()) {
    if (!wanted(field, event, filter)) continue;
    json.key(field.name);
    field.write(json, event);
  }
}

void read_fields(const trace::JsonValue& args, TraceEvent& event) {
  const bool step = (kind_bit(event.kind) & kStepKinds) != 0;
  StepRecord record;
  for (const EventField& field : event_fields()) {
    if ((field.kinds & kind_bit(event.kind)) == 0) continue;
    const JsonValue* value = args.get(field.name);
    if (value == nullptr) continue;
    try {
      field.read(*value, event, record);
    } catch (const Error& error) {
      throw Error(error.kind(), str_cat("args \"", field.name, "\" ", error.message()));
    }
  }
  if (step) {
    if (record.op_type.empty()) record.op_type = event.name;  // a version 1 trace names the op only there
    set_step_record(event, std::make_shared<const StepRecord>(std::move(record)), true);
  }
}

std::string fields_markdown() {
  std::string text =
      "| field | events | type | written | meaning |\n"
      "|---|---|---|---|---|\n";
  for (const EventField& field : event_fields()) {
    const char* group = field.group == FieldGroup::shapes   ? "with shapes"
                        : field.group == FieldGroup::memory ? "with memory"
                                                            : "always";
    text += str_cat("| `", field.name, "` | ", kinds_text(field.kinds), " | ", field.type, " | ", group,
                    " | ", field.meaning, " |\n");
  }
  return text;
}

}  // namespace kiln::profiler
