// Tests share one process when the binary is run directly (ctest runs each in its own): runs that
// met in one test leave the thread budget shared for a few milliseconds (runtime/thread_budget.h),
// which would give the next test's runs fewer threads than they ask for. After every test this
// waits until the budget is no longer shared.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "runtime/thread_budget.h"

namespace kiln {
namespace {

class WaitForTheBudgetToSettle final : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo&) override {
    for (int wait = 0; wait < 500 && thread_budget_shared(); ++wait)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
};

const bool registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new WaitForTheBudgetToSettle);
  return true;
}();

}  // namespace
}  // namespace kiln
