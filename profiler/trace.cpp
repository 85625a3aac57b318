#include "profiler/trace.h"

#include <algorithm>
#include <unordered_map>

#include "backends/backends.h"
#include "core/error.h"
#include "core/version.h"
#include "graph/flops.h"
#include "graph/plan.h"
#include "runtime/cpu_info.h"
#include "runtime/threads.h"

namespace kiln::profiler {
namespace {

int64_t stored_bytes(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes,
                     const std::vector<Layout>& layouts) {
  int64_t bytes = 0;
  for (size_t i = 0; i < shapes.size() && i < dtypes.size(); ++i) {
    if (dtypes[i] == DType::undefined) continue;
    const Layout layout = i < layouts.size() ? layouts[i] : Layout::plain;
    int64_t elements = 1;
    for (const int64_t dim : shapes[i]) elements *= dim;
    bytes += elements * static_cast<int64_t>(dtype_size(stored_dtype(dtypes[i], layout)));
  }
  return bytes;
}

std::vector<std::string> dtype_names(const std::vector<DType>& dtypes) {
  std::vector<std::string> names;
  for (const DType dtype : dtypes) names.emplace_back(dtype_name(dtype));
  return names;
}

std::vector<std::string> layout_names(const std::vector<Layout>& layouts) {
  std::vector<std::string> names;
  for (const Layout layout : layouts) names.emplace_back(layout_name(layout));
  return names;
}

// Each plan's steps as events describe them, built once per plan and shared by every event of a
// step: the record, and inputs and outputs as value names as data flows between the steps that run (a
// view step's output is named by the value it views: a view over an arena's storage is made once per
// run context and never runs as a step, so readers of it read what the view's source step wrote).
class PlanSteps {
 public:
  const TraceEvent& step(const Plan& plan, size_t index) {
    auto [it, added] = by_plan_.try_emplace(&plan);
    if (added) it->second = plan_step_events(plan);
    return it->second[index];
  }

