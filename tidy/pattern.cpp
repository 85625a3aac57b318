#include "tidy/pattern.h"

#include <charconv>

#include "core/error.h"

namespace kiln::tidy {
namespace {

std::optional<bool> flag_fact(const Trace& trace, const std::string& name) {
  const auto it = trace.facts.find(name);
  if (it == trace.facts.end()) return std::nullopt;
  return it->second == "true";
}

// Every integer after `key` in `text`: "sm_80,sm_86" with key "sm_" gives {80, 86}.
std::vector<int> numbers_after(const std::string& text, std::string_view key) {
  std::vector<int> numbers;
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    size_t begin = at + key.size();
    while (begin < text.size() && (text[begin] == ' ' || text[begin] == ':' || text[begin] == '"')) ++begin;
    int number = 0;
    if (std::from_chars(text.data() + begin, text.data() + text.size(), number).ec == std::errc())
      numbers.push_back(number);
  }
  return numbers;
}

}  // namespace

// By Kineto's categories (libkineto's ActivityType names), or a CUDA call's name.
bool is_gpu_work(const TraceEvent& event) {
  if (event.kind != EventKind::other) return false;
  static const char* const kGpuCategories[] = {"kernel",       "gpu_memcpy",  "gpu_memset",
                                               "cuda_runtime", "cuda_driver", "gpu_user_annotation"};
  for (const char* category : kGpuCategories) {
    if (event.category == category) return true;
  }
  return event.name.starts_with("cuda");
}

TidyContext::TidyContext(const EventTree& event_tree)
    : tree(event_tree), trace(event_tree.trace()), flow(event_tree) {
  from_pytorch = trace.source != "kiln" && trace.source != "kiln_json";
  bool python_events = false;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == EventKind::python) {
      python_events = true;
      caller_frames = caller_frames || event.attribute("caller") != nullptr;
    }
    gpu_activity = gpu_activity || is_gpu_work(event);
  }
  depth_first = tree.depth_first();
  breadth_first = tree.breadth_first();
  with_stack = flag_fact(trace, "with_stack").value_or(python_events);
  record_shapes = flag_fact(trace, "record_shapes").value_or(trace.shapes_recorded);

  if (const auto arches = trace.facts.find("cuda_arch_list"); arches != trace.facts.end()) {
    cuda_arches = numbers_after(arches->second, "sm_");
  } else if (const auto devices = trace.facts.find("deviceProperties"); devices != trace.facts.end()) {
    const std::vector<int> major = numbers_after(devices->second, "\"computeMajor\"");
    const std::vector<int> minor = numbers_after(devices->second, "\"computeMinor\"");
    for (size_t i = 0; i < major.size(); ++i)
      cuda_arches.push_back(major[i] * 10 + (i < minor.size() ? minor[i] : 0));
  }

  trace_allow_tf32_ = flag_fact(trace, "allow_tf32_matmul");
  if (from_pytorch && !trace_allow_tf32_.has_value() && trace.source != "torch") {
    assumed.push_back(
        "allow_tf32_cublas (torch.backends.cuda.matmul.allow_tf32) is not in this trace (its format records "
        "no precision flags): taken as PyTorch's default, False since 1.12");
  }
}

bool TidyContext::allow_tf32_cublas(const TraceEvent& event) const {
  if (const std::string* recorded = event.attribute("allow_tf32_cublas")) return *recorded == "true";
  return trace_allow_tf32_.value_or(false);
}

bool TidyContext::is_torch_op(const TraceEvent& event) const {
  if (event.kind != EventKind::op && event.kind != EventKind::annotation) return false;
  // The live profiler says which operators are TorchOps (they have a RecordScope); files cannot
  // tell them from backend events, which CPU runs do not have.
  return trace.source != "torch" || event.attribute("scope") != nullptr;
}

std::string Pattern::report(const TidyContext& context, EventIndex event) const {
  return str_cat(description(), "\n[Source Code Location] ", context.location(event).text());
}

std::string Pattern::summary(const TidyContext&, std::span<const EventIndex> events) const {
  return str_cat(name(), ": ", events.size(), " events matched.");
}

std::vector<EventIndex> Pattern::matched_events(const TidyContext& context) {
  std::vector<EventIndex> matched;
  if (skip(context).has_value()) return matched;
  reset();
  for (const EventIndex event :
       traversal() == Traversal::depth_first ? context.depth_first : context.breadth_first) {
    if (match(context, event)) matched.push_back(event);
  }
  return matched;
}

Fix Pattern::fix(const TidyContext&, EventIndex) const {
  return {Fix::Kind::none, {}, {}, {}, "its fix is not one kiln can measure"};
}

const char* fix_kind_name(Fix::Kind kind) {
  switch (kind) {
    case Fix::Kind::none:
      return "none";
    case Fix::Kind::settings:
      return "settings";
    case Fix::Kind::step_removed:
      return "step_removed";
    case Fix::Kind::planning_ahead:
      return "planning_ahead";
    case Fix::Kind::thread_budget:
      return "thread_budget";
    case Fix::Kind::torch_benchmark:
      return "torch_benchmark";
  }
  return "?";
}

Fix::Kind fix_kind_from_name(std::string_view name) {
  for (const Fix::Kind kind : kFixKinds) {
    if (name == fix_kind_name(kind)) return kind;
  }
  std::string known;
  for (const Fix::Kind kind : kFixKinds) known += str_cat(known.empty() ? "" : ", ", fix_kind_name(kind));
  fail(ErrorKind::invalid_argument, "'", name, "' is not a fix kind (", known, ")");
}

}  // namespace kiln::tidy
