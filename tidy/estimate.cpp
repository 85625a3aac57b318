#include "tidy/estimate.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "backends/backends.h"
#include "backends/settings.h"
#include "core/error.h"
#include "graph/observer.h"
#include "graph/random_input.h"
#include "graph/session.h"
#include "graph/step_timer.h"
#include "runtime/thread_budget.h"
#include "tidy/kiln_patterns.h"
#include "tidy/torch_estimate.h"

namespace kiln::tidy {
namespace {

constexpr const char* kReorderOp = "Reorder";
constexpr int kPlanningRounds = 5;
// Distinct input shapes whose planning is timed (each takes kPlanningRounds fresh sessions).
constexpr size_t kMaxPlannedShapes = 8;
// Inputs a trace may ask to allocate, per input.
constexpr int64_t kMaxInputElements = int64_t{1} << 30;
// Concurrent runs a replay starts, at most (a trace may claim any concurrency).
constexpr int kMaxConcurrentRuns = 16;
// Concurrent runs are noisy (threads wait for cores): each version is timed in alternating rounds.
constexpr int kConcurrentRounds = 3;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

// One plan's steps timed: the median of each over the runs. Lookups by node are indexed once: a
// pattern asks for the same nodes once per run the trace recorded.
class Measured {
 public:
  Measured() = default;
  Measured(std::shared_ptr<const Plan> plan, std::vector<double> step_ms)
      : plan_(std::move(plan)), step_ms_(std::move(step_ms)) {
    const std::vector<PlanStep>& steps = plan_->steps();
    for (size_t s = 0; s < steps.size(); ++s) {
      step_of_.try_emplace(steps[s].record.node_name, static_cast<int>(s));
      // A fused node's cost is its step's, not its own.
      for (const FusedNode& fused : steps[s].record.fused) fused_away_.insert(fused.node);
    }
  }
  const Plan& plan() const { return *plan_; }

  // The step that computes `node` (a fused step is named by its first node), or -1.
  int step_of(const std::string& node) const {
    const auto found = step_of_.find(node);
    return found == step_of_.end() ? -1 : found->second;
  }
  // `node`'s step time; 0 for a node fused into another's step.
  std::optional<double> ms(const std::string& node) const {
    const int step = step_of(node);
    if (step < 0) return fused_away_.count(node) != 0 ? std::optional<double>(0.0) : std::nullopt;
    return step_ms_[static_cast<size_t>(step)];
  }
  // `node`'s step and the Reorders next to it (writing a value it reads, or reading one it writes)
  // that `base` does not have: what running that node costs in this plan (0 when fused away).
  std::optional<double> ms_with_new_reorders(const std::string& node, const Measured& base) const {
    const auto known = with_reorders_.find(node);
    if (known != with_reorders_.end()) return known->second;
    std::optional<double> total = ms(node);
    const int step = step_of(node);
    if (step >= 0) {
      const std::vector<PlanStep>& steps = plan_->steps();
      const PlanStep& target = steps[static_cast<size_t>(step)];
      const auto touches = [](const std::vector<int>& written, const std::vector<int>& read) {
        return std::any_of(written.begin(), written.end(), [&](int slot) {
          return slot >= 0 && std::find(read.begin(), read.end(), slot) != read.end();
        });
      };
      for (size_t s = 0; s < steps.size(); ++s) {
        const PlanStep& other = steps[s];
        if (other.record.op_type != kReorderOp || base.step_of(other.record.node_name) >= 0) continue;
        if (touches(other.outputs, target.inputs) || touches(target.outputs, other.inputs))
          *total += step_ms_[s];
      }
    }
    with_reorders_.emplace(node, total);
    return total;
  }

