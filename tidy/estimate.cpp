#include "tidy/estimate.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "backends/settings.h"
#include "core/error.h"
#include "graph/random_input.h"
#include "graph/session.h"
#include "graph/step_timer.h"
#include "runtime/thread_budget.h"
#include "tidy/kiln_patterns.h"

namespace kiln::tidy {
namespace {

constexpr const char* kReorderOp = "Reorder";

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

// The most runs that ran at once in the trace.
int concurrent_runs(const profiler::Trace& trace) {
  std::vector<std::pair<int64_t, int>> edges;
  for (const TraceEvent& event : trace.events) {
    if (event.kind != EventKind::run) continue;
    edges.emplace_back(event.start_ns, 1);
    edges.emplace_back(event.end_ns, -1);
  }
  std::sort(edges.begin(), edges.end());  // an end before a start at the same time
  int running = 0;
  int most = 0;
  for (const auto& [time, change] : edges) {
    running += change;
    most = std::max(most, running);
  }
  return most;
}

// Plans and times the trace's model at its shapes under the current settings plus a fix's changes.
class Bench {
 public:
  Bench(const profiler::Trace& trace, const EstimateOptions& options) : runs_(std::max(options.runs, 1)) {
    const std::map<std::string, std::string> here = profiler::machine_facts();
    for (const char* name : {"cpu", "cpu_extensions"}) {
      const std::string recorded = fact(trace, name);
      if (!recorded.empty() && recorded != here.at(name)) {
        unusable_ = str_cat("the trace was recorded on another machine (", name, " '", recorded, "'; here '",
                            here.at(name), "')");
        return;
      }
    }
    const TraceEvent* first_run = nullptr;
    for (const TraceEvent& event : trace.events) {
      if (event.kind == EventKind::run) {
        first_run = &event;
        break;
      }
    }
    if (first_run == nullptr) {
      unusable_ = "the trace has no kiln run";
      return;
    }
    if (!trace.shapes_recorded) {
      unusable_ = "recorded without shapes: the runs' input shapes are unknown";
      return;
    }
    session_ = std::make_unique<Session>(options.model);
    inputs_ = random_inputs(session_->inputs(), first_run->input_shapes);
    base_ = measure(Settings{});
    if (base_.plan->settings_text() != first_run->settings) {
      unusable_ = str_cat("the trace's runs were planned under '", first_run->settings,
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

  // The median run time of `concurrent` threads running the model at once under `changes`, with the
  // thread budget off (as in a trace that oversubscribed: the budget would have prevented it).
  double concurrent_run_ms(const Settings& changes, int concurrent) {
    struct RestoreBudget {
      int budget = get_thread_budget();
      ~RestoreBudget() { set_thread_budget(budget); }
    } restore;
    set_thread_budget(0);
    std::vector<std::vector<double>> times(static_cast<size_t>(concurrent));
    std::vector<std::thread> threads;
    for (int t = 0; t < concurrent; ++t) {
      threads.emplace_back([&, t] {
        const ScopedSettings fix(changes);
        session_->run(inputs_.by_name);  // warm-up (plans once)
        for (int r = 0; r < runs_; ++r) {
          const auto start = std::chrono::steady_clock::now();
          session_->run(inputs_.by_name);
          times[static_cast<size_t>(t)].push_back(
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    std::vector<double> all;
    for (const std::vector<double>& samples : times) all.insert(all.end(), samples.begin(), samples.end());
    std::sort(all.begin(), all.end());
    return all[all.size() / 2];
  }

 private:
  int runs_;
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

}  // namespace

void estimate_savings(TidyReport& report, const profiler::Trace& trace, const EstimateOptions& options) {
  std::map<std::string, std::vector<TidyMatch*>> by_pattern;
  for (TidyMatch& match : report.matches) by_pattern[match.pattern].push_back(&match);
  report.estimates.clear();

  std::unique_ptr<Bench> bench;
  Reason bench_unusable;
  const auto get_bench = [&]() -> Bench* {
    if (bench || bench_unusable) return bench_unusable ? nullptr : bench.get();
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
          "the fix is the reason's (a setting to change, or a kernel the backend lacks): re-profile "
          "with it changed and compare";
    } else if (name == kIdleGap) {
      estimate.basis = "the idle time is spent outside kiln (what feeds the runs)";
    } else if (name == kPlanCacheMiss) {
      estimate.basis =
          "the planning time recorded: planning every input shape during warm-up takes it out "
          "of the steady state";
      apply(estimate, matches, [](const TidyMatch& match) { return match.time_ms; });
    } else if (Bench* measured = get_bench(); measured == nullptr) {
      estimate.basis = *bench_unusable;
    } else if (name == kReorderBetweenSteps) {
      const Measured& base = measured->base();
      estimate.basis = str_cat("each Reorder's own time here (median of ", measured->runs(),
                               " runs): what a producer writing its reader's layout saves");
      apply(estimate, matches, [&](const TidyMatch& match) { return base.ms(event_of(trace, match).node); });
    } else if (name == kUnfusedElementwise) {
      const Measured& base = measured->base();
      estimate.basis = str_cat(
          "the elementwise step's own time where the step before it is a product (its "
          "post-op would cost next to nothing), else the shorter of the two passes "
          "(median of ",
          measured->runs(), " runs)");
      apply(estimate, matches, [&](const TidyMatch& match) -> std::optional<double> {
        const EventIndex step = static_cast<EventIndex>(match.event_id - 1);
        const EventIndex head = unfused_head(context, step);
        const std::optional<double> tail_ms = base.ms(tree.event(step).node);
        const std::optional<double> head_ms =
            head == kNoEvent ? std::nullopt : base.ms(tree.event(head).node);
        if (!tail_ms || !head_ms) return std::nullopt;
        return is_product_op(tree.event(head).name) ? *tail_ms : std::min(*tail_ms, *head_ms);
      });
    } else if (name == kFP32OnBF16CPU) {
      const std::map<std::string, std::string> here = profiler::machine_facts();
      if (here.at("cpu_extensions").find("AVX512_BF16") == std::string::npos &&
          here.at("cpu_extensions").find("AMX_BF16") == std::string::npos) {
        estimate.basis =
            str_cat("this CPU has no bf16 arithmetic (extensions: ", here.at("cpu_extensions"), ")");
      } else {
        Settings fix;
        fix.set_by_name("conv_precision", static_cast<int>(Precision::bf16));
        fix.set_by_name("matmul_precision", static_cast<int>(Precision::bf16));
        const Measured bf16 = measured->measure(fix);
        const Measured& base = measured->base();
        estimate.basis = str_cat(
            "each step planned again with conv_precision and matmul_precision bf16 and "
            "timed with the Reorders that adds next to it (median of ",
            measured->runs(), " runs)");
        apply(estimate, matches, [&](const TidyMatch& match) -> std::optional<double> {
          const std::string& node = event_of(trace, match).node;
          const std::optional<double> before = base.ms(node);
          const std::optional<double> after = bf16.ms_with_new_reorders(node, base);
          if (!before || !after) return std::nullopt;
          return *before - *after;
        });
      }
    } else if (name == kTinyOpMultithreaded) {
      Settings fix;
      fix.set_by_name("threads", 1);
      const Measured single = measured->measure(fix);
      const Measured& base = measured->base();
      estimate.basis = str_cat("each step timed on 1 thread and on ", measured->threads(), " (median of ",
                               measured->runs(), " runs)");
      apply(estimate, matches, [&](const TidyMatch& match) -> std::optional<double> {
        const std::string& node = event_of(trace, match).node;
        const std::optional<double> before = base.ms(node);
        const std::optional<double> after = single.ms(node);
        if (!before || !after) return std::nullopt;
        return *before - *after;
      });
    } else if (name == kOversubscription) {
      const int concurrent = concurrent_runs(trace);
      const int cores = trace_cores(trace);
      if (concurrent <= 1) {
        estimate.basis =
            "the oversubscription is within runs (parallel branches): compare execution_mode "
            "sequential and parallel with kiln bench";
      } else {
        const int threads = measured->threads();
        const int fixed_threads = std::max(1, cores / concurrent);
        Settings as_traced;
        as_traced.set_by_name("threads", threads);
        Settings fix;
        fix.set_by_name("threads", fixed_threads);
        const double before = measured->concurrent_run_ms(as_traced, concurrent);
        const double after = measured->concurrent_run_ms(fix, concurrent);
        const double kept = after / before;
        estimate.basis = str_cat(concurrent, " concurrent runs timed at ", threads, " threads each (", before,
                                 " ms) and at ", fixed_threads, " (", after, " ms), median of ",
                                 measured->runs(), " runs each: each matched step's time scaled by that");
        apply(estimate, matches, [&](const TidyMatch& match) { return match.time_ms * (1 - kept); });
      }
    }
    report.estimates.push_back(std::move(estimate));
  }
}

}  // namespace kiln::tidy
