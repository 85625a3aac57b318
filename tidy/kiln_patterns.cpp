#include "tidy/kiln_patterns.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdio>
#include <map>
#include <string_view>

#include "core/error.h"

namespace kiln::tidy {
namespace {

bool any_of_names(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Ops that read each element once and write one: a pass over memory a fused kernel folds away.
bool is_elementwise(std::string_view op) {
  return any_of_names(op,
                      {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish",  "Elu",
                       "Selu", "Softplus",  "Erf",  "Exp",     "Log",  "Sqrt",        "Reciprocal", "Neg",
                       "Abs",  "Add",       "Sub",  "Mul",     "Div",  "Pow",         "Gelu",       "Mish"});
}

// Kernels that move no data: a view or a Reorder that only relabels.
bool moves_no_data(const TraceEvent& event) {
  return event.kernel.ends_with(":view") || event.kernel.ends_with(":reorder_free_view");
}

// "step 3 '/conv1/Conv' (Conv, onednn:brgconv:avx512_core)" (kernel names start with their backend's).
std::string step_text(const TraceEvent& step) {
  return str_cat("step ", step.step, " '", step.node, "' (", step.name, ", ", step.kernel, ")");
}

// A refusal that makes a native step a fallback: the backend implements the op but did not take this
// node. One that has no kernel for the op at all is no fallback, nor one autotune timed slower than
// the native kernel, nor one whose own rule left the node to a faster native kernel (native won).
bool implements_op(const Refusal& refusal) {
  return refusal.kind != RefusalKind::no_kernel && refusal.kind != RefusalKind::autotune_slower &&
         refusal.kind != RefusalKind::predicted_slower;
}

std::string format_ms(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f ms", static_cast<double>(ns) * 1e-6);
  return text;
}

// The base every kiln pattern shares: it reads kiln traces, and reports the matched step (or the
// run, or the planning) instead of a source location (a kiln trace has none), once per step.
class KilnPattern : public Pattern {
 public:
  bool reads_kiln_steps() const override { return true; }
  std::string report(const TidyContext& context, EventIndex event) const override {
    const TraceEvent& matched = context.tree.event(event);
    const std::string where = is_step(matched) ? step_text(matched) : detail(context, event);
    return str_cat(description(), "\n[Where] ", where);
  }
};

class ReorderBetweenStepsPattern final : public KilnPattern {
 public:
  std::string name() const override { return kReorderBetweenSteps; }
  Fix fix(const TidyContext&, EventIndex event) const override {
    return {Fix::Kind::step_removed,
            {},
            {event},
            {},
            "the Reorder gone: its producer writes its readers' layout"};
  }
  std::string description() const override {
    return "A Reorder converts a value between two steps that store it in different layouts. Run both on "
           "a backend that shares the layout (kiln explain shows why the plain-layout neighbour refused "
           "oneDNN), or keep the precision the same on both sides.";
  }
  bool match(const TidyContext& context, EventIndex event) override {
    const TraceEvent& reorder = context.tree.event(event);
    if (reorder.kind != EventKind::reorder || moves_no_data(reorder)) return false;
    const EventIndex producer = context.flow.producer(event, 0);
    if (producer == kNoEvent || context.tree.event(producer).kind != EventKind::step) return false;
    for (const EventIndex reader : context.flow.readers(event, 0)) {
      if (context.tree.event(reader).kind == EventKind::step) return true;
    }
    return false;
  }
  std::string detail(const TidyContext& context, EventIndex event) const override {
    const TraceEvent& reorder = context.tree.event(event);
    const EventIndex producer_index = context.flow.producer(event, 0);
    if (producer_index == kNoEvent) return step_text(reorder);
    const TraceEvent& producer = context.tree.event(producer_index);
    std::string readers;
    for (const EventIndex reader : context.flow.readers(event, 0))
      readers += str_cat(readers.empty() ? "" : ", ", step_text(context.tree.event(reader)));
    return str_cat(step_text(reorder), " ", reason(context, event), " between ", step_text(producer), " and ",
                   readers);
  }
  std::string reason(const TidyContext& context, EventIndex event) const override {
    const TraceEvent& reorder = context.tree.event(event);
    const std::string from = reorder.input_layouts.empty() ? "?" : reorder.input_layouts[0];
    const std::string to = reorder.output_layouts.empty() ? "?" : reorder.output_layouts[0];
    return str_cat("converts ", from, " to ", to);
  }
};

class NativeFallbackPattern final : public KilnPattern {
 public:
  std::string name() const override { return kNativeFallback; }
  // A refusal that names a setting goes when the setting changes: a disabled backend enabled,
  // deterministic mode off. Other refusals are gaps in the backend, which no setting closes.
  Fix fix(const TidyContext& context, EventIndex event) const override {
    Fix fix{
        Fix::Kind::settings,
        {},
        {},
        {},
        "planned with the setting its refusal names (a disabled backend enabled, deterministic mode off)"};
    for (const Refusal& refusal : context.tree.event(event).refusals) {
      std::pair<std::string, std::string> change;
      if (refusal.kind == RefusalKind::disabled) {
        change = {str_cat(refusal.backend, "_enabled"), "1"};
      } else if (refusal.kind == RefusalKind::deterministic) {
        change = {"deterministic", "0"};
      } else {
        continue;
      }
      if (std::find(fix.settings.begin(), fix.settings.end(), change) == fix.settings.end())
        fix.settings.push_back(std::move(change));
    }
    if (fix.settings.empty()) return {Fix::Kind::none, {}, {}, {}, "its refusals name no setting"};
    std::sort(fix.settings.begin(), fix.settings.end());
    return fix;
  }
  std::string description() const override {
    return "A step ran on the native (reference) kernels although a faster backend implements its op: "
           "that backend refused it. Remove the reason where it is a setting (a disabled backend, "
           "deterministic mode); otherwise it is a gap in the backend, worth reporting.";
  }
  bool match(const TidyContext& context, EventIndex event) override {
    const TraceEvent& step = context.tree.event(event);
    if (step.kind != EventKind::step || step.backend != "native" || moves_no_data(step)) return false;
    return std::any_of(step.refusals.begin(), step.refusals.end(), implements_op);
  }
  std::string detail(const TidyContext& context, EventIndex event) const override {
    return str_cat(step_text(context.tree.event(event)), ": ", refusals_text(context, event, false));
  }
  // The refusals a setting makes (what the fix changes), else every refusal of a backend that
  // implements the op.
  std::string reason(const TidyContext& context, EventIndex event) const override {
    std::string by_setting = refusals_text(context, event, true);
    return by_setting.empty() ? refusals_text(context, event, false) : by_setting;
  }

 private:
  static std::string refusals_text(const TidyContext& context, EventIndex event, bool settings_only) {
    std::string reasons;
    for (const Refusal& refusal : context.tree.event(event).refusals) {
      const bool by_setting =
          refusal.kind == RefusalKind::disabled || refusal.kind == RefusalKind::deterministic;
      if (implements_op(refusal) && (by_setting || !settings_only))
        reasons += str_cat(reasons.empty() ? "" : "; ", refusal.text());
    }
    return reasons;
  }
};

class FP32OnBF16CPUPattern final : public KilnPattern {
 public:
  std::string name() const override { return kFP32OnBF16CPU; }
  Fix fix(const TidyContext&, EventIndex) const override {
    return {Fix::Kind::settings,
            {{"conv_precision", "bf16"}, {"matmul_precision", "bf16"}},
            {},
            {},
            "planned with conv_precision and matmul_precision bf16"};
  }
  std::string description() const override {
    return "A float32 convolution or matrix product ran on a CPU with bf16 arithmetic. Where bf16's 8-bit "
           "mantissa is accurate enough (check the outputs), set conv_precision/matmul_precision to bf16 "
           "(--precision bf16; Python: kiln.backends.settings(precision='bf16')).";
  }
  Reason skip(const TidyContext& context) const override {
    if (!trace_has_bf16(context.trace)) {
      const auto extensions = context.trace.facts.find("cpu_extensions");
      return str_cat("the trace's CPU has no bf16 arithmetic (extensions: ",
                     extensions == context.trace.facts.end() ? "not recorded" : extensions->second, ")");
    }
    if (!context.trace.shapes_recorded)
      return "recorded without shapes: the steps' layouts (bf16 or not) are unknown";
    return std::nullopt;
  }
  bool match(const TidyContext& context, EventIndex event) override {
    const TraceEvent& step = context.tree.event(event);
    if (step.kind != EventKind::step || !is_product_op(step.name)) return false;
    if (step.input_dtypes.empty() || step.input_dtypes[0] != "float32" || step.input_layouts.empty())
      return false;
    return !step.input_layouts[0].ends_with("_bf16");
  }
  std::string detail(const TidyContext& context, EventIndex event) const override {
    const TraceEvent& step = context.tree.event(event);
    std::string shapes;
    for (const Shape& shape : step.input_shapes)
      shapes += str_cat(shapes.empty() ? "" : " ", shape_to_string(shape));
    return str_cat(step_text(step), " on ", shapes, " in float32 (",
                   step.input_layouts.empty() ? std::string("?") : step.input_layouts[0], ")");
  }
};

class UnfusedElementwisePattern final : public KilnPattern {
 public:
  std::string name() const override { return kUnfusedElementwise; }
  // After a product the elementwise op is a post-op, which costs next to nothing; after another
  // elementwise step, one of the two passes over memory goes.
  Fix fix(const TidyContext& context, EventIndex event) const override {
    const EventIndex head = unfused_head(context, event);
    if (head == kNoEvent) return {Fix::Kind::none, {}, {}, {}, "the step before it is not in the trace"};
    if (is_product_op(context.tree.event(head).name))
      return {
          Fix::Kind::step_removed, {}, {event}, {}, "the step fused into the product before it as a post-op"};
    return {Fix::Kind::step_removed, {}, {head, event}, {}, "the two passes fused into one"};
  }
  std::string description() const override {
    return "An elementwise step reads the only output of the step before it: one more pass over memory. "
           "A product's activation fuses into it where the backend takes it as a post-op (Relu, "
           "LeakyRelu, Clip, Sigmoid, Tanh, GELU, a bias or residual sum); others stay separate steps.";
  }
  bool match(const TidyContext& context, EventIndex event) override {
    return unfused_head(context, event) != kNoEvent;
  }
  std::string detail(const TidyContext& context, EventIndex event) const override {
    const TraceEvent& step = context.tree.event(event);
    const EventIndex head = unfused_head(context, event);
    if (head == kNoEvent) return step_text(step);
    return str_cat(step_text(step), " reads the only output of ", step_text(context.tree.event(head)));
  }
  std::string reason(const TidyContext& context, EventIndex event) const override {
    const EventIndex head = unfused_head(context, event);
    if (head == kNoEvent) return {};
    return str_cat(context.tree.event(event).name, " after ", context.tree.event(head).name);
  }
};

class TinyOpMultithreadedPattern final : public KilnPattern {
 public:
  explicit TinyOpMultithreadedPattern(int64_t tiny_step_ns) : tiny_step_ns_(tiny_step_ns) {}
  std::string name() const override { return kTinyOpMultithreaded; }
  Fix fix(const TidyContext&, EventIndex) const override {
    return {Fix::Kind::settings, {{"threads", "1"}}, {}, {}, "planned on 1 thread"};
  }
  std::string description() const override {
    return str_cat("Steps shorter than ", tiny_step_ns_ / 1000,
                   " us ran on several threads, and such steps are ", static_cast<int>(kTinyRunShare * 100),
                   "% or more of the run: starting and joining the threads costs more than the work they "
                   "share. Run the model on fewer threads (threads=1), or several models side by side.");
  }
  void reset() override { prepared_ = false; }
  bool match(const TidyContext& context, EventIndex event) override {
    if (!prepared_) prepare(context);
    if (!is_tiny_multithreaded(context.tree.event(event))) return false;
    const EventIndex run = context.flow.run_of(event);
    return run != kNoEvent && qualifying_runs_.count(run) != 0;
  }
  std::string detail(const TidyContext& context, EventIndex event) const override {
    const TraceEvent& step = context.tree.event(event);
    return str_cat(step_text(step), " took ", static_cast<double>(step.duration_ns()) / 1000.0, " us on ",
                   step.threads, " threads");
  }

 private:
  bool is_tiny_multithreaded(const TraceEvent& event) const {
    return is_step(event) && event.threads > 1 && event.duration_ns() < tiny_step_ns_ &&
           !moves_no_data(event);
  }
  void prepare(const TidyContext& context) {
    std::map<EventIndex, int64_t> tiny_ns;
    for (EventIndex i = 0; i < context.tree.size(); ++i) {
      const EventIndex run = context.flow.run_of(i);
      if (run != kNoEvent && is_tiny_multithreaded(context.tree.event(i)))
        tiny_ns[run] += context.tree.event(i).duration_ns();
    }
    qualifying_runs_.clear();
    for (const auto& [run, ns] : tiny_ns) {
      const int64_t run_ns = context.tree.event(run).duration_ns();
      if (run_ns > 0 && static_cast<double>(ns) >= kTinyRunShare * static_cast<double>(run_ns))
        qualifying_runs_.insert({run, ns});
    }
    prepared_ = true;
  }
  int64_t tiny_step_ns_;
  bool prepared_ = false;
  std::map<EventIndex, int64_t> qualifying_runs_;
};

class OversubscriptionPattern final : public KilnPattern {
 public:
  std::string name() const override { return kOversubscription; }
  Fix fix(const TidyContext&, EventIndex) const override {
    return {Fix::Kind::thread_budget,
            {},
            {},
            {},
            "concurrent runs leasing their threads from a budget at the cores"};
  }
  std::string description() const override {
    return "Steps ran while the steps running at once (concurrent runs, parallel branches) asked for more "
           "threads than the machine has cores: threads wait for a core and caches are shared. Keep "
           "runs x threads within the cores: the thread budget (KILN_THREAD_BUDGET, on by default), fewer "
           "threads per run, or fewer concurrent runs.";
  }
  Reason skip(const TidyContext& context) const override {
    if (trace_cores(context.trace) <= 0) return "the trace does not say how many cores its machine had";
    return std::nullopt;
  }
  void reset() override { prepared_ = false; }
  bool match(const TidyContext& context, EventIndex event) override {
    if (!prepared_) prepare(context);
    return peak_threads_[event] > trace_cores(context.trace);
  }
  std::string detail(const TidyContext& context, EventIndex event) const override {
    const TraceEvent& step = context.tree.event(event);
    return str_cat(step_text(step), " ran while steps asking for ", peak_threads_[event],
                   " threads ran at once on ", trace_cores(context.trace), " cores");
  }

 private:
  // For each step, the most threads the steps running at once asked for during it. A sweep over
  // starts and ends (an end before a start at the same time) gives the threads asked for after each
  // edge; a step is running from its start edge to before its end edge, and its peak is the largest
  // of those sums in between: a range maximum (a segment tree), so O(n log n) however many overlap.
  void prepare(const TidyContext& context) {
    const size_t size = context.tree.size();
    peak_threads_.assign(size, 0);
    struct Edge {
      int64_t time;
      int64_t change;  // - threads for an end, + threads for a start (ends first at equal times)
      EventIndex step;
      bool operator<(const Edge& other) const {
        return time != other.time ? time < other.time : change < other.change;
      }
    };
    std::vector<Edge> edges;
    for (EventIndex i = 0; i < size; ++i) {
      const TraceEvent& event = context.tree.event(i);
      if (!is_step(event) || event.threads <= 0) continue;
      edges.push_back({event.start_ns, event.threads, i});
      edges.push_back({event.end_ns, -static_cast<int64_t>(event.threads), i});
    }
    std::sort(edges.begin(), edges.end());
    const size_t count = edges.size();
    std::vector<size_t> start_at(size, 0);
    std::vector<size_t> end_at(size, 0);
    std::vector<int64_t> tree(2 * count, 0);  // leaves count..2count-1: threads asked after each edge
    int64_t threads = 0;                      // int64: a loaded trace may claim any count
    for (size_t k = 0; k < count; ++k) {
      threads += edges[k].change;
      tree[count + k] = threads;
      (edges[k].change > 0 ? start_at : end_at)[edges[k].step] = k;
    }
    for (size_t k = count; k-- > 1;) tree[k] = std::max(tree[2 * k], tree[2 * k + 1]);
    for (const Edge& edge : edges) {
      if (edge.change <= 0) continue;
      int64_t peak = 0;
      for (size_t low = count + start_at[edge.step],
                  high = count + std::max(end_at[edge.step], start_at[edge.step] + 1);
           low < high; low /= 2, high /= 2) {
        if (low % 2 == 1) peak = std::max(peak, tree[low++]);
        if (high % 2 == 1) peak = std::max(peak, tree[--high]);
      }
      peak_threads_[edge.step] = peak;
    }
    prepared_ = true;
  }
  bool prepared_ = false;
  std::vector<int64_t> peak_threads_;
};

class PlanCacheMissPattern final : public KilnPattern {
 public:
  std::string name() const override { return kPlanCacheMiss; }
  Fix fix(const TidyContext&, EventIndex) const override {
    return {Fix::Kind::planning_ahead, {}, {}, {}, "every input shape planned during warm-up"};
  }
  std::string description() const override {
    return "The session planned again after runs had started: new input shapes (or settings) missed the "
           "plan cache, and planning (shape inference, kernel creation, weight reorders) ran inside the "
           "steady state. Pad or bucket inputs to a few shapes, and plan each ahead "
           "(Session::plan_for, Session.plan) during warm-up.";
  }
  void reset() override { prepared_ = false; }
  bool match(const TidyContext& context, EventIndex event) override {
    if (!prepared_) {
      first_run_end_ = INT64_MAX;
      for (const TraceEvent& run : context.trace.events) {
        if (run.kind == EventKind::run) first_run_end_ = std::min(first_run_end_, run.end_ns);
      }
      prepared_ = true;
    }
    const TraceEvent& plan = context.tree.event(event);
    return plan.kind == EventKind::plan && plan.start_ns >= first_run_end_;
  }
  std::string detail(const TidyContext& context, EventIndex event) const override {
    const TraceEvent& plan = context.tree.event(event);
    std::string shapes;
    for (const Shape& shape : plan.input_shapes)
      shapes += str_cat(shapes.empty() ? "" : " ", shape_to_string(shape));
    return str_cat("planning for inputs ", shapes.empty() ? std::string("(shapes not recorded)") : shapes,
                   " under '", plan.settings, "' took ", format_ms(plan.duration_ns()),
                   " after the first run");
  }

 private:
  bool prepared_ = false;
  int64_t first_run_end_ = INT64_MAX;
};

class IdleGapPattern final : public KilnPattern {
 public:
  std::string name() const override { return kIdleGap; }
  Fix fix(const TidyContext&, EventIndex) const override {
    return {Fix::Kind::none, {}, {}, {}, "the idle time is spent outside kiln (what feeds the runs)"};
  }
  std::string description() const override {
    return "A run started after a gap in which kiln did nothing (no run, no planning, on any thread) "
           "longer than the run before it: the time goes to what feeds the runs (input loading, "
           "pre-processing), not to kiln. Prepare the next input while a run executes "
           "(Session::run_async, a prefetching loader).";
  }
  void reset() override { prepared_ = false; }
  bool match(const TidyContext& context, EventIndex event) override {
    if (!prepared_) prepare(context);
    return gap_ns_.count(event) != 0;
  }
  std::string detail(const TidyContext& context, EventIndex event) const override {
    const auto found = gap_ns_.find(event);
    if (found == gap_ns_.end()) return {};
    return str_cat("run ", context.tree.event(event).id, " started ", format_ms(found->second.first),
                   " after kiln's previous work ended; the run before it took ",
                   format_ms(found->second.second));
  }

 private:
  // Runs and planning on every thread, in start order: a run that starts after everything before it
  // ended (a gap in the union of their intervals) longer than the last run to end.
  void prepare(const TidyContext& context) {
    gap_ns_.clear();
    int64_t busy_until = INT64_MIN;
    int64_t last_run_ns = -1;  // the duration of the run that ended last
    int64_t last_run_end = INT64_MIN;
    for (EventIndex i = 0; i < context.tree.size(); ++i) {
      const TraceEvent& event = context.tree.event(i);
      if (event.kind != EventKind::run && event.kind != EventKind::plan) continue;
      if (event.kind == EventKind::run && last_run_ns >= 0 && event.start_ns > busy_until) {
        const int64_t gap = event.start_ns - busy_until;
        if (gap > last_run_ns) gap_ns_[i] = {gap, last_run_ns};
      }
      busy_until = std::max(busy_until, event.end_ns);
      if (event.kind == EventKind::run && event.end_ns >= last_run_end) {
        last_run_end = event.end_ns;
        last_run_ns = event.duration_ns();
      }
    }
    prepared_ = true;
  }
  bool prepared_ = false;
  std::map<EventIndex, std::pair<int64_t, int64_t>> gap_ns_;  // run: (gap, the last run's time)
};

}  // namespace

bool is_product_op(std::string_view op) {
  return any_of_names(op, {"Conv", "ConvTranspose", "MatMul", "Gemm"});
}

EventIndex unfused_head(const TidyContext& context, EventIndex event) {
  const TraceEvent& step = context.tree.event(event);
  if (step.kind != EventKind::step || !is_elementwise(step.name)) return kNoEvent;
  // Each link of the chain is a value only the next step reads; Reorders between the two (a native
  // elementwise step next to oneDNN's nhwc) are links too, and ReorderBetweenStepsPattern's matches.
  const auto only_reader_is = [&](EventIndex producer, EventIndex reader) {
    const std::span<const EventIndex> readers = context.flow.readers(producer, 0);
    return context.tree.event(producer).outputs.size() == 1 && readers.size() == 1 && readers[0] == reader;
  };
  for (size_t input = 0; input < step.inputs.size(); ++input) {
    EventIndex reader = event;
    EventIndex producer = context.flow.producer(event, input);
    while (producer != kNoEvent && context.tree.event(producer).kind == EventKind::reorder &&
           only_reader_is(producer, reader)) {
      reader = producer;
      producer = context.flow.producer(producer, 0);
    }
    if (producer == kNoEvent || context.tree.event(producer).kind != EventKind::step) continue;
    const std::string& op = context.tree.event(producer).name;
    if ((is_product_op(op) || is_elementwise(op)) && only_reader_is(producer, reader)) return producer;
  }
  return kNoEvent;
}

int trace_cores(const Trace& trace) {
  const auto found = trace.facts.find("cores");
  if (found == trace.facts.end()) return 0;
  int cores = 0;
  const std::string& text = found->second;
  std::from_chars(text.data(), text.data() + text.size(), cores);
  return cores;
}

bool has_bf16(const std::string& cpu_extensions) {
  return cpu_extensions.find("AVX512_BF16") != std::string::npos ||
         cpu_extensions.find("AMX_BF16") != std::string::npos;
}

bool trace_has_bf16(const Trace& trace) {
  const auto found = trace.facts.find("cpu_extensions");
  return found != trace.facts.end() && has_bf16(found->second);
}

std::vector<std::unique_ptr<Pattern>> kiln_patterns(int64_t tiny_step_ns) {
  std::vector<std::unique_ptr<Pattern>> patterns;
  patterns.push_back(std::make_unique<ReorderBetweenStepsPattern>());
  patterns.push_back(std::make_unique<NativeFallbackPattern>());
  patterns.push_back(std::make_unique<FP32OnBF16CPUPattern>());
  patterns.push_back(std::make_unique<UnfusedElementwisePattern>());
  patterns.push_back(std::make_unique<TinyOpMultithreadedPattern>(tiny_step_ns));
  patterns.push_back(std::make_unique<OversubscriptionPattern>());
  patterns.push_back(std::make_unique<PlanCacheMissPattern>());
  patterns.push_back(std::make_unique<IdleGapPattern>());
  return patterns;
}

}  // namespace kiln::tidy