 private:
  std::unordered_map<const Plan*, std::vector<TraceEvent>> by_plan_;
};

std::vector<std::vector<std::string>> flow_names(const Plan& plan, bool inputs) {
  const std::vector<PlanStep>& steps = plan.steps();
  std::vector<int> producer(plan.slots().size(), -1);
  for (size_t s = 0; s < steps.size(); ++s) {
    for (const int slot : steps[s].outputs) {
      if (slot >= 0) producer[static_cast<size_t>(slot)] = static_cast<int>(s);
    }
  }
  const auto name = [&](int slot) -> std::string {
    if (slot < 0) return {};
    // Views of views end at stored data; a view step's first input is what it views.
    for (int hops = 0; producer[static_cast<size_t>(slot)] >= 0 && hops < static_cast<int>(steps.size());
         ++hops) {
      const PlanStep& step = steps[static_cast<size_t>(producer[static_cast<size_t>(slot)])];
      if (!step.kernel->is_view() || step.inputs.empty() || step.inputs[0] < 0) break;
      slot = step.inputs[0];
    }
    return plan.slots()[static_cast<size_t>(slot)].name;
  };
  std::vector<std::vector<std::string>> names(steps.size());
  for (size_t s = 0; s < steps.size(); ++s) {
    for (const int slot : inputs ? steps[s].inputs : steps[s].outputs) names[s].push_back(name(slot));
  }
  return names;
}

void resolve_step(TraceEvent& event, const Plan& plan, int64_t index, const TraceOptions& options,
                  PlanSteps& plan_steps) {
  if (index < 0 || static_cast<size_t>(index) >= plan.steps().size()) return;
  const TraceEvent& described = plan_steps.step(plan, static_cast<size_t>(index));
  event.step = described.step;
  event.name = described.name;
  event.threads = described.threads;
  event.flops = described.flops;
  event.bytes = described.bytes;
  event.weight_bytes = described.weight_bytes;
  event.inputs = described.inputs;
  event.outputs = described.outputs;
  set_step_record(event, described.record, options.record_shapes);
}

// A run's or a planning's plan: its settings, graph input shapes and size.
void resolve_plan(TraceEvent& event, const Plan& plan, const TraceOptions& options) {
  event.threads = plan.threads();
  event.settings = plan.settings_text();
  event.plan_steps = static_cast<int>(plan.steps().size());
  if (!options.record_shapes) return;
  for (const int slot : plan.input_slots()) event.input_shapes.push_back(plan.slots()[slot].info.shape);
}

TraceEvent resolve(const events::Event& raw, const TraceOptions& options, PlanSteps& plan_steps) {
  TraceEvent event;
  event.kind = from_recorded(raw.kind);
  event.thread = raw.thread;
  event.start_ns = raw.start_ns;
  event.end_ns = raw.end_ns;
  switch (raw.kind) {
    case events::EventKind::run: {
      const auto* plan = static_cast<const Plan*>(raw.subject);
      event.name = "run";
      resolve_plan(event, *plan, options);
      event.threads = static_cast<int>(raw.value);
      event.arena_bytes = static_cast<int64_t>(plan->memory_plan().arena_bytes);
      break;
    }
    case events::EventKind::plan:
      event.name = "plan";
      if (raw.subject != nullptr) resolve_plan(event, *static_cast<const Plan*>(raw.subject), options);
      break;
    case events::EventKind::step:
    case events::EventKind::reorder:
      resolve_step(event, *static_cast<const Plan*>(raw.subject), raw.value, options, plan_steps);
      break;
    case events::EventKind::interop_task:
    case events::EventKind::annotation:
      // Null only for an annotation opened as recording started, before its name was interned.
      event.name = raw.subject != nullptr ? static_cast<const char*>(raw.subject) : "annotation";
      break;
    case events::EventKind::memory:
      event.name = "[memory]";
      event.memory_bytes = raw.value;
      event.memory_tag = static_cast<const char*>(raw.subject);
      event.memory_total = raw.total;
      break;
  }
  return event;
}

// The run each memory event happened in: its bytes and the most held at once, the arena excluded
// (a run holds its context's whole arena throughout).
void add_run_memory(Trace& trace) {
  std::vector<int64_t> held(trace.events.size() + 1, 0);
  for (const TraceEvent& event : trace.events) {
    if (event.kind != EventKind::memory || event.memory_tag == "arena") continue;
    uint64_t run = event.parent_id;
    while (run != 0 && trace.events[run - 1].kind != EventKind::run) run = trace.events[run - 1].parent_id;
    if (run == 0) continue;
    TraceEvent& owner = trace.events[run - 1];
    held[run] += event.memory_bytes;
    if (event.memory_bytes > 0) owner.allocated_bytes += event.memory_bytes;
    owner.peak_bytes = std::max(owner.peak_bytes, held[run]);
  }
  for (TraceEvent& event : trace.events) {
    if (event.kind == EventKind::run) event.peak_bytes += event.arena_bytes;
  }
}

}  // namespace

EventKind from_recorded(events::EventKind kind) {
  static_assert(static_cast<int>(events::EventKind::run) == static_cast<int>(EventKind::run) &&
                static_cast<int>(events::EventKind::step) == static_cast<int>(EventKind::step) &&
                static_cast<int>(events::EventKind::reorder) == static_cast<int>(EventKind::reorder) &&
                static_cast<int>(events::EventKind::interop_task) ==
                    static_cast<int>(EventKind::interop_task) &&
                static_cast<int>(events::EventKind::memory) == static_cast<int>(EventKind::memory) &&
                static_cast<int>(events::EventKind::annotation) == static_cast<int>(EventKind::annotation) &&
                static_cast<int>(events::EventKind::plan) == static_cast<int>(EventKind::plan));
  return static_cast<EventKind>(kind);
}

namespace {
constexpr std::pair<EventKind, const char*> kKindNames[] = {
    {EventKind::run, "run"},         {EventKind::step, "step"},
    {EventKind::reorder, "reorder"}, {EventKind::interop_task, "interop_task"},
    {EventKind::memory, "memory"},   {EventKind::annotation, "annotation"},
    {EventKind::plan, "plan"},       {EventKind::op, "op"},
    {EventKind::python, "python"},   {EventKind::other, "other"},
};
}  // namespace

const char* kind_name(EventKind kind) {
  for (const auto& [known, name] : kKindNames) {
    if (known == kind) return name;
  }
  return "unknown";
}

EventKind parse_kind(std::string_view name) {
  std::string known_names;
  for (const auto& [kind, known] : kKindNames) {
    if (name == known) return kind;
    known_names += known_names.empty() ? known : str_cat(", ", known);
  }
  throw Error(ErrorKind::invalid_argument,
              str_cat("unknown event kind '", name, "' (expected one of ", known_names, ")"));
}

const std::string* TraceEvent::attribute(std::string_view name) const {
  for (const auto& [key, value] : attributes) {
    if (key == name) return &value;
  }
  return nullptr;
}

std::vector<TraceEvent> plan_step_events(const Plan& plan) {
  const std::vector<std::vector<std::string>> inputs = flow_names(plan, true);
  const std::vector<std::vector<std::string>> outputs = flow_names(plan, false);
  std::vector<TraceEvent> events(plan.steps().size());
  for (size_t s = 0; s < events.size(); ++s) {
    const PlanStep& step = plan.steps()[s];
    const StepRecord& record = step.record;
    TraceEvent& event = events[s];
    event.kind = record.op_type == "Reorder" ? EventKind::reorder : EventKind::step;
    event.step = static_cast<int>(s);
    event.name = record.op_type;
    event.threads = step.threads;
    event.flops = step_flops(record);
    event.bytes = stored_bytes(record.input_shapes, record.input_dtypes, record.input_layouts) +
                  stored_bytes(record.output_shapes, record.output_dtypes, record.output_layouts);
    // Constants: packed into the kernel (no slot) or a constant slot the kernel reads.
    for (size_t i = 0;
         i < step.inputs.size() && i < record.input_shapes.size() && i < record.input_dtypes.size(); ++i) {
      const int slot = step.inputs[i];
      if (slot >= 0 && plan.slots()[static_cast<size_t>(slot)].origin != SlotOrigin::constant) continue;
      event.weight_bytes +=
          stored_bytes({record.input_shapes[i]}, {record.input_dtypes[i]},
                       {i < record.input_layouts.size() ? record.input_layouts[i] : Layout::plain});
    }
    event.inputs = inputs[s];
    event.outputs = outputs[s];
    set_step_record(event, std::make_shared<const StepRecord>(record), true);
  }
  return events;
}

void set_step_record(TraceEvent& event, std::shared_ptr<const StepRecord> record, bool shapes) {
  event.node = record->node_name;
  event.backend = record->backend;
  event.kernel = record->kernel;
  event.fused = record->fused;
  event.refusals = record->decision.refusals;
  if (shapes) {
    event.input_shapes = record->input_shapes;
    event.output_shapes = record->output_shapes;
    event.input_dtypes = dtype_names(record->input_dtypes);
    event.output_dtypes = dtype_names(record->output_dtypes);
    event.input_layouts = layout_names(record->input_layouts);
    event.output_layouts = layout_names(record->output_layouts);
  }
  event.record = std::move(record);
}

std::vector<const TraceEvent*> Trace::children(uint64_t id) const {
  std::vector<const TraceEvent*> found;
  for (const TraceEvent& event : events) {
    if (event.parent_id == id) found.push_back(&event);
  }
  return found;
}

Trace build_trace(const events::Collected& collected, const TraceOptions& options) {
  Trace trace;
  trace.shapes_recorded = options.record_shapes;
  trace.memory_recorded = options.profile_memory;
  trace.facts = machine_facts();

  // Start order; at equal starts the longer first, so a parent always precedes its children.
  std::vector<size_t> order(collected.events.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const events::Event& x = collected.events[a];
    const events::Event& y = collected.events[b];
    if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
    if (x.end_ns != y.end_ns) return x.end_ns > y.end_ns;
    return x.id < y.id;  // on one thread, the scope opened first (ids grow per thread)
  });
  std::unordered_map<uint64_t, uint64_t> renumbered;
  renumbered.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) renumbered[collected.events[order[i]].id] = i + 1;

  // Threads that recorded, renumbered densely in order of first appearance.
  std::unordered_map<uint32_t, uint32_t> thread_index;
  PlanSteps plan_steps;
  trace.events.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const events::Event& raw = collected.events[order[i]];
    TraceEvent event = resolve(raw, options, plan_steps);
    event.id = i + 1;
    if (raw.parent_id != 0) {
      auto parent = renumbered.find(raw.parent_id);
      if (parent != renumbered.end()) {
        event.parent_id = parent->second;
      } else {
        ++trace.unparented;
      }
    }
    auto [it, added] = thread_index.emplace(raw.thread, static_cast<uint32_t>(trace.threads.size()));
    if (added) {
      const events::ThreadInfo& info = collected.threads.at(raw.thread);
      trace.threads.push_back({info.os_thread, info.name});
    }
    event.thread = it->second;
    trace.events.push_back(std::move(event));
  }
  trace.origin_ns = trace.events.empty() ? 0 : trace.events.front().start_ns;
  if (options.profile_memory) add_run_memory(trace);
  return trace;
}

std::map<std::string, std::string> machine_facts() {
  const CpuCapability& cpu = cpu_capability();
  std::string extensions;
  for (const std::string& extension : cpu.extensions()) {
    if (!extensions.empty()) extensions += ' ';
    extensions += extension;
  }
  std::map<std::string, std::string> facts{
      {"runtime", "kiln"},
      {"kiln_version", std::string(kiln_version())},
      {"build", std::string(build_configuration())},
      {"cpu", cpu.description()},
      {"cpu_capability", std::string(isa_name(cpu.best_isa()))},
      {"cpu_extensions", extensions},
      {"isa", std::string(isa_name(isa_choice().isa))},
      {"threads", std::to_string(get_num_threads())},
      {"cores", std::to_string(available_cores())},
      {"plan_settings", current_settings().describe_plan_settings()},
  };
  if (backends::info("onednn").built) facts["onednn_isa"] = backends::onednn::isa();
  return facts;
}

}  // namespace kiln::profiler
