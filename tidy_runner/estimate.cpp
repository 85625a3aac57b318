#include "tidy_runner/estimate.h"

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
#include "backends/setting_text.h"
#include "backends/settings.h"
#include "core/error.h"
#include "graph/observer.h"
#include "graph/random_input.h"
#include "graph/session.h"
#include "graph/step_timer.h"
#include "runtime/thread_budget.h"
#include "tidy/kiln_patterns.h"
#include "tidy_runner/torch_estimate.h"

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

// Why inputs of `shapes` (a trace's, so anything) are not ones to allocate, or nothing.
Reason unallocatable(const std::vector<Shape>& shapes) {
  for (const Shape& shape : shapes) {
    int64_t elements = 1;
    for (const int64_t dim : shape) {
      if (dim < 0 || (dim > 0 && elements > kMaxInputElements / dim)) {
        return str_cat("the trace's input shape ", shape_to_string(shape), " is not one to allocate (over ",
                       kMaxInputElements, " elements)");
      }
      elements *= dim;
    }
  }
  return std::nullopt;
}

// Plans and times the trace's model at its shapes under the settings the trace records plus a fix's
// changes (the settings in force in the process do not matter).
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
    unusable_ = unallocatable(typical->input_shapes);
    if (unusable_) return;
    // The runs' own settings, as the trace records them: the fixes are measured against what ran.
    try {
      recorded_ = plan_settings_from_text(typical->settings);
    } catch (const Error& error) {
      unusable_ = str_cat("the trace's settings are not ones this kiln reads: ", error.what());
      return;
    }
    session_ = std::make_unique<Session>(model_);
    inputs_ = random_inputs(session_->inputs(), typical->input_shapes);
    base_ = measure(Settings{});
    if (base_.plan().settings_text() != typical->settings) {
      unusable_ = str_cat("most of the trace's runs were planned under '", typical->settings,
                          "'; under those settings this kiln plans under '", base_.plan().settings_text(),
                          "' (a backend not built here?)");
    }
  }

  const Reason& unusable() const { return unusable_; }
  const Measured& base() const { return base_; }
  int runs() const { return runs_; }
  int threads() const { return base_.plan().threads(); }

  Measured measure(const Settings& changes) {
    const ScopedSettings fix(with_recorded(changes));
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
      const ScopedSettings fix(with_recorded(changes));
      session_->run(inputs_.by_name);  // plans before timing
    }
    RunTimer timer;
    const ScopedObserver observing(*session_, &timer);
    std::vector<std::exception_ptr> failures(static_cast<size_t>(concurrent));
    std::vector<std::thread> threads;
    for (int t = 0; t < concurrent; ++t) {
      threads.emplace_back([&, t] {
        try {
          const ScopedSettings fix(with_recorded(changes));
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

  // The median cost of a plan cache miss for `shapes` in steady state: planning, with oneDNN's
  // primitive cache cleared first (new shapes create new primitives; the cache would make a repeat
  // cheap), and what the first run at those shapes costs beyond a second one (its run context's
  // arena, pages touched for the first time).
  double miss_ms(const std::vector<Shape>& shapes) {
    std::vector<double> times;
    const ScopedSettings recorded(with_recorded(Settings{}));
    for (int round = 0; round < kPlanningRounds; ++round) {
      // A new session each time: a session keeps its plans, and releases the weights they packed.
      Session fresh(model_);
      const RandomInputs inputs = random_inputs(fresh.inputs(), shapes);
      if (backends::info("onednn").built) backends::onednn::primitive_cache::clear();
      auto start = std::chrono::steady_clock::now();
      fresh.run(inputs.by_name);
      const double first =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      start = std::chrono::steady_clock::now();
      fresh.run(inputs.by_name);
      const double second =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      times.push_back(first - second);
    }
    return median(std::move(times));
  }

 private:
  // The trace's settings with a fix's changes over them.
  Settings with_recorded(const Settings& changes) const {
    Settings settings = recorded_;
    settings.overlay(changes);
    return settings;
  }

  int runs_;
  std::string model_;
  Reason unusable_;
  Settings recorded_;
  std::unique_ptr<Session> session_;
  RandomInputs inputs_;
  Measured base_;
};

// The matched event; the report must be the trace's (estimate_savings checks every id first).
const TraceEvent& event_of(const profiler::Trace& trace, const TidyMatch& match) {
  return trace.events[match.event_id - 1];
}

// Per match: the saving, or nothing where this match cannot be estimated.
using SavingOf = std::function<std::optional<double>(const TidyMatch*)>;

// Sets each match's saving and adds those estimated to the pattern's.
void apply(PatternEstimate& estimate, std::vector<TidyMatch*>& matches, const SavingOf& saving_of) {
  for (TidyMatch* match : matches) {
    match->estimated_saving_ms = saving_of(match);
    if (match->estimated_saving_ms)
      estimate.saving_ms = estimate.saving_ms.value_or(0) + *match->estimated_saving_ms;
  }
}

std::string settings_text(const std::vector<std::pair<std::string, std::string>>& settings) {
  std::string text;
  for (const auto& [name, value] : settings) text += str_cat(text.empty() ? "" : ", ", name, "=", value);
  return text;
}

// Settings fixes: the model planned again under each distinct change, every matched step timed in
// both plans with the Reorders the change adds next to it. A change this machine plans the matched
// steps the same under (bf16 where the ISA tier has none) is not estimated.
std::string estimate_settings(PatternEstimate& estimate, std::vector<TidyMatch*>& matches,
                              const profiler::Trace& trace, Bench& bench) {
  struct Planned {
    std::optional<Measured> measured;
    std::string problem;
  };
  std::map<std::vector<std::pair<std::string, std::string>>, Planned> by_change;
  for (const TidyMatch* match : matches) {
    auto [found, added] = by_change.try_emplace(match->fix.settings);
    if (!added) continue;
    try {
      Settings change;
      for (const auto& [name, value] : match->fix.settings)
        set_setting_from_text(change, name, value, "the fix");
      found->second.measured = bench.measure(change);
    } catch (const Error& error) {
      found->second.problem = error.what();
    }
  }
  std::vector<std::string> changes;
  for (auto& entry : by_change) {  // not a structured binding: the lambda below captures these
    const std::vector<std::pair<std::string, std::string>>& change = entry.first;
    Planned& planned = entry.second;
    changes.push_back(settings_text(change));
    if (!planned.measured) continue;
    const bool same = std::all_of(matches.begin(), matches.end(), [&](const TidyMatch* match) {
      if (match->fix.settings != change) return true;
      const std::string& node = event_of(trace, *match).node;
      const int was = bench.base().step_of(node);
      const int is = planned.measured->step_of(node);
      if (was < 0 || is < 0) return false;
      const StepRecord& before = bench.base().plan().steps()[static_cast<size_t>(was)].record;
      const StepRecord& after = planned.measured->plan().steps()[static_cast<size_t>(is)].record;
      return before.kernel == after.kernel && before.threads == after.threads;
    });
    if (same) {
      planned.measured.reset();
      planned.problem = "plans the matched steps with the same kernels and threads on this machine";
    }
  }
  apply(estimate, matches, [&](const TidyMatch* match) -> std::optional<double> {
    const Planned& planned = by_change.at(match->fix.settings);
    if (!planned.measured) return std::nullopt;
    const std::string& node = event_of(trace, *match).node;
    const std::optional<double> was = bench.base().ms(node);
    const std::optional<double> is = planned.measured->ms_with_new_reorders(node, bench.base());
    if (!was || !is) return std::nullopt;
    return *was - *is;
  });
  std::string basis = str_cat(matches.front()->fix.what, " (", changes.front());
  for (size_t i = 1; i < changes.size(); ++i) basis += str_cat("; ", changes[i]);
  basis +=
      str_cat("), each step timed in both plans with the Reorders the change adds next to it (median of ",
              bench.runs(), " runs)");
  for (const auto& [change, planned] : by_change) {
    if (!planned.problem.empty())
      basis += str_cat("; ", settings_text(change), " not estimated: ", planned.problem);
  }
  return basis;
}

// Step removals: the cheapest of the steps the fix removes, as timed here.
std::string estimate_step_removed(PatternEstimate& estimate, std::vector<TidyMatch*>& matches,
                                  const profiler::Trace& trace, const Bench& bench) {
  apply(estimate, matches, [&](const TidyMatch* match) -> std::optional<double> {
    std::optional<double> cheapest;
    for (const EventIndex step : match->fix.steps) {
      const std::optional<double> ms = bench.base().ms(trace.events[step].node);
      if (!ms) return std::nullopt;
      cheapest = std::min(cheapest.value_or(*ms), *ms);
    }
    return cheapest;
  });
  return str_cat(
      matches.front()->fix.what,
      ": each step's own time here, the cheaper one's where the fix leaves one pass of two (median of ",
      bench.runs(), " runs)");
}

std::string estimate_thread_budget(PatternEstimate& estimate, std::vector<TidyMatch*>& matches,
                                   const profiler::Trace& trace, Bench& bench) {
  const int concurrent = std::min(concurrent_runs(trace), kMaxConcurrentRuns);
  const int cores = trace_cores(trace);
  if (concurrent <= 1) {
    return "the oversubscription is within runs (a step on more threads than cores, or parallel branches): "
           "not "
           "estimated; compare thread counts or execution modes with kiln bench";
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
  apply(estimate, matches,
        [&](const TidyMatch* match) { return match->time_ms * (1 - after_ms / before_ms); });
  return str_cat(matches.front()->fix.what, ": ", concurrent, " runs of ", bench.threads(),
                 " threads at once, each run's execution (not its wait for threads) timed with the thread "
                 "budget off (",
                 before_ms, " ms) and at the ", cores, " cores (", after_ms, " ms), medians of ",
                 kConcurrentRounds, " alternating rounds of ", bench.runs(),
                 " runs each: each matched step's time scaled by that");
}

std::string estimate_planning_ahead(PatternEstimate& estimate, std::vector<TidyMatch*>& matches,
                                    const profiler::Trace& trace, Bench& bench) {
  std::map<std::vector<Shape>, double> planning;
  apply(estimate, matches, [&](const TidyMatch* match) -> std::optional<double> {
    const std::vector<Shape>& shapes = event_of(trace, *match).input_shapes;
    if (shapes.empty() || unallocatable(shapes)) return std::nullopt;
    auto known = planning.find(shapes);
    if (known == planning.end()) {
      if (planning.size() >= kMaxPlannedShapes) return std::nullopt;
      known = planning.emplace(shapes, bench.miss_ms(shapes)).first;
    }
    return known->second;
  });
  std::string basis =
      str_cat(matches.front()->fix.what,
              ": each shape's first run timed here beyond its second, planning included, oneDNN's "
              "primitive cache cleared first (median of ",
              kPlanningRounds, "), what it takes out of the steady state");
  if (planning.size() >= kMaxPlannedShapes)
    basis += str_cat("; planning for more than ", kMaxPlannedShapes, " distinct shapes is not timed");
  return basis;
}

// One pattern's estimate: its matches grouped by the kind of their fixes, each kind measured its way.
void estimate_pattern(PatternEstimate& estimate, std::vector<TidyMatch*>& matches,
                      const profiler::Trace& trace, const std::function<Bench*()>& get_bench,
                      const Reason& bench_unusable) {
  std::map<Fix::Kind, std::vector<TidyMatch*>> by_kind;
  for (TidyMatch* match : matches) by_kind[match->fix.kind].push_back(match);
  std::vector<std::string> bases;
  for (auto& [kind, group] : by_kind) {
    if (kind == Fix::Kind::none) {
      bases.push_back(by_kind.size() == 1 ? group.front()->fix.what
                                          : str_cat("not estimated where ", group.front()->fix.what));
      continue;
    }
    Bench* bench = get_bench();
    if (bench == nullptr) {
      std::string basis = bench_unusable.value_or("");
      if (kind == Fix::Kind::planning_ahead) {  // what planning took in the trace stands in for it
        basis += "; the planning time recorded instead";
        apply(estimate, group, [](const TidyMatch* match) { return match->time_ms; });
      }
      bases.push_back(std::move(basis));
      continue;
    }
    switch (kind) {
      case Fix::Kind::settings:
        bases.push_back(estimate_settings(estimate, group, trace, *bench));
        break;
      case Fix::Kind::step_removed:
        bases.push_back(estimate_step_removed(estimate, group, trace, *bench));
        break;
      case Fix::Kind::thread_budget:
        bases.push_back(estimate_thread_budget(estimate, group, trace, *bench));
        break;
      case Fix::Kind::planning_ahead:
        bases.push_back(estimate_planning_ahead(estimate, group, trace, *bench));
        break;
      case Fix::Kind::none:
      case Fix::Kind::torch_benchmark:  // PyTorch traces only (torch_estimate.h)
        bases.push_back(str_cat("a ", fix_kind_name(kind), " fix is not measured on a kiln trace"));
        break;
    }
  }
  for (const std::string& basis : bases) estimate.basis += str_cat(estimate.basis.empty() ? "" : "; ", basis);
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
  for (const auto& [name, count] : report.counts) {  // in the order the patterns ran
    const auto found = by_pattern.find(name);
    if (found == by_pattern.end()) continue;
    std::vector<TidyMatch*>& matches = found->second;
    PatternEstimate estimate{name, 0, std::nullopt, {}};
    for (const TidyMatch* match : matches) estimate.matched_ms += match->time_ms;

    try {
      estimate_pattern(estimate, matches, trace, get_bench, bench_unusable);
    } catch (const std::exception& error) {
      for (TidyMatch* match : matches) match->estimated_saving_ms.reset();
      estimate.saving_ms.reset();
      estimate.basis = str_cat("measuring the fix failed: ", error.what());
    }
    report.estimates.push_back(std::move(estimate));
  }
}

}  // namespace kiln::tidy
