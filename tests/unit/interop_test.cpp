// The inter-op pool, fork/wait and the thread budget (runtime/interop.h, runtime/thread_budget.h).
// The pool is process-wide and sized once: under ctest every test runs in its own process, so the
// set-before-start test sees a fresh pool; run in one process, it checks what it still can.
#include "runtime/interop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "fake_environment.h"
#include "op_test_util.h"
#include "runtime/thread_budget.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::fake_environment;
using testing::fake_lookup;

TEST(InteropThreads, CountComesFromTheEnvironmentElseTheCores) {
  fake_environment().clear();
  EXPECT_EQ(interop_thread_count_from_environment(fake_lookup).threads, available_cores());
  EXPECT_EQ(interop_thread_count_from_environment(fake_lookup).source, "cores");
  fake_environment()["KILN_NUM_INTEROP_THREADS"] = "3";
  EXPECT_EQ(interop_thread_count_from_environment(fake_lookup).threads, 3);
  EXPECT_EQ(interop_thread_count_from_environment(fake_lookup).source, "KILN_NUM_INTEROP_THREADS");
  // The intra-op variables do not size the inter-op pool.
  fake_environment() = {{"OMP_NUM_THREADS", "7"}, {"KILN_NUM_THREADS", "5"}};
  EXPECT_EQ(interop_thread_count_from_environment(fake_lookup).source, "cores");
  for (const char* bad : {"0", "-2", "three", "100000", "2x"}) {
    fake_environment() = {{"KILN_NUM_INTEROP_THREADS", bad}};
    const std::string message = error_of([] { interop_thread_count_from_environment(fake_lookup); });
    EXPECT_NE(message.find(str_cat("KILN_NUM_INTEROP_THREADS='", bad, "'")), std::string::npos) << message;
  }
}

TEST(InteropThreads, SettableUntilTheFirstTaskThenAClearError) {
  EXPECT_NE(error_of([] { set_num_interop_threads(0); }).find("expected a thread count in 1..4096"),
            std::string::npos);
  if (!interop_pool_started()) {
    set_num_interop_threads(5);
    set_num_interop_threads(3);  // the last call before the first task wins
    EXPECT_EQ(get_num_interop_threads(), 3);
    EXPECT_EQ(num_interop_threads_source(), "api");
    EXPECT_FALSE(interop_pool_started());  // asking does not start it
  }
  const int size = get_num_interop_threads();
  EXPECT_EQ(fork([] { return 1; }).wait(), 1);
  EXPECT_TRUE(interop_pool_started());
  const std::string message = error_of([] { set_num_interop_threads(2); });
  EXPECT_NE(message.find("already started with"), std::string::npos) << message;
  EXPECT_NE(message.find("before the first inter-op work"), std::string::npos) << message;
  EXPECT_EQ(get_num_interop_threads(), size);
}

TEST(InteropFork, ReturnsResultsAndCarriesExceptions) {
  Future<std::string> text = fork([] { return std::string("kiln"); });
  EXPECT_EQ(wait(text), "kiln");
  EXPECT_EQ(text.wait(), "kiln");  // a future may be waited for again
  EXPECT_TRUE(text.ready());

  Future<int> failed = fork([]() -> int { fail(ErrorKind::invalid_argument, "bad value 7"); });
  EXPECT_NE(error_of([&] { failed.wait(); }).find("bad value 7"), std::string::npos);
  Future<void> thrown = fork([] { throw std::out_of_range("index 9"); });
  EXPECT_THROW(thrown.wait(), std::out_of_range);

  Future<int> empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_NE(error_of([&] { empty.wait(); }).find("no work behind it"), std::string::npos);
}

TEST(InteropFork, ManyTasksInFlightAllComplete) {
  std::vector<Future<int64_t>> futures;
  for (int64_t i = 0; i < 500; ++i) futures.push_back(fork([i] { return i * i; }));
  int64_t sum = 0;
  for (const Future<int64_t>& future : futures) sum += future.wait();
  EXPECT_EQ(sum, 499LL * 500 * 999 / 6);
}

