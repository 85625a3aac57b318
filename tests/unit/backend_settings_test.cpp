// kiln::backends settings: globals and scoped guards (nesting, exceptions, threads), plans per
// configuration, runtime verbose (the profiling-session and cascaded-model scenarios), deterministic
// mode, bf16 precision, autotune and oneDNN's primitive cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "backend_test_util.h"
#include "backends/backends.h"
#include "backends/choice_cache.h"
#include "backends/selection.h"
#include "graph/session.h"
#include "graph_builder.h"
#include "runtime/cpu_info.h"
#include "runtime/threads.h"
#include "settings_test_util.h"

namespace kiln {
namespace {

using testing::conv_attrs;
using testing::GraphBuilder;
using testing::random_tensor;
using testing::ScopedGlobalSettings;
using testing::VerboseLines;

using BackendSettingsTest = ::testing::Test;

Settings with(std::string_view name, int value) {
  return Settings().set_by_name(name, value);
}

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
  EXPECT_EQ(backends::get("onednn_enabled"), 1);
  {
    ScopedSettings outer(Settings().set_by_name("onednn_enabled", 0).set("verbose", 1));
    EXPECT_EQ(backends::get("onednn_enabled"), 0);
    EXPECT_EQ(backends::get("verbose"), 1);
    {
      ScopedSettings inner(Settings().set_by_name("onednn_enabled", 1).set("deterministic", 1));
      EXPECT_EQ(backends::get("onednn_enabled"), 1);
      EXPECT_EQ(backends::get("deterministic"), 1);
      EXPECT_EQ(backends::get("verbose"), 1);  // inherited from the outer guard
    }
    EXPECT_EQ(backends::get("onednn_enabled"), 0);
    EXPECT_EQ(backends::get("deterministic"), 0);
  }
  EXPECT_EQ(backends::get("onednn_enabled"), 1);
  EXPECT_EQ(backends::get("verbose"), 0);
}

TEST_F(BackendSettingsTest, GuardsRestoreWhenAnExceptionLeavesTheScope) {
  try {
    ScopedSettings bf16(with("precision", static_cast<int>(Precision::bf16)));
    ScopedSettings autotune(Settings().set("autotune", 1).set("autotune_limit", 3));
    EXPECT_EQ(current_settings().precision("conv_precision"), Precision::bf16);
    throw std::runtime_error("leaving");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(current_settings().precision("conv_precision"), Precision::fp32);
  EXPECT_EQ(current_settings().precision("matmul_precision"), Precision::fp32);
  EXPECT_EQ(backends::get("autotune"), 0);
  EXPECT_EQ(backends::get("autotune_limit"), 10);
}

TEST_F(BackendSettingsTest, AGuardIsSeenOnlyByItsThreadAGlobalByAll) {
  ScopedSettings off(with("onednn_enabled", 0));
  int other_thread_sees_enabled = 0;
  std::thread([&] { other_thread_sees_enabled = backends::get("onednn_enabled"); }).join();
  EXPECT_EQ(other_thread_sees_enabled, 1);
  EXPECT_EQ(backends::get("onednn_enabled"), 0);

  ScopedGlobalSettings restore;
  backends::set("deterministic", 1);
  int other_thread_sees_deterministic = 0;
  std::thread([&] { other_thread_sees_deterministic = backends::get("deterministic"); }).join();
  EXPECT_EQ(other_thread_sees_deterministic, 1);
}

TEST_F(BackendSettingsTest, InvalidSettingsAreRejectedWithTheirName) {
  const auto message = [](std::string_view name, int value) {
    try {
      ScopedSettings guard(with(name, value));
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("native_enabled", 0).find("native backend cannot be disabled"), std::string::npos);
  EXPECT_NE(message("autotune_limit", -1).find("'autotune_limit'"), std::string::npos);
  EXPECT_NE(message("verbose", 3).find("'verbose'"), std::string::npos);
  EXPECT_NE(message("blas_verbose", -1).find("'blas_verbose'"), std::string::npos);
  EXPECT_NE(message("threads", kMaxThreads + 1).find("'threads'"), std::string::npos);
  EXPECT_NE(message("deterministic", 2).find("'deterministic'"), std::string::npos);
  const std::string unknown = message("attention", 1);
  EXPECT_NE(unknown.find("unknown setting 'attention'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("conv_precision"), std::string::npos) << unknown;  // lists the known names
  EXPECT_THROW(parse_setting_value(find_setting("conv_precision"), "fp16", "precision"), Error);
}

TEST_F(BackendSettingsTest, DisablingOnednnInAScopeReplansOnceAndKeepsResults) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  Session session(small_cnn());
  const Tensor x = random_tensor({1, 3, 16, 16}, 3);
  const Tensor fast = run_once(session, x);
  const std::shared_ptr<const Plan> fast_plan = session.plan_for({x.shape()});
  Tensor reference;
  std::shared_ptr<const Plan> native_plan;
  {
    ScopedSettings off(with("onednn_enabled", 0));
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
  VerboseLines lines;
  {
    ScopedSettings verbose(Settings().set("verbose", 1).set_verbose_sink(lines.sink()));
    run_once(session, x);
    EXPECT_EQ(session.plan_for({x.shape()}), plan);
  }
  const std::vector<std::string> exec = lines.lines_of("exec");
  ASSERT_EQ(exec.size(), executed_steps(*plan));
  // kiln_verbose,exec,<backend>,<op>,<node>,<kernel>,<dtypes>,<layouts>,<shapes>,<fused>,<ms>
  const std::string& first = exec.front();
  EXPECT_EQ(std::count(first.begin(), first.end(), ','), 10) << first;
  const StepRecord& step0 = plan->steps()[0].record;
  std::string dtypes = "in:";
  for (size_t i = 0; i < step0.input_dtypes.size(); ++i) dtypes += str_cat(i == 0 ? "" : ";", "float32");
  dtypes += " out:float32";
  EXPECT_NE(first.find(str_cat(",", step0.backend, ",", step0.op_type, ",", step0.node_name, ",",
                               step0.kernel, ",", dtypes, ",")),
            std::string::npos)
      << first;
}

// A profiling session: warm up, one verbose run, then quiet runs; lines come from that run only.
TEST_F(BackendSettingsTest, ProfilingSessionPrintsExactlyOneRun) {
  Session session(small_cnn());
  const Tensor x = random_tensor({1, 3, 16, 16}, 3);
  VerboseLines lines;
  ScopedSettings sink(Settings().set_verbose_sink(lines.sink()));
  for (int i = 0; i < 100; ++i) run_once(session, x);
  {
    ScopedSettings verbose(with("verbose", 1));
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
  VerboseLines lines;
  const Tensor x = random_tensor({1, 4, 8, 8}, 5);
  const Tensor y1 = run_once(m1, x);
  Tensor y2;
  {
    ScopedSettings verbose(Settings().set("verbose", 1).set_verbose_sink(lines.sink()));
    y2 = run_once(m2, y1);
  }
  run_once(m3, y2);
  const std::vector<std::string> exec = lines.lines_of("exec");
  EXPECT_EQ(exec.size(), 2u);
  for (const std::string& line : exec) EXPECT_NE(line.find(",m2_"), std::string::npos) << line;
}

TEST_F(BackendSettingsTest, SessionSettingsApplyToThatSessionOnly) {
  VerboseLines lines;
  Session loud(small_cnn(), Settings().set("verbose", 1).set_verbose_sink(lines.sink()));
  Session quiet(small_cnn());
  const Tensor x = random_tensor({1, 3, 16, 16}, 3);
  run_once(quiet, x);
  EXPECT_TRUE(lines.lines_of("exec").empty());
  run_once(loud, x);
  EXPECT_EQ(lines.lines_of("exec").size(), executed_steps(*loud.plan_for({x.shape()})));
  {
    ScopedSettings off(with("verbose", 0));  // a scoped guard overrides the session's setting
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
  VerboseLines lines;
  ScopedGlobalSettings restore;
  backends::set_verbose_sink(lines.sink());  // global: the other thread writes to it too
  std::thread loud([&] {
    ScopedSettings verbose(with("verbose", 1));
    for (int i = 0; i < 5; ++i) run_once(session, x);
  });
  for (int i = 0; i < 20; ++i) run_once(session, x);
  loud.join();
  EXPECT_EQ(lines.lines_of("exec").size(), 5 * executed_steps(*session.plan_for({x.shape()})));
}

TEST_F(BackendSettingsTest, PlanLinesAtLevelTwo) {
  Session session(small_cnn());
  VerboseLines lines;
  ScopedSettings verbose(Settings().set("verbose", 2).set_verbose_sink(lines.sink()));
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
    ScopedSettings verbose(Settings().set("verbose", 1).set_verbose_sink(file_verbose_sink(path)));
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
  ScopedSettings deterministic(with("deterministic", 1));
  Session session(small_cnn());
  const Tensor x = random_tensor({1, 3, 16, 16}, 9);
  Tensor first;
  {
    ScopedThreads two(2);
    first = run_once(session, x);
    for (int i = 0; i < 20; ++i) EXPECT_TRUE(bitwise_equal(run_once(session, x), first)) << "run " << i;
  }
  ScopedThreads one(1);
  EXPECT_TRUE(bitwise_equal(run_once(session, x), first)) << "1 thread vs 2";
  for (const PlanStep& step : session.plan_for({x.shape()})->steps()) {
    if (step.record.op_type == "Conv" || step.record.op_type == "Gemm") {
      EXPECT_EQ(step.record.backend, "native");
    }
  }
}

// Where the ISA tier in effect has bf16 dot products (AVX512_BF16 or AMX), bf16 precision runs every
// Conv and Gemm in bf16, close to float32. Elsewhere (an AVX2 CPU, or KILN_ISA=avx512 / avx2, which
// the isa_* test runs set) the plan is exactly the float32 plan, each product noting why.
TEST_F(BackendSettingsTest, Bf16RunsInReducedPrecisionOrFallsBackToTheFp32Plan) {
  KILN_SKIP_UNLESS_BUILT("onednn");  // the bf16 kernels are oneDNN's
  Session session(small_cnn());
  const Tensor x = random_tensor({1, 3, 16, 16}, 11);
  const Tensor fp32 = run_once(session, x);
  std::vector<std::string> fp32_kernels;
  for (const PlanStep& step : session.plan_for({x.shape()})->steps())
    fp32_kernels.push_back(step.record.kernel);
  ScopedSettings bf16(with("precision", static_cast<int>(Precision::bf16)));
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
      EXPECT_TRUE(has_note(step.record, "precision bf16 requested, float32 used: the ISA in effect ("))
          << step.record.node_name;
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

TEST_F(BackendSettingsTest, AutotuneTimesCandidatesAndRemembersTheDecisionForTheProcess) {
  KILN_SKIP_UNLESS_BUILT("onednn");  // timing needs more than one candidate
  // An explicit count: under adapt_to_load a busy machine would plan (and time) another count too.
  ScopedThreads pinned(get_num_threads());
  std::optional<ScopedSettings> autotune(std::in_place,
                                         Settings().set("autotune", 1).set("autotune_limit", 4));
  choice_cache().clear();
  // A 24x24x24 product: BLAS and oneDNN both offer it (and oneDNN perhaps alternatives).
  GraphBuilder g({24, 24});
  Model model = g.finish({g.add("MatMul", {"x", g.weights({24, 24})})});
  Session session(model);
  const Tensor x = random_tensor({24, 24}, 2);
  const Tensor y = run_once(session, x);
  const StepRecord& record = session.plan_for({x.shape()})->steps()[0].record;
  ASSERT_GE(record.decision.timed.size(), 2u);
  double fastest = record.decision.timed[0].milliseconds;
  for (const TimedCandidate& candidate : record.decision.timed)
    fastest = std::min(fastest, candidate.milliseconds);
  bool chosen_is_fastest = false;
  for (const TimedCandidate& candidate : record.decision.timed) {
    if (candidate.kernel == record.kernel) chosen_is_fastest = candidate.milliseconds == fastest;
  }
  EXPECT_TRUE(chosen_is_fastest) << record.kernel;
  EXPECT_LE(record.decision.timed.size(), 4u);
  EXPECT_EQ(record.decision.rule, DecisionRule::autotune);
  EXPECT_FALSE(record.decision.reused);
  EXPECT_EQ(choice_cache().size(), 1u);
  // Another thread count is another key: the process times again and remembers both...
  {
    ScopedThreads other(get_num_threads() == 1 ? 2 : 1);
    run_once(session, x);
    EXPECT_FALSE(session.plan_for({x.shape()})->steps()[0].record.decision.reused);
  }
  EXPECT_EQ(choice_cache().size(), 2u);
  // ...another session of the model takes the decision without timing, and clearing forgets it.
  Session again(model);
  run_once(again, x);
  EXPECT_TRUE(again.plan_for({x.shape()})->steps()[0].record.decision.reused);
  EXPECT_EQ(choice_cache().size(), 2u);
  choice_cache().clear();
  EXPECT_EQ(choice_cache().size(), 0u);
  autotune.reset();
  EXPECT_LE(testing::max_abs_diff(run_once(again, x), y), 1e-4);
}

TEST_F(BackendSettingsTest, AutotuneLimitZeroTimesEveryCandidate) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  GraphBuilder g({24, 24});
  Model model = g.finish({g.add("MatMul", {"x", g.weights({24, 24})})});
  const Tensor x = random_tensor({24, 24}, 2);
  const auto timed = [&](int limit) {
    ScopedSettings autotune(Settings().set("autotune", 1).set("autotune_limit", limit));
    choice_cache().clear();
    Session session(model);
    run_once(session, x);
    return session.plan_for({x.shape()})->steps()[0].record.decision.timed.size();
  };
  const size_t every = timed(0);
  EXPECT_GE(every, timed(2));
  EXPECT_EQ(timed(2), 2u);
  EXPECT_GE(every, 2u);  // BLAS and oneDNN at least
}

TEST_F(BackendSettingsTest, PrimitiveCacheReportsAndClears) {
  KILN_SKIP_UNLESS_BUILT("onednn");
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
  EXPECT_TRUE(backends::info("native").available);
  EXPECT_FALSE(backends::cuda::is_built());
  EXPECT_FALSE(backends::cuda::is_available());
  // Built is what CMake configured (KILN_WITH_ONEDNN, KILN_WITH_BLAS); a backend left out is still
  // listed, unavailable, and its own calls say it was not built.
  EXPECT_EQ(backends::info("onednn").built, KILN_WITH_ONEDNN == 1);
  EXPECT_EQ(backends::info("blas").built, KILN_WITH_BLAS == 1);
  EXPECT_TRUE(backends::info("native").built);
  if (KILN_WITH_ONEDNN) {
    EXPECT_EQ(backends::info("onednn").version.rfind("2.", 0), 0u);
  } else {
    EXPECT_FALSE(backends::info("onednn").available);
    EXPECT_THROW(backends::onednn::isa(), Error);
  }
  if (KILN_WITH_BLAS) {
    EXPECT_NE(backends::blas::library().find("OpenBLAS"), std::string::npos);
  } else {
    EXPECT_FALSE(backends::info("blas").available);
    EXPECT_THROW(backends::blas::library(), Error);
  }
  ASSERT_EQ(backends::list().size(), static_cast<size_t>(kBackendCount));
  for (int i = 0; i < kBackendCount; ++i) EXPECT_EQ(backends::list()[i].name, kBackendNames[i]);
  EXPECT_THROW(backends::info("cudnn"), Error);
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