 private:
  std::shared_ptr<const Plan> plan_;
  std::vector<double> step_ms_;
  std::unordered_map<std::string, int> step_of_;
  std::unordered_set<std::string> fused_away_;
  mutable std::unordered_map<std::string, std::optional<double>> with_reorders_;
};

std::string fact(const profiler::Trace& trace, const std::string& name) {
  const auto found = trace.facts.find(name);
  return found == trace.facts.end() ? std::string() : found->second;
}

// Each run's execution time (Observer::on_run_begin to on_run_end, which runs on the run's own
// thread), from any number of threads at once.
class RunTimer final : public Observer {
 public:
  void on_run_begin(const Plan&) override { started() = std::chrono::steady_clock::now(); }
  void on_run_end(const Plan&) override {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started()).count();
    std::lock_guard lock(mutex_);
    samples_.push_back(ms);
  }
  double median_ms() {
    std::lock_guard lock(mutex_);
    return median(samples_);
  }

 private:
  static std::chrono::steady_clock::time_point& started() {
    thread_local std::chrono::steady_clock::time_point start;
    return start;
  }
  std::mutex mutex_;
  std::vector<double> samples_;
};

// How many runs were in flight on average while any was (the runs' time over the time covered by at
// least one), rounded: the concurrency a replay reproduces. The most at once overstates it where
// callers contend for something else too (Python's lock).
int concurrent_runs(const profiler::Trace& trace) {
  std::vector<std::pair<int64_t, int>> edges;
  int64_t run_ns = 0;
  for (const TraceEvent& event : trace.events) {
    if (event.kind != EventKind::run) continue;
    edges.emplace_back(event.start_ns, 1);
    edges.emplace_back(event.end_ns, -1);
    run_ns += event.duration_ns();
  }
  std::sort(edges.begin(), edges.end());  // an end before a start at the same time
  int running = 0;
  int64_t covered_ns = 0;
  int64_t since = 0;
  for (const auto& [time, change] : edges) {
    if (running > 0) covered_ns += time - since;
    running += change;
    since = time;
  }
  if (covered_ns <= 0) return running;
  return static_cast<int>(static_cast<double>(run_ns) / static_cast<double>(covered_ns) + 0.5);
}

// Plans and times the trace's model at its shapes under the current settings plus a fix's changes.
class Bench {
 public:
  Bench(const profiler::Trace& trace, const EstimateOptions& options)
      : runs_(std::max(options.runs, 1)), model_(options.model) {
    const std::map<std::string, std::string> here = profiler::machine_facts();
    for (const char* name : {"cpu", "cpu_extensions"}) {
      const std::string recorded = fact(trace, name);
      if (!recorded.empty() && recorded != here.at(name)) {
        unusable_ = str_cat("the trace was recorded on another machine (", name, " '", recorded, "'; here '",
                            here.at(name), "')");
        return;
      }
    }
    // The runs' most frequent plan (a run granted fewer threads by the budget, or planned for other
    // shapes, ran another): what the measurements reproduce.
    std::map<std::pair<std::string, std::vector<Shape>>, std::pair<int, const TraceEvent*>> plans;
    const TraceEvent* typical = nullptr;
    for (const TraceEvent& event : trace.events) {
      if (event.kind != EventKind::run) continue;
      auto& [count, run] = plans[{event.settings, event.input_shapes}];
      if (++count == 1) run = &event;
      if (typical == nullptr || count > plans[{typical->settings, typical->input_shapes}].first)
        typical = run;
    }
    if (typical == nullptr) {
      unusable_ = "the trace has no kiln run";
      return;
    }
    if (!trace.shapes_recorded) {
      unusable_ = "recorded without shapes: the runs' input shapes are unknown";
      return;
    }
    for (const Shape& shape : typical->input_shapes) {
      int64_t elements = 1;
      for (const int64_t dim : shape) {
        if (dim < 0 || (dim > 0 && elements > kMaxInputElements / dim)) {
          unusable_ = str_cat("the trace's input shape ", shape_to_string(shape),
                              " is not one to allocate (over ", kMaxInputElements, " elements)");
          return;
        }
        elements *= dim;
      }
    }
    session_ = std::make_unique<Session>(model_);
    inputs_ = random_inputs(session_->inputs(), typical->input_shapes);
    base_ = measure(Settings{});
    if (base_.plan().settings_text() != typical->settings) {
      unusable_ = str_cat("most of the trace's runs were planned under '", typical->settings,
                          "', this process plans under '", base_.plan().settings_text(),
                          "': give the same settings (options) the trace ran with");
    }
  }

