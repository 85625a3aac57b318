#include "tools/explain_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>

#include "backends/settings.h"
#include "core/json_writer.h"
#include "graph/flops.h"
#include "profiler/fields.h"
#include "profiler/roofline.h"
#include "runtime/thread_budget.h"

namespace kiln {
namespace {

// printf into a std::string.
template <typename... Args>
std::string format(const char* pattern, Args... args) {
  const int size = std::snprintf(nullptr, 0, pattern, args...);
  std::string text(static_cast<size_t>(std::max(size, 0)), '\0');
  std::snprintf(text.data(), text.size() + 1, pattern, args...);
  return text;
}

// "      not onednn: detail [kind]", one line of a step's refusals.
std::string refusal_line(const std::string& who, const Refusal& refusal) {
  return format("      %s: %s [%s]\n", who.c_str(), refusal.detail.c_str(),
                std::string(refusal_kind_name(refusal.kind)).c_str());
}

// Each step's bound on this machine, from its trace event (plan_step_events) and measured time,
// and their totals.
struct StepBounds {
  std::vector<profiler::StepBound> bounds;
  profiler::BoundTotals totals;
};

StepBounds step_bounds(const Plan& plan, const std::vector<profiler::TraceEvent>& steps,
                       const std::vector<double>& step_ms) {
  const Roofline& roofline = machine_roofline(plan.threads());
  int64_t weight_bytes = 0;
  for (const profiler::TraceEvent& step : steps) weight_bytes += step.weight_bytes;
  StepBounds result;
  for (size_t s = 0; s < steps.size(); ++s) {
    result.bounds.push_back(profiler::step_bound(roofline, isa_in_effect(), profiler::event_work(steps[s]),
                                                 weight_bytes, std::max(steps[s].threads, 1), step_ms[s]));
    result.totals.add(result.bounds.back(), step_ms[s]);
  }
  return result;
}

// "  54% of the compute bound (12.3 FLOP/B)" or
// "  31% of the memory bound (0.5 FLOP/B; activations <= 256 KiB, weights from memory)".
std::string bound_text(const profiler::StepBound& bound) {
  if (!bound.bounded) return "  no bound (bf16 or int8 products: the roofline's peak is fp32's)";
  return format("  %.0f%% of the %s bound (%.1f FLOP/B%s%s)", 100 * bound.fraction,
                bound.compute_bound ? "compute" : "memory", bound.flops_per_byte,
                bound.level.empty() ? "" : "; ", bound.level.c_str());
}

}  // namespace

std::string shapes_text(const std::vector<Shape>& shapes, const std::vector<Layout>& layouts) {
  std::string text;
  for (size_t i = 0; i < shapes.size(); ++i) {
    text += str_cat(i ? " " : "", shape_to_string(shapes[i]));
    if (i < layouts.size() && layouts[i] != Layout::plain) text += str_cat(":", layout_name(layouts[i]));
  }
  return text;
}

// The plan's threads and what the thread budget does to them; in parallel execution mode, the
// thread capacity and each fork-join group's decision, with what was measured.
std::string threads_text(const Plan& plan) {
  const int budget = get_thread_budget();
  std::string text = format("threads: %d per run", plan.threads());
  text += budget == 0 ? std::string(" (thread budget off)\n")
                      : format(
                            " (concurrent runs share a budget of %d threads, from %s: a run started while "
                            "others hold threads gets fewer and runs the plan for what it got)\n",
                            budget, thread_budget_source().c_str());
  const Settings settings = current_settings();
  if (settings.on("adapt_to_load") && settings.threads_are_default()) {
    text +=
        "adapt_to_load: the count is the default (the cores), so while other processes keep cores busy a run "
        "uses only the free ones, with the plan for that count (kiln info --parallel shows the load now)\n";
  }
  if (!plan.parallel()) return text;
  int overlapping = 0;
  for (const ParallelGroup& group : plan.parallel_groups()) overlapping += group.parallel ? 1 : 0;
  text += format(
      "execution: parallel, up to %d threads at once; %zu fork-join groups, %d with overlapping "
      "branches\n",
      plan.thread_capacity(), plan.parallel_groups().size(), overlapping);
  if (!plan.parallel_summary().empty()) text += format("  %s\n", plan.parallel_summary().c_str());
  for (size_t g = 0; g < plan.parallel_groups().size(); ++g) {
    const ParallelGroup& group = plan.parallel_groups()[g];
    text += format(
        "  group %zu: steps %d-%d (%zu), %s: %.3f ms one after another, %.3f ms overlapped on %d "
        "thread%s per step (measured at plan time)\n",
        g, group.steps.front(), group.steps.back(), group.steps.size(),
        group.parallel ? "branches overlap" : "sequential", group.sequential_ms, group.parallel_ms,
        group.reduced_threads, group.reduced_threads == 1 ? "" : "s");
  }
  return text;
}

// "F(4x4,3x3) taken over F(2x2,3x3): probe error 1.4e-06; moves the outputs by 2.1e-06 of their scale;
// predicted to save 8% of the layer's direct time".
std::string error_share_text(const ErrorShare& share) {
  return format(
      "%s %s over %s: probe error %.1e; moves the outputs by %.1e of their scale; predicted to save "
      "%.0f%% of the layer's direct time",
      share.form.c_str(), share.taken ? "taken" : "not taken (over the budget)", share.baseline.c_str(),
      share.error, share.output_change, 100 * share.saving);
}

std::string explain_text(const Plan& plan, const std::string& title, const std::vector<double>& step_ms,
                         int runs) {
  const bool profiled = step_ms.size() == plan.steps().size() && !step_ms.empty();
  const StepBounds measured =
      profiled ? step_bounds(plan, profiler::plan_step_events(plan), step_ms) : StepBounds{};
  const std::vector<profiler::StepBound>& bounds = measured.bounds;
  std::string text = title + "\n";
  text += format("%zu steps; %d nodes fused, %d folded, %d removed; %d reorders; %.3f GFLOP per run\n\n",
                 plan.steps().size(), plan.fused_nodes(), plan.folded_nodes(), plan.removed_nodes(),
                 plan.reorder_steps(), static_cast<double>(plan_flops(plan)) * 1e-9);
  text = str_cat(text.substr(0, text.size() - 1), threads_text(plan), "\n");
  if (!plan.error_budget().summary.empty()) {
    text = str_cat(text.substr(0, text.size() - 1), plan.error_budget().summary,
                   format(", measured in %.0f ms of planning\n\n", plan.error_budget().measure_ms));
  }
  for (size_t s = 0; s < plan.steps().size(); ++s) {
    const StepRecord& r = plan.steps()[s].record;
    text += format("%3zu %-10s %-32s %s\n", s, r.op_type.c_str(), r.node_name.c_str(), r.kernel.c_str());
    text += format("      %s -> %s", shapes_text(r.input_shapes, r.input_layouts).c_str(),
                   shapes_text(r.output_shapes, r.output_layouts).c_str());
    if (r.in_place) text += "  (in place)";
    if (profiled) {
      text += format("  %.3f ms", step_ms[s]);
      // Effective: the op's own flops (a direct convolution's for Conv, whatever the kernel does).
      const int64_t flops = step_flops(r);
      if (flops > 0 && step_ms[s] > 0)
        text += format("  %.1f GFLOP/s", static_cast<double>(flops) * 1e-6 / step_ms[s]);
      text += bound_text(bounds[s]);
    }
    text += "\n";
    for (const FusedNode& fused : r.fused) text += format("      fused: %s\n", fused.text().c_str());
    for (const std::string& note : r.notes) text += format("      note: %s\n", note.c_str());
    if (r.error_share) text += format("      error budget: %s\n", error_share_text(*r.error_share).c_str());
    if (r.parallel_group >= 0) {
      const ParallelGroup& group = plan.parallel_groups()[r.parallel_group];
      text += format("      group %d (%s), %d thread%s%s%s\n", r.parallel_group,
                     group.parallel ? "branches overlap" : "sequential", r.threads, r.threads == 1 ? "" : "s",
                     r.parallel_note.empty() ? "" : "; ", r.parallel_note.c_str());
    }
    if (!r.settings.empty()) {
      std::string settings;
      for (const std::string& setting : r.settings)
        settings += str_cat(settings.empty() ? "" : ", ", setting);
      text += format("      settings: %s\n", settings.c_str());
    }
    for (const Refusal& refusal : r.decision.refusals)
      text += refusal_line("not " + refusal.label(), refusal);
    if (!r.unfused.empty()) {
      std::string nodes;
      for (const FusedNode& node : r.unfused) nodes += str_cat(nodes.empty() ? "" : ", ", node.text());
      text += format("      not fused with %s:\n", nodes.c_str());
      for (const Refusal& refusal : r.fused_form_refusals)
        text += refusal_line("  not " + refusal.label(), refusal);
    }
    if (r.decision.rule == DecisionRule::autotune) {
      std::string timed;
      for (const TimedCandidate& candidate : r.decision.timed)
        timed += format("%s%s %.3f ms", timed.empty() ? "" : ", ", candidate.kernel.c_str(),
                        candidate.milliseconds);
      text += format("      decided by autotune%s: %s\n",
                     r.decision.reused ? " (an earlier plan's timing, from the choice cache)" : "",
                     timed.c_str());
    }
  }
  if (!profiled) return text;

  const double total = std::accumulate(step_ms.begin(), step_ms.end(), 0.0);
  std::map<std::string, std::pair<double, int>> by_op;  // op -> (ms, steps)
  for (size_t s = 0; s < step_ms.size(); ++s) {
    auto& entry = by_op[plan.steps()[s].record.op_type];
    entry.first += step_ms[s];
    entry.second += 1;
  }
  std::vector<std::pair<std::string, std::pair<double, int>>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(),
            [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  text += format("\ntime by op (median of %d runs):\n", runs);
  for (const auto& [op, entry] : ops) {
    text += format("  %-20s %8.3f ms %5.1f%%  %3d steps\n", op.c_str(), entry.first,
                   total > 0 ? 100 * entry.first / total : 0, entry.second);
  }
  std::vector<size_t> order(step_ms.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return step_ms[a] > step_ms[b]; });
  text += format(
      "\nmost expensive steps (median of %d runs; steps sum to %.3f ms; bound: C compute, M memory, then "
      "FLOP per byte and the fraction of the bound reached):\n",
      runs, total);
  for (size_t i = 0; i < std::min<size_t>(order.size(), 15); ++i) {
    const size_t s = order[i];
    const StepRecord& r = plan.steps()[s].record;
    const double ms = step_ms[s];
    const double gflops = ms > 0 ? static_cast<double>(step_flops(r)) * 1e-6 / ms : 0;
    text += format("  %3zu %-10s %-32s %8.3f ms %5.1f%%  %7.1f GFLOP/s  %s  %s\n", s, r.op_type.c_str(),
                   r.node_name.c_str(), ms, total > 0 ? 100 * ms / total : 0, gflops,
                   profiler::bound_cell(bounds[s]).c_str(), r.kernel.c_str());
  }
  text += "\n" + profiler::bound_totals_text(measured.totals, machine_roofline(plan.threads()),
                                             isa_in_effect(), plan.threads());
  return text;
}

std::string explain_json(const Plan& plan, const std::string& model, int batch,
                         const std::vector<double>& step_ms, int runs) {
  const bool profiled = step_ms.size() == plan.steps().size() && !step_ms.empty();
  const std::vector<profiler::TraceEvent> steps = profiler::plan_step_events(plan);
  const StepBounds measured = profiled ? step_bounds(plan, steps, step_ms) : StepBounds{};
  const std::vector<profiler::StepBound>& bounds = measured.bounds;
  JsonWriter json;
  json.begin_object();
  json.member("schema_version", profiler::kTraceSchemaVersion);
  json.member("model", model);
  json.member("batch", batch);
  json.member("plan_settings", plan.settings_text());
  json.member("threads", plan.threads());
  json.member("parallel", plan.parallel());
  json.member("thread_capacity", plan.thread_capacity());
  json.member("fused_nodes", plan.fused_nodes());
  json.member("folded_nodes", plan.folded_nodes());
  json.member("removed_nodes", plan.removed_nodes());
  json.member("reorder_steps", plan.reorder_steps());
  json.member("arena_bytes", static_cast<int64_t>(plan.memory_plan().arena_bytes));
  json.member("flops_per_run", plan_flops(plan));
  json.member("profiled_runs", profiled ? runs : 0);
  json.key("error_budget");
  if (const ErrorBudgetDecision& budget = plan.error_budget(); !budget.summary.empty()) {
    char number[32];
    json.begin_object();
    for (const auto& [key, value] :
         {std::pair<const char*, double>{"budget", budget.budget}, {"spent", budget.spent}}) {
      std::snprintf(number, sizeof number, "%.4g", value);
      json.key(key).raw(number);
    }
    json.key("measure_ms").value(budget.measure_ms, 3);
    json.member("summary", budget.summary).end_object();
  } else {
    json.null();
  }
  json.key("steps").begin_array();
  for (size_t s = 0; s < steps.size(); ++s) {
    json.begin_object();
    profiler::write_fields(json, steps[s]);
    // The measurements --profile adds (a trace holds them as its events' times).
    json.key("ms");
    if (profiled) {
      json.value(step_ms[s], 6);
    } else {
      json.null();
    }
    json.key("gflops_per_s");
    if (profiled && steps[s].flops > 0 && step_ms[s] > 0) {
      json.value(static_cast<double>(steps[s].flops) * 1e-6 / step_ms[s]);
    } else {
      json.null();
    }
    // The roofline (profiler/roofline.h): null without --profile, and for bf16 and int8 products.
    if (profiled && bounds[s].bounded) {
      json.key("flops_per_byte").value(bounds[s].flops_per_byte, 4);
      json.member("bound", bounds[s].compute_bound ? "compute" : "memory");
      json.key("bound_ms").value(bounds[s].bound_ms, 9);
      json.key("fraction_of_bound").value(bounds[s].fraction, 4);
    } else {
      for (const char* key : {"flops_per_byte", "bound", "bound_ms", "fraction_of_bound"})
        json.key(key).null();
    }
    json.end_object();
  }
  json.end_array();
  json.key("roofline");
  if (profiled) {
    profiler::write_bound_totals(json, measured.totals, machine_roofline(plan.threads()), isa_in_effect(),
                                 plan.threads());
  } else {
    json.null();
  }
  json.end_object();
  return json.take();
}

}  // namespace kiln
