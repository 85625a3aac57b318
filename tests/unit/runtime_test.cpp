#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <string>
#include <vector>

#include "backends/settings.h"
#include "core/error.h"
#include "fake_environment.h"
#include "runtime/parallel.h"
#include "runtime/threads.h"

namespace kiln {
namespace {

using testing::fake_environment;
using testing::fake_lookup;

TEST(ThreadSettings, PrecedenceIsSettingThenKilnThenMklThenOmpThenCores) {
  fake_environment().clear();
  EXPECT_EQ(thread_count_from_environment(fake_lookup).threads, available_cores());
  EXPECT_EQ(thread_count_from_environment(fake_lookup).source, "cores");
  fake_environment()["OMP_NUM_THREADS"] = "3,2";
  EXPECT_EQ(thread_count_from_environment(fake_lookup).threads, 3);
  EXPECT_EQ(thread_count_from_environment(fake_lookup).source, "OMP_NUM_THREADS");
  fake_environment()["MKL_NUM_THREADS"] = "4";
  EXPECT_EQ(thread_count_from_environment(fake_lookup).threads, 4);
  EXPECT_EQ(thread_count_from_environment(fake_lookup).source, "MKL_NUM_THREADS");
  fake_environment()["KILN_NUM_THREADS"] = "5";
  EXPECT_EQ(thread_count_from_environment(fake_lookup).threads, 5);
  EXPECT_EQ(thread_count_from_environment(fake_lookup).source, "KILN_NUM_THREADS");
  fake_environment()["KILN_NUM_THREADS"] = "";  // empty counts as unset
  EXPECT_EQ(thread_count_from_environment(fake_lookup).source, "MKL_NUM_THREADS");
  fake_environment()["MKL_NUM_THREADS"] = "";
  EXPECT_EQ(thread_count_from_environment(fake_lookup).source, "OMP_NUM_THREADS");
  {
    ScopedThreads scoped(2);
    EXPECT_EQ(get_num_threads(), 2);
    EXPECT_EQ(intra_op_threads(), 2);
    EXPECT_EQ(num_threads_source(), "scope");
  }
  EXPECT_EQ(get_num_threads(), environment_thread_count().threads);
}

TEST(ThreadSettings, InvalidValuesAreRejectedNamingTheirSource) {
  EXPECT_THROW(set_num_threads(0), Error);
  EXPECT_THROW(set_num_threads(-4), Error);
  for (const char* bad : {"two", "0", "-1", "99999"}) {
    fake_environment() = {{"KILN_NUM_THREADS", bad}};
    try {
      thread_count_from_environment(fake_lookup);
      ADD_FAILURE() << bad;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("KILN_NUM_THREADS"), std::string::npos);
    }
  }
  fake_environment() = {{"OMP_NUM_THREADS", "x,2"}};
  EXPECT_THROW(thread_count_from_environment(fake_lookup), Error);
  // A bad MKL_NUM_THREADS is an error even though OMP_NUM_THREADS is valid: it ranks above it.
  fake_environment() = {{"MKL_NUM_THREADS", "many"}, {"OMP_NUM_THREADS", "2"}};
  try {
    thread_count_from_environment(fake_lookup);
    ADD_FAILURE() << "MKL_NUM_THREADS=many accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("MKL_NUM_THREADS='many'"), std::string::npos) << error.what();
  }
}

TEST(ThreadSettings, ParallelForCoversEveryIndexOnceWithAnyThreadCount) {
  for (int threads : {1, 2, 3}) {
    ScopedThreads scoped(threads);
    std::vector<std::atomic<int>> hits(100000);
    parallel_for(0, static_cast<int64_t>(hits.size()), 100, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) hits[i]++;
    });
    for (const auto& hit : hits) ASSERT_EQ(hit.load(), 1);
  }
}

TEST(ThreadSettings, ParallelForPropagatesKilnErrors) {
  ScopedThreads two(2);
  EXPECT_THROW(parallel_for(0, 1 << 20, 100,
                            [](int64_t begin, int64_t) {
                              if (begin > 0) fail(ErrorKind::runtime, "boom");
                            }),
               Error);
}

TEST(ThreadSettings, SmallLoopsRunInline) {
  ScopedThreads two(2);
  EXPECT_EQ(threads_for_work(10), 1);
  bool nested_inline = true;
  parallel_for(0, 4, kParallelMinWork, [&](int64_t, int64_t) {
    if (in_parallel_region() && threads_for_work(1 << 30) != 1) nested_inline = false;
  });
  EXPECT_TRUE(nested_inline);
}

}  // namespace
}  // namespace kiln