  const Reason& unusable() const { return unusable_; }
  const Measured& base() const { return base_; }
  int runs() const { return runs_; }
  int threads() const { return base_.plan().threads(); }

  Measured measure(const Settings& changes) {
    const ScopedSettings fix(changes);
    std::shared_ptr<const Plan> plan = session_->plan_for(inputs_.ordered);
    std::vector<double> step_ms = profile_steps(*session_, inputs_.by_name, *plan, runs_);
    return Measured(std::move(plan), std::move(step_ms));
  }

  // The median execution time of the runs of `concurrent` threads each running the model `runs` times
  // at once under `changes`, with thread budget `budget` (0: off, as in a trace that oversubscribed):
  // from a run's start to its end, as its event in a trace, without the wait for threads before it.
  double concurrent_run_ms(const Settings& changes, int concurrent, int budget) {
    struct RestoreBudget {
      int budget = get_thread_budget();
      ~RestoreBudget() { set_thread_budget(budget); }
    } restore;
    set_thread_budget(budget);
    {
      const ScopedSettings fix(changes);
      session_->run(inputs_.by_name);  // plans before timing
    }
    RunTimer timer;
    const ScopedObserver observing(*session_, &timer);
    std::vector<std::exception_ptr> failures(static_cast<size_t>(concurrent));
    std::vector<std::thread> threads;
    for (int t = 0; t < concurrent; ++t) {
      threads.emplace_back([&, t] {
        try {
          const ScopedSettings fix(changes);
          for (int r = 0; r < runs_; ++r) session_->run(inputs_.by_name);
        } catch (...) {
          failures[static_cast<size_t>(t)] = std::current_exception();
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (const std::exception_ptr& failure : failures) {
      if (failure) std::rethrow_exception(failure);
    }
    return timer.median_ms();
  }

  // The median time of planning the model for `shapes` as a cache miss does: with oneDNN's primitive
  // cache cleared first (new shapes create new primitives; the cache would make a repeat cheap).
  double planning_ms(const std::vector<Shape>& shapes) {
    std::vector<double> times;
    for (int round = 0; round < kPlanningRounds; ++round) {
      // A new session each time: a session keeps its plans, and releases the weights they packed.
      Session fresh(model_);
      if (backends::info("onednn").built) backends::onednn::primitive_cache::clear();
      const auto start = std::chrono::steady_clock::now();
      fresh.plan_for(shapes);
      times.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    return median(std::move(times));
  }

 private:
  int runs_;
  std::string model_;
  Reason unusable_;
  std::unique_ptr<Session> session_;
  RandomInputs inputs_;
  Measured base_;
};

// The matched event; the report must be the trace's (estimate_savings checks every id first).
const TraceEvent& event_of(const profiler::Trace& trace, const TidyMatch& match) {
  return trace.events[match.event_id - 1];
}

// Per match: the saving, or nothing where this match cannot be estimated.
using SavingOf = std::function<std::optional<double>(const TidyMatch&)>;

void apply(PatternEstimate& estimate, std::vector<TidyMatch*>& matches, const SavingOf& saving_of) {
  double total = 0;
  bool any = false;
  for (TidyMatch* match : matches) {
    match->estimated_saving_ms = saving_of(*match);
    if (!match->estimated_saving_ms) continue;
    total += *match->estimated_saving_ms;
    any = true;
  }
  if (any) estimate.saving_ms = total;
}

// The saving of a fix that changes settings: each matched step timed in both plans.
SavingOf step_time_difference(const profiler::Trace& trace, const Measured& before, const Measured& after,
                              bool with_new_reorders) {
  return [&trace, &before, &after, with_new_reorders](const TidyMatch& match) -> std::optional<double> {
    const std::string& node = event_of(trace, match).node;
    const std::optional<double> was = before.ms(node);
    const std::optional<double> is =
        with_new_reorders ? after.ms_with_new_reorders(node, before) : after.ms(node);
    if (!was || !is) return std::nullopt;
    return *was - *is;
  };
}

void estimate_fp32_on_bf16(PatternEstimate& estimate, std::vector<TidyMatch*>& matches,
                           const profiler::Trace& trace, Bench& bench) {
  const std::string extensions = profiler::machine_facts().at("cpu_extensions");
  if (!has_bf16(extensions)) {
    estimate.basis = str_cat("this CPU has no bf16 arithmetic (extensions: ", extensions, ")");
    return;
  }
  Settings fix;
  fix.set_by_name("conv_precision", static_cast<int>(Precision::bf16));
  fix.set_by_name("matmul_precision", static_cast<int>(Precision::bf16));
  const Measured bf16 = bench.measure(fix);
  estimate.basis = str_cat(
      "each step planned again with conv_precision and matmul_precision bf16 and timed with the "
      "Reorders that adds next to it (median of ",
      bench.runs(), " runs)");
  apply(estimate, matches, step_time_difference(trace, bench.base(), bf16, /*with_new_reorders=*/true));
}

// The setting a refusal's kind names, as the change that removes it: a disabled backend is
// enabled, deterministic mode turned off. Nothing for a refusal that names no setting (an attribute or
// dtype the backend does not take).
std::optional<std::pair<std::string, int>> setting_fix(const Refusal& refusal) {
  std::pair<std::string, int> change;
  if (refusal.kind == RefusalKind::disabled) {
    change = {str_cat(refusal.backend, "_enabled"), 1};
  } else if (refusal.kind == RefusalKind::deterministic) {
    change = {"deterministic", 0};
  } else {
    return std::nullopt;
  }
  // A backend this build does not have (a trace from another build) names no setting here.
  try {
    Settings().set_by_name(change.first, change.second);
  } catch (const Error&) {
    return std::nullopt;
  }
  return change;
}

void estimate_native_fallbacks(PatternEstimate& estimate, std::vector<TidyMatch*>& matches,
                               const profiler::Trace& trace, Bench& bench) {
  // Each distinct fix (the settings the matched steps' refusals name) measured once.
  std::map<std::vector<std::pair<std::string, int>>, Measured> fixed;
  std::map<const TidyMatch*, const Measured*> plan_of;
  for (const TidyMatch* match : matches) {
    std::vector<std::pair<std::string, int>> changes;
    for (const Refusal& refusal : event_of(trace, *match).refusals) {
      if (const auto change = setting_fix(refusal))
        if (std::find(changes.begin(), changes.end(), *change) == changes.end()) changes.push_back(*change);
    }
    if (changes.empty()) continue;
    std::sort(changes.begin(), changes.end());
    auto found = fixed.find(changes);
    if (found == fixed.end()) {
      Settings fix;
      for (const auto& [name, value] : changes) fix.set_by_name(name, value);
      found = fixed.emplace(changes, bench.measure(fix)).first;
    }
    plan_of[match] = &found->second;
  }
  estimate.basis = str_cat(
      "each step planned again with the setting its refusal names (a disabled backend enabled, "
      "deterministic mode off) and timed with the Reorders that adds next to it (median of ",
      bench.runs(),
      " runs); a node fused into another step there costs nothing of its own. "
      "Refusals that name no setting are not estimated");
  apply(estimate, matches, [&](const TidyMatch& match) -> std::optional<double> {
    const auto plan = plan_of.find(&match);
    if (plan == plan_of.end()) return std::nullopt;
    const std::string& node = event_of(trace, match).node;
    const std::optional<double> was = bench.base().ms(node);
    const std::optional<double> is = plan->second->ms_with_new_reorders(node, bench.base());
    if (!was || !is) return std::nullopt;
    return *was - *is;
  });
}

void estimate_tiny_ops(PatternEstimate& estimate, std::vector<TidyMatch*>& matches,
                       const profiler::Trace& trace, Bench& bench) {
  Settings fix;
  fix.set_by_name("threads", 1);
  const Measured single = bench.measure(fix);
  estimate.basis =
      str_cat("each step timed on 1 thread and on ", bench.threads(), " (median of ", bench.runs(), " runs)");
  apply(estimate, matches, step_time_difference(trace, bench.base(), single, /*with_new_reorders=*/false));
}

void estimate_unfused(PatternEstimate& estimate, std::vector<TidyMatch*>& matches,
                      const profiler::Trace& trace, const Bench& bench) {
  // The chain's head, as the pattern found it: the tree and data flow built again only here.
  const EventTree tree(trace);
  const TidyContext context(tree);
  estimate.basis = str_cat(
      "the elementwise step's own time where the step before it is a product (its post-op "
      "would cost next to nothing), else the shorter of the two passes (median of ",
      bench.runs(), " runs)");
  apply(estimate, matches, [&](const TidyMatch& match) -> std::optional<double> {
    const EventIndex step = static_cast<EventIndex>(match.event_id - 1);
    const EventIndex head = unfused_head(context, step);
    const std::optional<double> tail_ms = bench.base().ms(tree.event(step).node);
    const std::optional<double> head_ms =
        head == kNoEvent ? std::nullopt : bench.base().ms(tree.event(head).node);
    if (!tail_ms || !head_ms) return std::nullopt;
    return is_product_op(tree.event(head).name) ? *tail_ms : std::min(*tail_ms, *head_ms);
  });
}

void estimate_oversubscription(PatternEstimate& estimate, std::vector<TidyMatch*>& matches,
                               const profiler::Trace& trace, Bench& bench) {
  const int concurrent = std::min(concurrent_runs(trace), kMaxConcurrentRuns);
  const int cores = trace_cores(trace);
  if (concurrent <= 1) {
    estimate.basis =
        "the oversubscription is within runs (a step on more threads than cores, or parallel branches): not "
        "estimated; compare thread counts or execution modes with kiln bench";
    return;
  }
  // The fix is kiln's thread budget at the cores (its default): concurrent runs lease their threads
  // from it instead of each starting a team of its own.
  Settings as_traced;
  as_traced.set_by_name("threads", bench.threads());
  std::vector<double> before;
  std::vector<double> after;
  for (int round = 0; round < kConcurrentRounds; ++round) {
    before.push_back(bench.concurrent_run_ms(as_traced, concurrent, 0));
    after.push_back(bench.concurrent_run_ms(as_traced, concurrent, cores));
  }
  const double before_ms = median(before);
  const double after_ms = median(after);
  estimate.basis = str_cat(
      concurrent, " runs of ", bench.threads(),
      " threads at once, each run's execution (not its wait for threads) timed with the thread "
      "budget off (",
      before_ms, " ms) and at the ", cores, " cores (", after_ms, " ms), medians of ", kConcurrentRounds,
      " alternating rounds of ", bench.runs(), " runs each: each matched step's time scaled by that");
  apply(estimate, matches,
        [&](const TidyMatch& match) { return match.time_ms * (1 - after_ms / before_ms); });
}

void estimate_plan_cache_misses(PatternEstimate& estimate, std::vector<TidyMatch*>& matches,
                                const profiler::Trace& trace, Bench& bench) {
  estimate.basis =
      str_cat("planning for each shape timed here, oneDNN's primitive cache cleared first (median of ",
              kPlanningRounds, "): what planning every shape during warm-up takes out of the steady state");
  std::map<std::vector<Shape>, double> planning;
  apply(estimate, matches, [&](const TidyMatch& match) -> std::optional<double> {
    const std::vector<Shape>& shapes = event_of(trace, match).input_shapes;
    if (shapes.empty()) return std::nullopt;
    auto known = planning.find(shapes);
    if (known == planning.end()) {
      if (planning.size() >= kMaxPlannedShapes) return std::nullopt;
      known = planning.emplace(shapes, bench.planning_ms(shapes)).first;
    }
    return known->second;
  });
  if (planning.size() >= kMaxPlannedShapes)
    estimate.basis +=
        str_cat("; planning for more than ", kMaxPlannedShapes, " distinct shapes is not timed");
}

// One pattern's estimate, by its fix.
void estimate_pattern(const std::string& name, PatternEstimate& estimate, std::vector<TidyMatch*>& matches,
                      const profiler::Trace& trace, const std::function<Bench*()>& get_bench,
                      const Reason& bench_unusable) {
  if (name == kIdleGap) {
    estimate.basis = "the idle time is spent outside kiln (what feeds the runs)";
  } else if (Bench* measured = get_bench(); measured == nullptr) {
    estimate.basis = bench_unusable.value_or("");
    if (name == kPlanCacheMiss) {
      estimate.basis += "; the planning time recorded instead";
      apply(estimate, matches, [](const TidyMatch& match) { return match.time_ms; });
    }
  } else if (name == kReorderBetweenSteps) {
    estimate.basis = str_cat("each Reorder's own time here (median of ", measured->runs(),
                             " runs): what a producer writing its reader's layout saves");
    apply(estimate, matches,
          [&](const TidyMatch& match) { return measured->base().ms(event_of(trace, match).node); });
  } else if (name == kUnfusedElementwise) {
    estimate_unfused(estimate, matches, trace, *measured);
  } else if (name == kFP32OnBF16CPU) {
    estimate_fp32_on_bf16(estimate, matches, trace, *measured);
  } else if (name == kNativeFallback) {
    estimate_native_fallbacks(estimate, matches, trace, *measured);
  } else if (name == kTinyOpMultithreaded) {
    estimate_tiny_ops(estimate, matches, trace, *measured);
  } else if (name == kOversubscription) {
    estimate_oversubscription(estimate, matches, trace, *measured);
  } else if (name == kPlanCacheMiss) {
    estimate_plan_cache_misses(estimate, matches, trace, *measured);
  }
}

}  // namespace

void estimate_savings(TidyReport& report, const profiler::Trace& trace, const EstimateOptions& options) {
  for (const TidyMatch& match : report.matches) {
    KILN_CHECK(match.event_id >= 1 && match.event_id <= trace.events.size(), invalid_argument,
               "estimate_savings: the report's match of event ", match.event_id, " is not in this trace (",
               trace.events.size(), " events): give the trace the report was made from");
  }
  if (trace.source != "kiln" && trace.source != "kiln_json") {
    estimate_torch_savings(report, trace, torch_python());
    return;
  }
  std::map<std::string, std::vector<TidyMatch*>> by_pattern;
  for (TidyMatch& match : report.matches) by_pattern[match.pattern].push_back(&match);
  report.estimates.clear();

  // The model is planned and timed once, when the first pattern needs it. What cannot be measured
  // (the model gone, shapes it refuses, a run that fails) is "not estimated" with the error.
  std::unique_ptr<Bench> bench;
  Reason bench_unusable;
  const auto get_bench = [&]() -> Bench* {
    if (bench || bench_unusable) return bench.get();
    if (options.model.empty()) {
      bench_unusable = "no model given: pass the ONNX file the trace ran (--model) to measure the fix";
      return nullptr;
    }
    try {
      bench = std::make_unique<Bench>(trace, options);
    } catch (const std::exception& error) {
      bench_unusable = str_cat("could not run the model: ", error.what());
      return nullptr;
    }
    if (bench->unusable()) {
      bench_unusable = bench->unusable();
      bench.reset();
    }
    return bench.get();
  };
  for (const std::unique_ptr<Pattern>& pattern : kiln_patterns()) {
    const std::string name = pattern->name();
    const auto found = by_pattern.find(name);
    if (found == by_pattern.end()) continue;
    std::vector<TidyMatch*>& matches = found->second;
    PatternEstimate estimate{name, 0, std::nullopt, {}};
    for (const TidyMatch* match : matches) estimate.matched_ms += match->time_ms;

    try {
      estimate_pattern(name, estimate, matches, trace, get_bench, bench_unusable);
    } catch (const std::exception& error) {
      for (TidyMatch* match : matches) match->estimated_saving_ms.reset();
      estimate.saving_ms.reset();
      estimate.basis = str_cat("measuring the fix failed: ", error.what());
    }
    report.estimates.push_back(std::move(estimate));
  }
}

}  // namespace kiln::tidy
