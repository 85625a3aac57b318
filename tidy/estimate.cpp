#include "tidy/estimate.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

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
// Concurrent runs are noisy (threads wait for cores): each version is timed in alternating rounds.
constexpr int kConcurrentRounds = 3;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

// One plan's steps timed: the median of each over the runs.
struct Measured {
  std::shared_ptr<const Plan> plan;
  std::vector<double> step_ms;

  // The step that computes `node` (a fused step is named by its first node), or -1.
  int step_of(const std::string& node) const {
    const std::vector<PlanStep>& steps = plan->steps();
    for (size_t s = 0; s < steps.size(); ++s) {
      if (steps[s].record.node_name == node) return static_cast<int>(s);
    }
    return -1;
  }
  std::optional<double> ms(const std::string& node) const {
    const int step = step_of(node);
    if (step < 0) return std::nullopt;
    return step_ms[static_cast<size_t>(step)];
  }
  // `node`'s step and the Reorders next to it (writing a value it reads, or reading one it writes)
  // that `base` does not have: what running that node costs in this plan.
  std::optional<double> ms_with_new_reorders(const std::string& node, const Measured& base) const {
    const int step = step_of(node);
    if (step < 0) return std::nullopt;
    const std::vector<PlanStep>& steps = plan->steps();
    const PlanStep& target = steps[static_cast<size_t>(step)];
    double total = step_ms[static_cast<size_t>(step)];
    for (size_t s = 0; s < steps.size(); ++s) {
      const PlanStep& other = steps[s];
      if (other.record.op_type != kReorderOp || base.step_of(other.record.node_name) >= 0) continue;
      const auto touches = [](const std::vector<int>& written, const std::vector<int>& read) {
        return std::any_of(written.begin(), written.end(), [&](int slot) {
          return slot >= 0 && std::find(read.begin(), read.end(), slot) != read.end();
        });
      };
      if (touches(other.outputs, target.inputs) || touches(target.outputs, other.inputs)) total += step_ms[s];
    }
    return total;
  }
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
    session_ = std::make_unique<Session>(model_);
    inputs_ = random_inputs(session_->inputs(), typical->input_shapes);
    base_ = measure(Settings{});
    if (base_.plan->settings_text() != typical->settings) {
      unusable_ = str_cat("most of the trace's runs were planned under '", typical->settings,
                          "', this process plans under '", base_.plan->settings_text(),
                          "': give the same settings (options) the trace ran with");
    }
  }

  const Reason& unusable() const { return unusable_; }
  const Measured& base() const { return base_; }
  int runs() const { return runs_; }
  int threads() const { return base_.plan->threads(); }

  Measured measure(const Settings& changes) {
    const ScopedSettings fix(changes);
    Measured measured;
    measured.plan = session_->plan_for(inputs_.ordered);
    measured.step_ms = profile_steps(*session_, inputs_.by_name, *measured.plan, runs_);
    return measured;
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
    session_->add_observer(&timer);
    std::vector<std::thread> threads;
    for (int t = 0; t < concurrent; ++t) {
      threads.emplace_back([&] {
        const ScopedSettings fix(changes);
        for (int r = 0; r < runs_; ++r) session_->run(inputs_.by_name);
      });
    }
    for (std::thread& thread : threads) thread.join();
    session_->remove_observer(&timer);
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
  if (extensions.find("AVX512_BF16") == std::string::npos &&
      extensions.find("AMX_BF16") == std::string::npos) {
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

void estimate_tiny_ops(PatternEstimate& estimate, std::vector<TidyMatch*>& matches,
                       const profiler::Trace& trace, Bench& bench) {
  Settings fix;
  fix.set_by_name("threads", 1);
  const Measured single = bench.measure(fix);
  estimate.basis =
      str_cat("each step timed on 1 thread and on ", bench.threads(), " (median of ", bench.runs(), " runs)");
  apply(estimate, matches, step_time_difference(trace, bench.base(), single, /*with_new_reorders=*/false));
}

void estimate_unfused(PatternEstimate& estimate, std::vector<TidyMatch*>& matches, const TidyContext& context,
                      const Bench& bench) {
  const EventTree& tree = context.tree;
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
  const int concurrent = concurrent_runs(trace);
  const int cores = trace_cores(trace);
  if (concurrent <= 1) {
    estimate.basis =
        "the oversubscription is within runs (parallel branches): compare execution_mode sequential and "
        "parallel "
        "with kiln bench";
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
    auto [it, added] = planning.try_emplace(shapes, 0.0);
    if (added) it->second = bench.planning_ms(shapes);
    return it->second;
  });
}

}  // namespace

void estimate_savings(TidyReport& report, const profiler::Trace& trace, const EstimateOptions& options) {
  if (trace.source != "kiln" && trace.source != "kiln_json") {
    estimate_torch_savings(report, trace, torch_python());
    return;
  }
  std::map<std::string, std::vector<TidyMatch*>> by_pattern;
  for (TidyMatch& match : report.matches) by_pattern[match.pattern].push_back(&match);
  report.estimates.clear();

  // The model is planned and timed once, when the first pattern needs it.
  std::unique_ptr<Bench> bench;
  Reason bench_unusable;
  const auto get_bench = [&]() -> Bench* {
    if (bench || bench_unusable) return bench.get();
    if (options.model.empty()) {
      bench_unusable = "no model given: pass the ONNX file the trace ran (--model) to measure the fix";
      return nullptr;
    }
    bench = std::make_unique<Bench>(trace, options);
    if (bench->unusable()) {
      bench_unusable = bench->unusable();
      bench.reset();
    }
    return bench.get();
  };
  const EventTree tree(trace);
  const TidyContext context(tree);

  for (const std::unique_ptr<Pattern>& pattern : kiln_patterns()) {
    const std::string name = pattern->name();
    const auto found = by_pattern.find(name);
    if (found == by_pattern.end()) continue;
    std::vector<TidyMatch*>& matches = found->second;
    PatternEstimate estimate{name, 0, std::nullopt, {}};
    for (const TidyMatch* match : matches) estimate.matched_ms += match->time_ms;

    if (name == kNativeFallback) {
      estimate.basis =
          "the fix is the reason's (a setting to change, or a kernel the backend lacks): re-profile with it "
          "changed and compare";
    } else if (name == kIdleGap) {
      estimate.basis = "the idle time is spent outside kiln (what feeds the runs)";
    } else if (Bench* measured = get_bench(); measured == nullptr) {
      estimate.basis = *bench_unusable;
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
      estimate_unfused(estimate, matches, context, *measured);
    } else if (name == kFP32OnBF16CPU) {
      estimate_fp32_on_bf16(estimate, matches, trace, *measured);
    } else if (name == kTinyOpMultithreaded) {
      estimate_tiny_ops(estimate, matches, trace, *measured);
    } else if (name == kOversubscription) {
      estimate_oversubscription(estimate, matches, trace, *measured);
    } else if (name == kPlanCacheMiss) {
      estimate_plan_cache_misses(estimate, matches, trace, *measured);
    }
    report.estimates.push_back(std::move(estimate));
  }
}

}  // namespace kiln::tidy
