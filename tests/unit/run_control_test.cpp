// Cancelling a run and giving it a deadline (runtime/run_control.h): the run stops before its next
// step with an error of its own kind, whichever thread cancels, in both execution modes, and the
// session runs normally afterwards.
#include "runtime/run_control.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/settings.h"
#include "core/error.h"
#include "graph/observer.h"
#include "graph/session.h"

namespace kiln {
namespace {

// x [1, 4] -> Relu -> t; out = Abs(t) - Neg(t): a step, then a fork that parallel mode runs as
// two branches, then their join; a run cancelled after step 0 has started nothing else.
Model branching_model() {
  Model model;
  model.opsets[""] = 13;
  model.graph.inputs = {ValueInfo{"x", DType::f32, true, {Dim{1, ""}, Dim{4, ""}}}};
  model.graph.outputs = {ValueInfo{"out", DType::f32, false, {}}};
  auto node = [](std::string name, std::string op, std::vector<std::string> inputs, std::string output) {
    Node n;
    n.name = std::move(name);
    n.op_type = std::move(op);
    n.inputs = std::move(inputs);
    n.outputs = {std::move(output)};
    return n;
  };
  model.graph.nodes = {node("relu", "Relu", {"x"}, "t"), node("neg", "Neg", {"t"}, "a"),
                       node("abs", "Abs", {"t"}, "b"), node("sub", "Sub", {"b", "a"}, "out")};
  return model;
}

Settings mode(ExecutionMode execution_mode) {
  return Settings().set("execution_mode", static_cast<int>(execution_mode));
}

TensorMap input() { return {{"x", Tensor::from_vector<float>({-1, 2, -3, 4}, {1, 4})}}; }

// The run's error kind and message, or nullopt-like empty text when it succeeded.
ErrorKind error_kind(const std::function<void()>& run, std::string* message = nullptr) {
  try {
    run();
  } catch (const Error& error) {
    if (message != nullptr) *message = error.what();
    return error.kind();
  }
  ADD_FAILURE() << "the run did not stop";
  return ErrorKind::runtime;
}

void expect_normal_run(Session& session) {
  const Tensor out = session.run(input()).at("out");
  const std::vector<float> expected = {0, 4, 0, 8};  // 2 relu(x)
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out.data<float>()[i], expected[i]) << i;
}

// Counts the steps that started; calls `at_step` when step `trigger` ends.
class StepHook final : public Observer {
 public:
  StepHook(size_t trigger, std::function<void()> at_step) : trigger_(trigger), at_step_(std::move(at_step)) {}
  void on_step_begin(const Plan&, size_t) override { ++begun; }
  void on_step_end(const Plan&, size_t step) override {
    if (step == trigger_) at_step_();
  }
  std::atomic<int> begun{0};

 private:
  size_t trigger_;
  std::function<void()> at_step_;
};

class RunControlTest : public ::testing::TestWithParam<ExecutionMode> {};

TEST_P(RunControlTest, ACancelledRunFailsBeforeItsFirstStep) {
  Session session(branching_model(), mode(GetParam()));
  StepHook hook(99, [] {});
  ScopedObserver observe(session, &hook);
  RunControl control;
  control.cancel();
  std::string message;
  EXPECT_EQ(error_kind([&] { session.run(input(), control); }, &message), ErrorKind::cancelled);
  EXPECT_NE(message.find("cancelled"), std::string::npos) << message;
  EXPECT_EQ(hook.begun.load(), 0);
  expect_normal_run(session);
}

TEST_P(RunControlTest, TheModelRunsAsPlannedInBothModes) {
  Session session(branching_model(), mode(GetParam()));
  const std::shared_ptr<const Plan> plan = session.plan_for(std::vector<Shape>{{1, 4}});
  ASSERT_EQ(plan->steps().size(), 4u);
  EXPECT_EQ(plan->parallel(), GetParam() == ExecutionMode::parallel);
  expect_normal_run(session);
}

TEST_P(RunControlTest, CancellingDuringARunStopsItAtTheNextStep) {
  Session session(branching_model(), mode(GetParam()));
  RunControl control;
  StepHook hook(0, [&] { control.cancel(); });
  ScopedObserver observe(session, &hook);
  std::string message;
  EXPECT_EQ(error_kind([&] { session.run(input(), control); }, &message), ErrorKind::cancelled);
  EXPECT_EQ(hook.begun.load(), 1) << "step 0 ran, no later step started";
  EXPECT_NE(message.find("before step "), std::string::npos) << message;
  RunControl fresh;
  const Tensor out = session.run(input(), fresh).at("out");
  EXPECT_EQ(out.data<float>()[3], 8.0f);
}

TEST_P(RunControlTest, AnotherThreadCancelsARunInFlight) {
  Session session(branching_model(), mode(GetParam()));
  auto control = std::make_shared<RunControl>();
  // Step 0 waits until the main thread has cancelled: the run is in flight when cancel() comes.
  std::mutex mutex;
  std::condition_variable signal;
  bool cancelled = false;
  StepHook hook(0, [&] {
    std::unique_lock lock(mutex);
    signal.wait(lock, [&] { return cancelled; });
  });
  ScopedObserver observe(session, &hook);
  Future<TensorMap> run = session.run_async(input(), {}, control);
  while (hook.begun.load() == 0) std::this_thread::yield();
  control->cancel();
  {
    std::lock_guard lock(mutex);
    cancelled = true;
  }
  signal.notify_all();
  EXPECT_EQ(error_kind([&] { run.wait(); }), ErrorKind::cancelled);
  EXPECT_EQ(hook.begun.load(), 1);
}

TEST_P(RunControlTest, AnExpiredDeadlineStopsTheRun) {
  Session session(branching_model(), mode(GetParam()));
  RunControl expired;
  expired.set_deadline(RunControl::Clock::now() - std::chrono::milliseconds(1));
  std::string message;
  EXPECT_EQ(error_kind([&] { session.run(input(), expired); }, &message), ErrorKind::deadline_exceeded);
  EXPECT_NE(message.find("deadline passed"), std::string::npos) << message;

  // A deadline that passes while step 0 runs stops the run before any other step.
  RunControl control;
  control.set_timeout(std::chrono::seconds(3600));
  StepHook hook(0, [&] { control.set_deadline(RunControl::Clock::now() - std::chrono::nanoseconds(1)); });
  ScopedObserver observe(session, &hook);
  EXPECT_EQ(error_kind([&] { session.run(input(), control); }), ErrorKind::deadline_exceeded);
  EXPECT_EQ(hook.begun.load(), 1);

  RunControl generous;
  generous.set_timeout(std::chrono::seconds(3600));
  EXPECT_EQ(session.run(input(), generous).at("out").data<float>()[1], 4.0f);
}

INSTANTIATE_TEST_SUITE_P(Modes, RunControlTest,
                         ::testing::Values(ExecutionMode::sequential, ExecutionMode::parallel),
                         [](const auto& info) {
                           return std::string(info.param == ExecutionMode::sequential ? "sequential"
                                                                                      : "parallel");
                         });

}  // namespace
}  // namespace kiln
