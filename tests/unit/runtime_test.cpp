#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <vector>

#include "core/error.h"
#include "runtime/parallel.h"
#include "runtime/threads.h"

namespace kiln {
namespace {

// Sets or clears environment variables for one test and restores the API setting afterwards.
class ThreadSettings : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("KILN_NUM_THREADS");
    unsetenv("OMP_NUM_THREADS");
    reset_num_threads();
  }
  void TearDown() override { SetUp(); }
};

TEST_F(ThreadSettings, PrecedenceIsApiThenKilnThenOmpThenCores) {
  EXPECT_EQ(get_num_threads(), available_cores());
  EXPECT_EQ(num_threads_source(), "cores");
  setenv("OMP_NUM_THREADS", "3,2", 1);
  EXPECT_EQ(get_num_threads(), 3);
  EXPECT_EQ(num_threads_source(), "OMP_NUM_THREADS");
  setenv("KILN_NUM_THREADS", "5", 1);
  EXPECT_EQ(get_num_threads(), 5);
  set_num_threads(2);
  EXPECT_EQ(get_num_threads(), 2);
  EXPECT_EQ(num_threads_source(), "api");
}

TEST_F(ThreadSettings, InvalidValuesAreRejectedNamingTheirSource) {
  EXPECT_THROW(set_num_threads(0), Error);
  EXPECT_THROW(set_num_threads(-4), Error);
  setenv("KILN_NUM_THREADS", "two", 1);
  try {
    get_num_threads();
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("KILN_NUM_THREADS"), std::string::npos);
  }
  setenv("KILN_NUM_THREADS", "0", 1);
  EXPECT_THROW(get_num_threads(), Error);
}

TEST_F(ThreadSettings, ParallelForCoversEveryIndexOnceWithAnyThreadCount) {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<std::atomic<int>> hits(100000);
    parallel_for(0, static_cast<int64_t>(hits.size()), 100, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) hits[i]++;
    });
    for (const auto& hit : hits) ASSERT_EQ(hit.load(), 1);
  }
}

TEST_F(ThreadSettings, ParallelForPropagatesKilnErrors) {
  set_num_threads(2);
  EXPECT_THROW(parallel_for(0, 1 << 20, 100,
                            [](int64_t begin, int64_t) {
                              if (begin > 0) fail(ErrorKind::runtime, "boom");
                            }),
               Error);
}

TEST_F(ThreadSettings, SmallLoopsRunInline) {
  set_num_threads(2);
  EXPECT_EQ(threads_for_work(10), 1);
  bool nested_inline = true;
  parallel_for(0, 4, kParallelMinWork, [&](int64_t, int64_t) {
    if (in_parallel_region() && threads_for_work(1 << 30) != 1) nested_inline = false;
  });
  EXPECT_TRUE(nested_inline);
}

}  // namespace
}  // namespace kiln
