#include "graph/step_timer.h"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "backends/settings.h"
#include "graph/observer.h"

namespace kiln {
namespace {

// Per-step wall times of the runs of `plan` it observes; the session's runs of other plans (other
// callers' at other thread counts or settings) are not timed. A step begins and ends on one thread,
// but in parallel execution mode steps run on several at once: each thread keeps its step's start,
// and the samples are locked.
class StepTimer final : public Observer {
 public:
  explicit StepTimer(const Plan& plan) : plan_(plan), samples_(plan.steps().size()) {}
  void on_step_begin(const Plan&, size_t) override { started() = std::chrono::steady_clock::now(); }
  void on_step_end(const Plan& plan, size_t step) override {
    if (&plan != &plan_) return;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started()).count();
    std::lock_guard lock(mutex_);
    samples_[step].push_back(ms);
  }
  double median_ms(size_t step) {
    std::lock_guard lock(mutex_);
    if (step >= samples_.size() || samples_[step].empty()) return 0;
    std::vector<double> sorted = samples_[step];
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
  }

 private:
  static std::chrono::steady_clock::time_point& started() {
    thread_local std::chrono::steady_clock::time_point start;
    return start;
  }
  const Plan& plan_;
  std::mutex mutex_;
  std::vector<std::vector<double>> samples_;
};

}  // namespace

std::vector<double> profile_steps(Session& session, const TensorMap& inputs, const Plan& plan, int runs) {
  if (runs <= 0) return {};
  // At the plan's own count: a run adapting to load at the default count would run another plan.
  const ScopedThreads plan_threads(plan.threads());
  session.run(inputs);  // warm-up
  StepTimer timer(plan);
  {
    const ScopedObserver observing(session, &timer);
    for (int i = 0; i < runs; ++i) session.run(inputs);
  }
  std::vector<double> step_ms(plan.steps().size());
  for (size_t s = 0; s < step_ms.size(); ++s) step_ms[s] = timer.median_ms(s);
  return step_ms;
}

}  // namespace kiln
