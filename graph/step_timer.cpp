#include "graph/step_timer.h"

#include <algorithm>
#include <chrono>

#include "backends/settings.h"
#include "graph/observer.h"

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

}  // namespace

std::vector<double> profile_steps(Session& session, const TensorMap& inputs, const Plan& plan, int runs) {
  if (runs <= 0) return {};
  // At the plan's own count: a run adapting to load at the default count would run another plan.
  const ScopedThreads plan_threads(plan.threads());
  session.run(inputs);  // warm-up
  StepTimer timer;
  session.add_observer(&timer);
  for (int i = 0; i < runs; ++i) session.run(inputs);
  session.remove_observer(&timer);
  std::vector<double> step_ms(plan.steps().size());
  for (size_t s = 0; s < step_ms.size(); ++s) step_ms[s] = timer.median_ms(s);
  return step_ms;
}

}  // namespace kiln
