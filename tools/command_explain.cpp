// `kiln explain MODEL`: the plan kiln builds for a model, step by step: op and node, the backend and
// kernel chosen (as the library names its implementation), shapes with their storage layouts, the
// nodes fused into the step, and why each faster candidate refused it. `--profile N` runs the plan N
// times and adds each step's median time and a ranking of the most expensive steps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <numeric>

#include "backends/selection.h"
#include "core/error.h"
#include "graph/flops.h"
#include "graph/session.h"
#include "runtime/threads.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/random_input.h"
#include "tools/setting_options.h"

namespace kiln {
namespace {

// Per-step wall times of the runs it observes (one run at a time).
class StepTimer final : public Observer {
 public:
  void on_step_begin(const Plan&, size_t) override { start_ = std::chrono::steady_clock::now(); }
  void on_step_end(const Plan& plan, size_t step) override {
    samples_.resize(plan.steps().size());
    samples_[step].push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count());
  }
  double median_ms(size_t step) const {
    if (step >= samples_.size() || samples_[step].empty()) return 0;
    std::vector<double> sorted = samples_[step];
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
  }

 private:
  std::chrono::steady_clock::time_point start_;
  std::vector<std::vector<double>> samples_;
};

std::string shapes_text(const std::vector<Shape>& shapes, const std::vector<Layout>& layouts) {
  std::string text;
  for (size_t i = 0; i < shapes.size(); ++i) {
    text += str_cat(i ? " " : "", shape_to_string(shapes[i]));
    if (i < layouts.size() && layouts[i] != Layout::plain) text += str_cat(":", layout_name(layouts[i]));
  }
  return text;
}

}  // namespace

int command_explain(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> specs = with_setting_options({
      {"batch", true, "B: size of symbolic input dims (default 1)"},
      {"profile", true, "N: run the plan N times and show each step's median time"},
      {"help", false, "show this help"},
  });
  const ParsedArgs parsed = parse_args("explain", args, specs);
  if (parsed.has("help")) {
    std::printf(
        "usage: kiln explain MODEL [options]\n\nPrints the plan: per step the kernel, layouts, shapes, fused "
        "nodes and why other backends refused.\n\n%s",
        options_help(specs).c_str());
    return 0;
  }
  KILN_CHECK(parsed.positional.size() == 1, invalid_argument, "kiln explain expects one MODEL path, got ",
             parsed.positional.size());
  apply_setting_options(parsed);
  const int batch = parsed.int_value("batch", 1, 1, 1 << 20);
  const int profile_runs = parsed.int_value("profile", 0, 0, 1 << 20);

  Session session(parsed.positional[0]);
  const RandomInputs random = random_inputs(session.inputs(), batch);
  const TensorMap& inputs = random.by_name;
  const std::vector<Tensor>& ordered = random.ordered;
  const std::shared_ptr<const Plan> plan = session.plan_for(ordered);
  StepTimer timer;
  if (profile_runs > 0) {
    session.run(inputs);  // warm-up
    session.add_observer(&timer);
    for (int i = 0; i < profile_runs; ++i) session.run(inputs);
    session.remove_observer(&timer);
  }

  std::printf("plan for %s (batch %d, plan settings %s)\n", parsed.positional[0].c_str(), batch,
              settings_summary().c_str());
  std::printf("%zu steps; %d nodes fused, %d folded, %d removed; %d reorders; %.3f GFLOP per run\n\n",
              plan->steps().size(), plan->fused_nodes(), plan->folded_nodes(), plan->removed_nodes(),
              plan->reorder_steps(), static_cast<double>(plan_flops(*plan)) * 1e-9);
  for (size_t s = 0; s < plan->steps().size(); ++s) {
    const StepRecord& r = plan->steps()[s].record;
    std::printf("%3zu %-10s %-32s %s\n", s, r.op_type.c_str(), r.node_name.c_str(), r.kernel.c_str());
    std::printf("      %s -> %s", shapes_text(r.input_shapes, r.input_layouts).c_str(),
                shapes_text(r.output_shapes, r.output_layouts).c_str());
    if (r.in_place) std::printf("  (in place)");
    if (profile_runs > 0) std::printf("  %.3f ms", timer.median_ms(s));
    std::printf("\n");
    for (const std::string& fused : r.fused) std::printf("      fused: %s\n", fused.c_str());
    if (!r.note.empty()) std::printf("      note: %s\n", r.note.c_str());
    for (const RejectedCandidate& rejected : r.rejected) {
      std::printf("      not %s: %s\n", rejected.backend.c_str(), rejected.reason.c_str());
    }
  }
  if (profile_runs > 0) {
    std::vector<size_t> order(plan->steps().size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return timer.median_ms(a) > timer.median_ms(b); });
    double total = 0;
    for (size_t s = 0; s < order.size(); ++s) total += timer.median_ms(s);
    std::map<std::string, std::pair<double, int>> by_op;  // op -> (ms, steps)
    for (size_t s = 0; s < order.size(); ++s) {
      auto& entry = by_op[plan->steps()[s].record.op_type];
      entry.first += timer.median_ms(s);
      entry.second += 1;
    }
    std::vector<std::pair<std::string, std::pair<double, int>>> ops(by_op.begin(), by_op.end());
    std::sort(ops.begin(), ops.end(),
              [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    std::printf("\ntime by op (median of %d runs):\n", profile_runs);
    for (const auto& [op, entry] : ops) {
      std::printf("  %-20s %8.3f ms %5.1f%%  %3d steps\n", op.c_str(), entry.first,
                  total > 0 ? 100 * entry.first / total : 0, entry.second);
    }
    std::printf("\nmost expensive steps (median of %d runs; steps sum to %.3f ms):\n", profile_runs, total);
    for (size_t i = 0; i < std::min<size_t>(order.size(), 15); ++i) {
      const size_t s = order[i];
      const StepRecord& r = plan->steps()[s].record;
      const double ms = timer.median_ms(s);
      const double gflops = ms > 0 ? static_cast<double>(step_flops(r)) * 1e-6 / ms : 0;
      std::printf("  %3zu %-10s %-32s %8.3f ms %5.1f%%  %7.1f GFLOP/s  %s\n", s, r.op_type.c_str(),
                  r.node_name.c_str(), ms, total > 0 ? 100 * ms / total : 0, gflops, r.kernel.c_str());
    }
  }
  return 0;
}

}  // namespace kiln