TEST(InteropFork, TasksWaitingForTasksDoNotDeadlockThePool) {
  // More waiting parents than pool threads: each parent's child is queued behind other parents, so
  // this finishes only because a waiting pool thread runs queued tasks.
  const int parents = get_num_interop_threads() * 4;
  std::vector<Future<int>> futures;
  for (int p = 0; p < parents; ++p) {
    futures.push_back(fork([p] {
      Future<int> child = fork([p] { return p + 1; });
      return wait(child) * 2;
    }));
  }
  for (int p = 0; p < parents; ++p) EXPECT_EQ(futures[p].wait(), (p + 1) * 2);
}

TEST(InteropFork, ReleasesWhatTheTaskHoldsBeforeItIsReady) {
  auto held = std::make_shared<int>(42);
  std::weak_ptr<int> watch = held;
  Future<int> future = fork([held = std::move(held)] { return *held; });
  EXPECT_EQ(future.wait(), 42);
  EXPECT_TRUE(watch.expired());
}

// Restores the budget a test changed.
class BudgetTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = get_thread_budget(); }
  void TearDown() override { set_thread_budget(saved_); }
  int saved_ = 0;
};

TEST_F(BudgetTest, BudgetComesFromTheEnvironmentElseTheCores) {
  fake_environment().clear();
  EXPECT_EQ(thread_budget_from_environment(fake_lookup).threads, available_cores());
  fake_environment()["KILN_THREAD_BUDGET"] = "0";
  EXPECT_EQ(thread_budget_from_environment(fake_lookup).threads, 0);
  fake_environment()["KILN_THREAD_BUDGET"] = "6";
  EXPECT_EQ(thread_budget_from_environment(fake_lookup).threads, 6);
  EXPECT_EQ(thread_budget_from_environment(fake_lookup).source, "KILN_THREAD_BUDGET");
  fake_environment()["KILN_THREAD_BUDGET"] = "-1";
  EXPECT_NE(error_of([] { thread_budget_from_environment(fake_lookup); }).find("KILN_THREAD_BUDGET='-1'"),
            std::string::npos);
  EXPECT_NE(error_of([] { set_thread_budget(-3); }).find("set_thread_budget(-3)"), std::string::npos);
}

TEST_F(BudgetTest, ARunGetsWhatIsLeftAndWaitsWhenNothingIs) {
  set_thread_budget(2);
  EXPECT_EQ(thread_budget_source(), "api");
  {
    ThreadLease alone(4);  // a run alone gets what it asks for, above the budget too
    EXPECT_EQ(alone.threads(), 4);
  }
  ThreadLease first(1);
  EXPECT_EQ(first.threads(), 1);
  std::optional<ThreadLease> second(std::in_place, 2);
  EXPECT_EQ(second->threads(), 1);  // what is left
  EXPECT_EQ(second->held_by_others(), 1);
  EXPECT_EQ(leased_threads(), 2);

  std::atomic<int> third_threads{0};
  std::thread third([&] {
    ThreadLease lease(2);
    third_threads = lease.threads();
    EXPECT_TRUE(lease.waited());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(third_threads.load(), 0);  // still waiting: the budget is used up
  second.reset();
  third.join();
  EXPECT_EQ(third_threads.load(), 1);
  EXPECT_EQ(leased_threads(), 1);
}

TEST_F(BudgetTest, CallersThatMetRecentlyKeepSharing) {
  set_thread_budget(2);
  { ThreadLease alone(2); }
  {
    ThreadLease first(1);
    ThreadLease second(2);  // contention: one thread is left
    EXPECT_EQ(second.threads(), 1);
  }
  // Both finished at once; the next run would take every thread and make the other caller wait.
  // Contention was just seen, so it gets an even share instead.
  EXPECT_TRUE(thread_budget_shared());
  ThreadLease next(2);
  EXPECT_EQ(next.threads(), 1);
}

TEST_F(BudgetTest, ZeroTurnsTheBudgetOff) {
  set_thread_budget(0);
  ThreadLease first(2);
  ThreadLease second(2);
  EXPECT_EQ(second.threads(), 2);
  EXPECT_FALSE(second.waited());
}

}  // namespace
}  // namespace kiln
