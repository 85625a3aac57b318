// kiln::backends settings: globals and scoped guards (nesting, exceptions, threads), plans per
// configuration, runtime verbose (the profiling-session and cascaded-model scenarios), deterministic
// mode, bf16 precision, autotune and oneDNN's primitive cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "backends/autotune.h"
#include "backends/control.h"
#include "backends/selection.h"
#include "graph/session.h"
#include "graph_builder.h"
#include "runtime/cpu_info.h"
#include "runtime/threads.h"

namespace kiln {
namespace {

using testing::conv_attrs;
using testing::GraphBuilder;
using testing::random_tensor;

// Restores the global settings whatever a test changed.
class BackendSettingsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    reset_flags();
    reset_num_threads();
  }
};

// Collects verbose lines; `lines_of("exec")` keeps one kind.
class LineCollector {
 public:
  std::shared_ptr<VerboseSink> sink() {
    return callback_verbose_sink([this](std::string_view line) {
      std::lock_guard lock(mutex_);
      lines_.emplace_back(line);
    });
  }
  std::vector<std::string> lines_of(const std::string& kind) {
    std::lock_guard lock(mutex_);
    std::vector<std::string> kept;
    for (const std::string& line : lines_) {
      if (line.starts_with("kiln_verbose," + kind + ",")) kept.push_back(line);
    }
    return kept;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

// Conv -> Relu -> MaxPool -> Gemm (Flatten between): a conv, a matmul, pooling and a reorder.
Model small_cnn() {
  GraphBuilder g({1, 3, 16, 16});
  std::string y =
      g.add("Conv", {"x", g.weights({8, 3, 3, 3}), g.weights({8})}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
  y = g.add("Relu", {y});
  Attributes pool;
  pool.set("kernel_shape", testing::ints_attr({2, 2}));
  pool.set("strides", testing::ints_attr({2, 2}));
  y = g.add("MaxPool", {y}, pool);
  y = g.add("Conv", {y, g.weights({16, 8, 3, 3}), g.weights({16})}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
  y = g.add("Flatten", {y});
  Attributes gemm;
  gemm.set("transB", testing::int_attr(1));
  y = g.add("Gemm", {y, g.weights({10, 16 * 8 * 8}, 0.05f), g.weights({10})}, gemm);
  return g.finish({y});
}

Tensor run_once(Session& session, const Tensor& x) {
  return session.run({{"x", x}}).begin()->second;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// Steps a run of `plan` executes. In these graphs every view (Flatten) reads storage fixed when a
// run context is created, so it is made once there and not executed per run.
size_t executed_steps(const Plan& plan) {
  return static_cast<size_t>(std::count_if(plan.steps().begin(), plan.steps().end(),
                                           [](const PlanStep& step) { return !step.kernel->is_view(); }));
}

TEST_F(BackendSettingsTest, GuardsNestAndRestoreExactly) {
  EXPECT_TRUE(backends::onednn::enabled());
  {
    ScopedFlags outer({.onednn = false, .verbose = 1});
    EXPECT_FALSE(backends::onednn::enabled());
    EXPECT_EQ(backends::verbose(), 1);
    {
      ScopedFlags inner({.onednn = true, .deterministic = true});
      EXPECT_TRUE(backends::onednn::enabled());
      EXPECT_TRUE(backends::deterministic());
      EXPECT_EQ(backends::verbose(), 1);  // inherited from the outer guard
    }
    EXPECT_FALSE(backends::onednn::enabled());
    EXPECT_FALSE(backends::deterministic());
  }
  EXPECT_TRUE(backends::onednn::enabled());
  EXPECT_EQ(backends::verbose(), 0);
}

TEST_F(BackendSettingsTest, GuardsRestoreWhenAnExceptionLeavesTheScope) {
  try {
    backends::ScopedPrecision bf16(Precision::bf16);
    backends::ScopedAutotune autotune(3);
    EXPECT_EQ(backends::precision("conv"), Precision::bf16);
    throw std::runtime_error("leaving");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(backends::precision("conv"), Precision::fp32);
  EXPECT_EQ(backends::precision("matmul"), Precision::fp32);
  EXPECT_EQ(backends::autotune(), 0);
}

TEST_F(BackendSettingsTest, AGuardIsSeenOnlyByItsThreadAGlobalByAll) {
  backends::onednn::ScopedEnabled off(false);
  bool other_thread_sees_enabled = false;
  std::thread([&] { other_thread_sees_enabled = backends::onednn::enabled(); }).join();
  EXPECT_TRUE(other_thread_sees_enabled);
  EXPECT_FALSE(backends::onednn::enabled());

  backends::set_deterministic(true);
  bool other_thread_sees_deterministic = false;
  std::thread([&] { other_thread_sees_deterministic = backends::deterministic(); }).join();
  EXPECT_TRUE(other_thread_sees_deterministic);
}

TEST_F(BackendSettingsTest, InvalidFlagsAreRejectedWithTheirName) {
  const auto message = [](const Flags& flags) {
    try {
      ScopedFlags guard(flags);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({.native = false}).find("native backend cannot be disabled"), std::string::npos);
  EXPECT_NE(message({.autotune = -1}).find("'autotune'"), std::string::npos);
  EXPECT_NE(message({.verbose = 3}).find("'verbose'"), std::string::npos);
  EXPECT_NE(message({.blas_verbose = -1}).find("'blas_verbose'"), std::string::npos);
  EXPECT_THROW(parse_precision("fp16", "precision"), Error);
  EXPECT_THROW(backends::precision("attention"), Error);
}

TEST_F(BackendSettingsTest, DisablingOnednnInAScopeReplansOnceAndKeepsResults) {
  Session session(small_cnn());
  const Tensor x = random_tensor({1, 3, 16, 16}, 3);
  const Tensor fast = run_once(session, x);
  const std::shared_ptr<const Plan> fast_plan = session.plan_for({x.shape()});
  Tensor reference;
  std::shared_ptr<const Plan> native_plan;
  {
    backends::onednn::ScopedEnabled off(false);
    reference = run_once(session, x);
    native_plan = session.plan_for({x.shape()});
    EXPECT_EQ(session.plan_for({x.shape()}), native_plan);  // built once per configuration
  }
  EXPECT_NE(native_plan, fast_plan);
  EXPECT_EQ(session.plan_for({x.shape()}), fast_plan);  // back to the cached plan
  bool any_onednn = false;
  for (const PlanStep& step : fast_plan->steps()) any_onednn |= step.record.backend == "onednn";
  for (const PlanStep& step : native_plan->steps())
    EXPECT_NE(step.record.backend, "onednn") << step.record.node_name;
  EXPECT_TRUE(any_onednn);
  double scale = 1;
  for (float v : reference.values<float>()) scale = std::max(scale, static_cast<double>(std::abs(v)));
  EXPECT_LE(testing::max_abs_diff(fast, reference), 1e-4 * scale);
}

TEST_F(BackendSettingsTest, VerboseOnlyChangesLinesNotPlans) {
  Session session(small_cnn());
  const Tensor x = random_tensor({1, 3, 16, 16}, 3);
  run_once(session, x);
  const std::shared_ptr<const Plan> plan = session.plan_for({x.shape()});
  LineCollector lines;
  {
    ScopedFlags verbose({.verbose = 1, .verbose_sink = lines.sink()});
    run_once(session, x);
    EXPECT_EQ(session.plan_for({x.shape()}), plan);
  }
  const std::vector<std::string> exec = lines.lines_of("exec");
  ASSERT_EQ(exec.size(), executed_steps(*plan));
  // kiln_verbose,exec,<backend>,<op>,<node>,<kernel>,<layouts>,<shapes>,<fused>,<ms>
  const std::string& first = exec.front();
  EXPECT_EQ(std::count(first.begin(), first.end(), ','), 9) << first;
  const PlanStep& step0 = plan->steps()[0];
  EXPECT_NE(first.find(str_cat(",", step0.record.backend, ",", step0.record.op_type, ",",
                               step0.record.node_name, ",", step0.record.kernel, ",")),
            std::string::npos)
      << first;
}

// A profiling session: warm up, one verbose run, then quiet runs; lines come from that run only.
TEST_F(BackendSettingsTest, ProfilingSessionPrintsExactlyOneRun) {
  Session session(small_cnn());
  const Tensor x = random_tensor({1, 3, 16, 16}, 3);
  LineCollector lines;
  backends::set_verbose_sink(lines.sink());
  for (int i = 0; i < 100; ++i) run_once(session, x);
  {
    backends::ScopedVerbose verbose(1);
    run_once(session, x);
  }
  for (int i = 0; i < 100; ++i) run_once(session, x);
  EXPECT_EQ(lines.lines_of("exec").size(), executed_steps(*session.plan_for({x.shape()})));
}

// y = m3(m2(m1(x))) with verbose around m2 only: every line names one of m2's nodes.
TEST_F(BackendSettingsTest, CascadedModelsPrintOnlyTheMiddleOne) {
  const auto relu_model = [](const std::string& prefix) {
    GraphBuilder g({1, 4, 8, 8});
    Model model = g.finish({g.add("Relu", {g.add("Sigmoid", {"x"})})});
    for (Node& node : model.graph.nodes) node.name = prefix + node.name;
    return model;
  };
  Session m1(relu_model("m1_")), m2(relu_model("m2_")), m3(relu_model("m3_"));
  LineCollector lines;
  const Tensor x = random_tensor({1, 4, 8, 8}, 5);
  const Tensor y1 = run_once(m1, x);
  Tensor y2;
  {
    ScopedFlags verbose({.verbose = 1, .verbose_sink = lines.sink()});
    y2 = run_once(m2, y1);
  }
  run_once(m3, y2);
  const std::vector<std::string> exec = lines.lines_of("exec");
  EXPECT_EQ(exec.size(), 2u);
  for (const std::string& line : exec) EXPECT_NE(line.find(",m2_"), std::string::npos) << line;
}

TEST_F(BackendSettingsTest, SessionOptionsApplyToThatSessionOnly) {
  LineCollector lines;
  Session loud(small_cnn(), Flags{.verbose = 1, .verbose_sink = lines.sink()});
  Session quiet(small_cnn());
  const Tensor x = random_tensor({1, 3, 16, 16}, 3);
  run_once(quiet, x);
  EXPECT_TRUE(lines.lines_of("exec").empty());
  run_once(loud, x);
  EXPECT_EQ(lines.lines_of("exec").size(), executed_steps(*loud.plan_for({x.shape()})));
  {
    backends::ScopedVerbose off(0);  // a scoped guard overrides the session's option
    run_once(loud, x);
  }
  EXPECT_EQ(lines.lines_of("exec").size(), executed_steps(*loud.plan_for({x.shape()})));
}

// A run snapshots the caller's settings: a guard on another thread, set while this thread runs,
// does not leak into it.
TEST_F(BackendSettingsTest, ConcurrentRunsSeeTheirOwnThreadsGuards) {
  Session session(small_cnn());
  const Tensor x = random_tensor({1, 3, 16, 16}, 3);
  run_once(session, x);
  LineCollector lines;
  backends::set_verbose_sink(lines.sink());
  std::thread loud([&] {
    backends::ScopedVerbose verbose(1);
    for (int i = 0; i < 5; ++i) run_once(session, x);
  });
  for (int i = 0; i < 20; ++i) run_once(session, x);
  loud.join();
  EXPECT_EQ(lines.lines_of("exec").size(), 5 * executed_steps(*session.plan_for({x.shape()})));
}

TEST_F(BackendSettingsTest, PlanLinesAtLevelTwo) {
  Session session(small_cnn());
  LineCollector lines;
  ScopedFlags verbose({.verbose = 2, .verbose_sink = lines.sink()});
  const Tensor x = random_tensor({1, 3, 16, 16}, 3);
  run_once(session, x);
  const std::shared_ptr<const Plan> plan = session.plan_for({x.shape()});
  EXPECT_EQ(lines.lines_of("plan").size(), plan->steps().size());
  EXPECT_EQ(lines.lines_of("exec").size(), executed_steps(*plan));
  run_once(session, x);  // cached plan: no new plan lines
  EXPECT_EQ(lines.lines_of("plan").size(), plan->steps().size());
}

TEST_F(BackendSettingsTest, VerboseFileSinkAppendsAndBadPathsAreNamed) {
  const std::string path = ::testing::TempDir() + "kiln_verbose_test.log";
  std::remove(path.c_str());
  {
    Session session(small_cnn());
    ScopedFlags verbose({.verbose = 1, .verbose_sink = file_verbose_sink(path)});
    run_once(session, random_tensor({1, 3, 16, 16}, 3));
  }
  std::FILE* file = std::fopen(path.c_str(), "r");
  ASSERT_NE(file, nullptr);
  char buffer[4096] = {};
  const size_t read = std::fread(buffer, 1, sizeof buffer - 1, file);
  std::fclose(file);
  EXPECT_GT(read, 0u);
  EXPECT_NE(std::string(buffer).find("kiln_verbose,exec,"), std::string::npos);
  try {
    file_verbose_sink("/nonexistent-dir/verbose.log");
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent-dir/verbose.log"), std::string::npos);
  }
}

TEST_F(BackendSettingsTest, DeterministicModeIsBitwiseStableAcrossRunsAndThreads) {
  backends::ScopedDeterministic deterministic;
  Session session(small_cnn());
  const Tensor x = random_tensor({1, 3, 16, 16}, 9);
  set_num_threads(2);
  const Tensor first = run_once(session, x);
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(bitwise_equal(run_once(session, x), first)) << "run " << i;
  set_num_threads(1);
  EXPECT_TRUE(bitwise_equal(run_once(session, x), first)) << "1 thread vs 2";
  for (const PlanStep& step : session.plan_for({x.shape()})->steps()) {
    if (step.record.op_type == "Conv" || step.record.op_type == "Gemm")
      EXPECT_EQ(step.record.backend, "native");
  }
}

// Where the ISA tier in effect has bf16 dot products (AVX512_BF16 or AMX), bf16 precision runs every
// Conv and Gemm in bf16, close to float32. Elsewhere (an AVX2 CPU, or KILN_ISA=avx512 / avx2, which
// the isa_* test runs set) the plan is exactly the float32 plan, each product noting why.
TEST_F(BackendSettingsTest, Bf16RunsInReducedPrecisionOrFallsBackToTheFp32Plan) {
  Session session(small_cnn());
  const Tensor x = random_tensor({1, 3, 16, 16}, 11);
  const Tensor fp32 = run_once(session, x);
  std::vector<std::string> fp32_kernels;
  for (const PlanStep& step : session.plan_for({x.shape()})->steps())
    fp32_kernels.push_back(step.record.kernel);
  backends::ScopedPrecision bf16(Precision::bf16);
  const Tensor reduced = run_once(session, x);
  const std::vector<PlanStep>& steps = session.plan_for({x.shape()})->steps();
  const bool bf16_in_effect = isa_in_effect() >= Isa::avx512_bf16;
  if (!bf16_in_effect) {
    ASSERT_EQ(steps.size(), fp32_kernels.size());
    for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i].record.kernel, fp32_kernels[i]);
  }
  int products = 0;
  for (const PlanStep& step : steps) {
    if (step.record.op_type != "Conv" && step.record.op_type != "Gemm") continue;
    ++products;
    if (bf16_in_effect) {
      EXPECT_NE(step.record.kernel.find("bf16"), std::string::npos) << step.record.kernel;
    } else {
      EXPECT_NE(step.record.note.find("precision bf16 requested, float32 used: the ISA in effect ("),
                std::string::npos)
          << step.record.note;
    }
  }
  EXPECT_EQ(products, 3);
  double error = 0, norm = 0;
  const std::span<const float> a = fp32.values<float>(), b = reduced.values<float>();
  for (size_t i = 0; i < a.size(); ++i) {
    error += (a[i] - b[i]) * (a[i] - b[i]);
    norm += a[i] * a[i];
  }
  if (bf16_in_effect) {
    EXPECT_LE(std::sqrt(error / norm), 2e-2);
    EXPECT_GT(std::sqrt(error / norm), 0.0);  // it really ran in reduced precision
  } else {
    EXPECT_EQ(error, 0.0);  // the same kernels on the same thread count
  }
}

TEST_F(BackendSettingsTest, AutotuneTimesCandidatesAndRemembersTheChoice) {
  clear_autotune_cache();
  backends::ScopedAutotune autotune(4);
  // A 24x24x24 product: BLAS and oneDNN both offer it (and oneDNN perhaps alternatives).
  GraphBuilder g({24, 24});
  Model model = g.finish({g.add("MatMul", {"x", g.weights({24, 24})})});
  Session session(model);
  const Tensor x = random_tensor({24, 24}, 2);
  const Tensor y = run_once(session, x);
  const StepRecord& record = session.plan_for({x.shape()})->steps()[0].record;
  ASSERT_GE(record.timed.size(), 2u);
  double fastest = record.timed[0].milliseconds;
  for (const TimedCandidate& candidate : record.timed) fastest = std::min(fastest, candidate.milliseconds);
  bool chosen_is_fastest = false;
  for (const TimedCandidate& candidate : record.timed) {
    if (candidate.kernel == record.kernel) chosen_is_fastest = candidate.milliseconds == fastest;
  }
  EXPECT_TRUE(chosen_is_fastest) << record.kernel;
  // Another session with the same node reuses the choice without timing.
  Session again(model);
  run_once(again, x);
  EXPECT_TRUE(again.plan_for({x.shape()})->steps()[0].record.timed.empty());
  EXPECT_EQ(again.plan_for({x.shape()})->steps()[0].record.kernel, record.kernel);
  backends::ScopedAutotune off(0);
  EXPECT_LE(testing::max_abs_diff(run_once(again, x), y), 1e-4);
}

TEST_F(BackendSettingsTest, PrimitiveCacheReportsAndClears) {
  Session session(small_cnn());
  run_once(session, random_tensor({1, 3, 16, 16}, 3));
  EXPECT_GT(backends::onednn::primitive_cache::size(), 0);
  const int capacity = backends::onednn::primitive_cache::capacity();
  backends::onednn::primitive_cache::clear();
  EXPECT_EQ(backends::onednn::primitive_cache::size(), 0);
  EXPECT_EQ(backends::onednn::primitive_cache::capacity(), capacity);
  backends::onednn::primitive_cache::set_capacity(7);
  EXPECT_EQ(backends::onednn::primitive_cache::capacity(), 7);
  backends::onednn::primitive_cache::set_capacity(capacity);
  EXPECT_THROW(backends::onednn::primitive_cache::set_capacity(-1), Error);
}

TEST_F(BackendSettingsTest, InfoFunctionsDescribeTheBuild) {
  EXPECT_TRUE(backends::native::is_available());
  EXPECT_FALSE(backends::cuda::is_built());
  EXPECT_FALSE(backends::cuda::is_available());
  EXPECT_EQ(backends::onednn::version().rfind("2.", 0), 0u);
  EXPECT_NE(backends::blas::library().find("OpenBLAS"), std::string::npos);
  EXPECT_TRUE(backends::openmp::is_available());
  const std::vector<std::string> capability = backends::cpu::capability();
  if (cpu_capability().avx512f) {
    EXPECT_NE(std::find(capability.begin(), capability.end(), "AVX512"), capability.end());
  }
  EXPECT_EQ(backends::cpu::isa(), isa_name(isa_in_effect()));
  EXPECT_EQ(backends::cpu::best_isa(), isa_name(cpu_capability().best_isa()));
}

}  // namespace
}  // namespace kiln
