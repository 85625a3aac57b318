// kiln tidy's runtime patterns on small kiln traces built event by event, each made to match and to
// miss by one condition: the data flow between steps, the thread sweep, idle gaps and planning in
// steady state, and what estimate_savings says when it cannot measure. (Real runs, the CLI and
// measured estimates: tests/python/test_tidy_kiln.py.)
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "tidy/kiln_patterns.h"
#include "tidy/report.h"
#include "tidy/step_flow.h"
#include "tidy/time_breakdown.h"
#include "tidy/trace_diff.h"
#include "tidy/user_patterns.h"
#include "tidy_runner/estimate.h"

namespace kiln {
namespace {

using profiler::EventKind;
using profiler::Trace;
using profiler::TraceEvent;

constexpr int64_t kUs = 1000;

// A kiln trace made by hand: events appended in start order (parents first), ids 1..N.
class TraceBuilder {
 public:
  TraceBuilder() {
    trace_.source = "kiln";
    trace_.facts = {{"cores", "2"}, {"cpu_extensions", "AVX2 FMA"}};
    trace_.threads = {{100, "main"}, {101, "second"}};
  }
  uint64_t run(int64_t start_us, int64_t end_us, uint32_t thread = 0, int threads = 2) {
    TraceEvent& event = add(EventKind::run, "run", 0, start_us, end_us, thread);
    event.threads = threads;
    event.settings = "onednn,blas,native;threads=2";
    return event.id;
  }
  uint64_t plan(int64_t start_us, int64_t end_us) {
    TraceEvent& event = add(EventKind::plan, "plan", 0, start_us, end_us, 0);
    event.input_shapes = {{2, 3, 8, 8}};
    return event.id;
  }
  // A step of `run` reading `inputs` and writing `outputs` (value names).
  TraceEvent& step(uint64_t run, const std::string& op, const std::string& node, int64_t start_us,
                   int64_t end_us, std::vector<std::string> inputs, std::vector<std::string> outputs,
                   const std::string& kernel, int threads = 2) {
    const TraceEvent& parent = trace_.events[run - 1];
    TraceEvent& event =
        add(op == "Reorder" ? EventKind::reorder : EventKind::step, op, run, start_us, end_us, parent.thread);
    event.step = steps_++;
    event.node = node;
    event.backend = kernel.substr(0, kernel.find(':'));
    event.kernel = kernel;
    event.threads = threads;
    event.inputs = std::move(inputs);
    event.outputs = std::move(outputs);
    event.input_dtypes.assign(event.inputs.size(), "float32");
    event.input_layouts.assign(event.inputs.size(), "plain");
    event.output_layouts.assign(event.outputs.size(), "plain");
    return event;
  }
  Trace& trace() { return trace_; }

 private:
  TraceEvent& add(EventKind kind, const std::string& name, uint64_t parent, int64_t start_us, int64_t end_us,
                  uint32_t thread) {
    TraceEvent event;
    event.id = trace_.events.size() + 1;
    event.parent_id = parent;
    event.kind = kind;
    event.name = name;
    event.thread = thread;
    event.start_ns = start_us * kUs;
    event.end_ns = end_us * kUs;
    trace_.events.push_back(std::move(event));
    return trace_.events.back();
  }
  Trace trace_;
  int steps_ = 0;
};

std::vector<std::string> details(const tidy::TidyReport& report, const std::string& pattern) {
  std::vector<std::string> found;
  for (const tidy::TidyMatch& match : report.matches) {
    if (match.pattern == pattern) found.push_back(match.detail);
  }
  return found;
}

TEST(StepFlow, ProducersAndReadersWithinEachRun) {
  TraceBuilder builder;
  const uint64_t first = builder.run(0, 100);
  builder.step(first, "Conv", "conv", 0, 10, {"input", "w"}, {"c"}, "onednn:conv");
  builder.step(first, "Relu", "relu", 10, 20, {"c"}, {"r"}, "native:relu");
  builder.step(first, "Add", "add", 20, 30, {"c", "r"}, {"output"}, "native:add");
  const uint64_t second = builder.run(200, 300);
  builder.step(second, "Relu", "relu", 210, 220, {"c"}, {"r"}, "native:relu");  // "c" not written in this run
  const tidy::EventTree tree(builder.trace());
  const tidy::StepFlow flow(tree);
  EXPECT_EQ(flow.producer(1, 0), tidy::kNoEvent);  // a graph input
  EXPECT_EQ(flow.producer(2, 0), 1u);
  EXPECT_EQ(flow.producer(3, 1), 2u);
  EXPECT_EQ(std::vector<tidy::EventIndex>(flow.readers(1, 0).begin(), flow.readers(1, 0).end()),
            (std::vector<tidy::EventIndex>{2, 3}));
  EXPECT_TRUE(flow.readers(3, 0).empty());  // the graph output
  EXPECT_EQ(flow.run_of(3), 0u);
  EXPECT_EQ(flow.producer(5, 0), tidy::kNoEvent);  // runs do not share values
  EXPECT_EQ(flow.run_of(5), 4u);
}

TEST(KilnPatterns, ReordersFallbacksAndChains) {
  TraceBuilder builder;
  const uint64_t run = builder.run(0, 1000);
  builder.step(run, "Reorder", "input:to_nhwc", 0, 10, {"input"}, {"input:nhwc"},
               "onednn:reorder_plain_to_nhwc");
  builder.step(run, "Conv", "conv", 10, 100, {"input:nhwc", "w"}, {"c"}, "onednn:conv");
  builder.step(run, "Reorder", "c:to_plain", 100, 110, {"c"}, {"c:plain"}, "onednn:reorder_nhwc_to_plain");
  TraceEvent& hard =
      builder.step(run, "HardSigmoid", "hs", 110, 200, {"c:plain"}, {"h"}, "native:hardsigmoid");
  hard.refusals = {{"onednn", "", RefusalKind::no_kernel, "no oneDNN kernel for HardSigmoid"}};
  TraceEvent& mul = builder.step(run, "Mul", "mul", 200, 300, {"h", "h"}, {"m"}, "native:mul");
  mul.refusals = {{"onednn", "", RefusalKind::disabled, "backend disabled"},
                  {"blas", "", RefusalKind::no_kernel, "no BLAS kernel for Mul"}};
  builder.step(run, "Reorder", "m:free", 300, 301, {"m"}, {"m:view"}, "onednn:reorder_free_view");
  builder.step(run, "Relu", "relu", 301, 400, {"m:view"}, {"output"}, "native:relu");
  const tidy::TidyReport report = tidy::analyse(builder.trace(), "t");

  // Between Conv and HardSigmoid; not the graph input's conversion; not a free view.
  EXPECT_EQ(
      details(report, tidy::kReorderBetweenSteps),
      std::vector<std::string>{"step 2 'c:to_plain' (Reorder, onednn:reorder_nhwc_to_plain) converts plain "
                               "to plain between step 1 'conv' (Conv, onednn:conv) and step 3 'hs' "
                               "(HardSigmoid, native:hardsigmoid)"});
  // HardSigmoid has no oneDNN kernel at all: not a fallback. Mul does, and was refused.
  EXPECT_EQ(details(report, tidy::kNativeFallback),
            std::vector<std::string>{"step 4 'mul' (Mul, native:mul): onednn: backend disabled"});
  // hs after conv (through the Reorder); Relu after Mul (through the free view); Mul reads h twice,
  // its only reader still.
  EXPECT_EQ(details(report, tidy::kUnfusedElementwise).size(), 3u);
  // The trace's CPU has no bf16: not evaluated, and why.
  EXPECT_EQ(report.count(tidy::kFP32OnBF16CPU), 0u);
  bool said_why = false;
  for (const tidy::PatternNote& note : report.not_evaluated) {
    said_why = said_why || (note.pattern == tidy::kFP32OnBF16CPU &&
                            note.text.find("no bf16 arithmetic (extensions: AVX2 FMA)") != std::string::npos);
  }
  EXPECT_TRUE(said_why);
}

TEST(KilnPatterns, ThreadsOfStepsRunningAtOnceAgainstTheCores) {
  TraceBuilder builder;
  const uint64_t first = builder.run(0, 100, 0);
  const uint64_t second = builder.run(50, 150, 1);
  builder.step(first, "Conv", "a", 0, 40, {"input"}, {"x"}, "onednn:conv");     // alone: 2 threads
  builder.step(first, "Conv", "b", 40, 100, {"x"}, {"y"}, "onednn:conv");       // with c: 4 > 2
  builder.step(second, "Conv", "c", 60, 90, {"input"}, {"x"}, "onednn:conv");   // with b
  builder.step(second, "Conv", "d", 100, 150, {"x"}, {"y"}, "onednn:conv", 1);  // b ended at 100
  const tidy::TidyReport report = tidy::analyse(builder.trace(), "t");
  const std::vector<std::string> over = details(report, tidy::kOversubscription);
  ASSERT_EQ(over.size(), 2u);
  EXPECT_NE(over[0].find("'b'"), std::string::npos);
  EXPECT_NE(over[0].find("asking for 4 threads ran at once on 2 cores"), std::string::npos) << over[0];
  EXPECT_NE(over[1].find("'c'"), std::string::npos);
}

TEST(KilnPatterns, TinyStepsOnSeveralThreadsOnlyWhereTheyAreMuchOfTheRun) {
  TraceBuilder builder;
  const uint64_t tiny = builder.run(0, 100);
  for (int i = 0; i < 10; ++i)
    builder.step(tiny, "Add", "add" + std::to_string(i), i * 10, i * 10 + 9, {"v"}, {"w"}, "onednn:add");
  const uint64_t big = builder.run(1000, 3000);
  builder.step(big, "Conv", "conv", 1000, 2900, {"input"}, {"x"}, "onednn:conv");
  builder.step(big, "Add", "add", 2900, 2910, {"x"}, {"y"}, "onednn:add");  // 10 us: 0.5% of its run
  const tidy::TidyReport report = tidy::analyse(builder.trace(), "t");
  EXPECT_EQ(report.count(tidy::kTinyOpMultithreaded), 10u);
  // The threshold is the caller's: at 9 us the first run's 9 us steps are not tiny; at 1 ms the second
  // run's Add is, but it is still 0.5% of its run; at 2 ms its 1.9 ms Conv is tiny too.
  const auto tiny_under = [&](int64_t us) {
    tidy::TidyOptions options;
    options.tiny_step_us = us;
    return tidy::analyse(builder.trace(), "t", options).count(tidy::kTinyOpMultithreaded);
  };
  EXPECT_EQ(tiny_under(9), 0u);
  EXPECT_EQ(tiny_under(10), 10u);
  EXPECT_EQ(tiny_under(1000), 10u);
  EXPECT_EQ(tiny_under(2000), 12u);
  EXPECT_THROW(tiny_under(0), Error);
  EXPECT_THROW(tiny_under(tidy::tidy_option("tiny_step_us").max + 1), Error);
}

TEST(KilnPatterns, PlanningInSteadyStateAndIdleGaps) {
  TraceBuilder builder;
  builder.plan(0, 50);  // before the first run: warm-up, not a miss
  builder.run(50, 150);
  builder.run(160, 260);       // 10 us gap
  builder.plan(300, 700);      // after runs: a miss; planning is not idle time
  builder.run(700, 800);       // 40 us after the run before, 0 after the planning: no gap
  builder.run(1000, 1100, 1);  // on another thread, 200 us after everything before it ended: a gap
  builder.run(1050, 1150, 0);  // started while the other ran: no gap
  const tidy::TidyReport report = tidy::analyse(builder.trace(), "t");
  const std::vector<std::string> misses = details(report, tidy::kPlanCacheMiss);
  ASSERT_EQ(misses.size(), 1u);
  EXPECT_NE(misses[0].find("planning for inputs [2, 3, 8, 8]"), std::string::npos) << misses[0];
  EXPECT_NE(misses[0].find("took 0.400 ms"), std::string::npos) << misses[0];
  EXPECT_EQ(details(report, tidy::kIdleGap),
            std::vector<std::string>{
                "run 6 started 0.200 ms after kiln's previous work ended; the run before it took 0.100 ms"});
}

TEST(KilnPatterns, EstimatesSayWhyWhenTheyCannotMeasure) {
  TraceBuilder builder;
  builder.run(0, 100);
  builder.plan(200, 600);
  builder.run(600, 700);
  const uint64_t run = builder.trace().events.back().id;
  builder.step(run, "Conv", "conv", 600, 650, {"input"}, {"c"}, "onednn:conv");
  builder.step(run, "Reorder", "c:to_plain", 650, 660, {"c"}, {"p"}, "onednn:reorder_nhwc_to_plain");
  builder.step(run, "Relu", "relu", 660, 700, {"p"}, {"output"}, "native:relu");
  tidy::TidyReport report = tidy::analyse(builder.trace(), "t");
  tidy::estimate_savings(report, builder.trace(), {});
  std::map<std::string, const tidy::PatternEstimate*> estimates;
  for (const tidy::PatternEstimate& estimate : report.estimates) estimates[estimate.pattern] = &estimate;
  // Planning needs no model: its recorded time is what warming up every shape takes out.
  ASSERT_TRUE(estimates.count(tidy::kPlanCacheMiss));
  EXPECT_NEAR(estimates[tidy::kPlanCacheMiss]->saving_ms.value_or(-1), 0.4, 1e-9);
  // The rest need the model.
  ASSERT_TRUE(estimates.count(tidy::kReorderBetweenSteps));
  EXPECT_FALSE(estimates[tidy::kReorderBetweenSteps]->saving_ms.has_value());
  EXPECT_NE(estimates[tidy::kReorderBetweenSteps]->basis.find("no model given"), std::string::npos);
  EXPECT_NEAR(report.total_estimated_saving_ms().value_or(-1), 0.4, 1e-9);
  const std::string json = report.json();
  EXPECT_NE(json.find(R"("estimated_saving_ms": null)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("total_estimated_saving_ms": 0.4)"), std::string::npos) << json;
  EXPECT_NE(report.text().find("Total Estimated Speedup: 0.400 ms of 0.400 ms matched (all of it)"),
            std::string::npos)
      << report.text();
}

TEST(KilnPatterns, MalformedKilnTracesAreAnalysedWithoutHarm) {
  TraceBuilder builder;
  const uint64_t run = builder.run(0, 100);
  // Steps without inputs, outputs or layouts; a Reorder with nothing before it; threads near INT_MAX
  // on steps running at once; a zero-length step; a plan without settings; a step outside any run.
  TraceEvent& bare = builder.step(run, "Relu", "bare", 0, 10, {}, {}, "native:relu", 1);
  bare.refusals = {{"", "", RefusalKind::no_kernel, "nonsense"},
                   {"x", "", RefusalKind::disabled, ": "},
                   {"", "x", RefusalKind::deterministic, ""}};
  builder.step(run, "Reorder", "lonely", 10, 20, {}, {}, "onednn:reorder_nhwc_to_plain");
  builder.step(run, "Conv", "huge_a", 20, 30, {"a"}, {"b"}, "onednn:conv", INT32_MAX);
  builder.step(run, "Conv", "huge_b", 20, 30, {"b"}, {"c"}, "onednn:conv", INT32_MAX);
  TraceEvent& empty = builder.step(run, "Conv", "empty", 30, 30, {"c"}, {"d"}, "onednn:conv");
  empty.input_dtypes.clear();
  empty.input_layouts.clear();
  builder.plan(200, 300);
  builder.trace().events.back().settings.clear();
  TraceEvent orphan = builder.trace().events.back();
  orphan.id = builder.trace().events.size() + 1;
  orphan.kind = EventKind::step;
  orphan.parent_id = 0;
  orphan.name = "Add";
  orphan.start_ns = orphan.end_ns = 400 * kUs;
  builder.trace().events.push_back(orphan);

  tidy::TidyReport report = tidy::analyse(builder.trace(), "t");
  EXPECT_EQ(report.count(tidy::kOversubscription), 2u);  // int64 sums: no overflow
  EXPECT_EQ(report.count(tidy::kReorderBetweenSteps), 0u);
  for (const tidy::TidyMatch& match : report.matches) EXPECT_FALSE(match.detail.empty()) << match.pattern;
  EXPECT_FALSE(report.text().empty());
  // Estimating without a model says so for every pattern; a report of another trace is refused.
  tidy::estimate_savings(report, builder.trace(), {});
  for (const tidy::PatternEstimate& estimate : report.estimates) EXPECT_FALSE(estimate.basis.empty());
  profiler::Trace other;
  other.source = "kiln";
  EXPECT_THROW(tidy::estimate_savings(report, other, {}), Error);
}

TEST(KilnPatterns, EstimatesOfAModelThatCannotRunSayWhy) {
  TraceBuilder builder;
  const uint64_t run = builder.run(0, 1000);
  builder.trace().events.back().input_shapes = {{1, 3, 8, 8}};
  builder.step(run, "Conv", "conv", 0, 50, {"input"}, {"c"}, "onednn:conv");
  builder.step(run, "Reorder", "c:to_plain", 50, 60, {"c"}, {"p"}, "onednn:reorder_nhwc_to_plain");
  builder.step(run, "Relu", "relu", 60, 70, {"p"}, {"output"}, "native:relu");
  builder.trace().facts.erase("cpu_extensions");
  tidy::TidyReport report = tidy::analyse(builder.trace(), "t");
  ASSERT_GT(report.count(tidy::kReorderBetweenSteps), 0u);
  tidy::estimate_savings(report, builder.trace(), {.model = "/nonexistent/model.onnx"});
  for (const tidy::PatternEstimate& estimate : report.estimates) {
    EXPECT_FALSE(estimate.saving_ms.has_value()) << estimate.pattern;
    EXPECT_NE(estimate.basis.find("could not run the model"), std::string::npos) << estimate.basis;
    EXPECT_NE(estimate.basis.find("/nonexistent/model.onnx"), std::string::npos) << estimate.basis;
  }
}

// The same fallback in three runs: one group (the pattern, its reason, the node) of three matches in
// three runs; the reason is the refusal a setting makes, not the others.
TEST(TidyReport, MatchesGroupByPatternReasonAndNode) {
  TraceBuilder builder;
  for (int r = 0; r < 3; ++r) {
    const uint64_t run = builder.run(r * 1000, r * 1000 + 900);
    TraceEvent& mul =
        builder.step(run, "Mul", "mul", r * 1000, r * 1000 + 100, {"a", "b"}, {"m"}, "native:mul");
    mul.refusals = {{"onednn", "", RefusalKind::disabled, "backend disabled"},
                    {"blas", "", RefusalKind::unsupported_shape, "rank 5"}};
  }
  const tidy::TidyReport report = tidy::analyse(builder.trace(), "t");
  std::vector<tidy::MatchGroup> fallbacks;
  for (const tidy::MatchGroup& group : report.groups()) {
    if (group.pattern == tidy::kNativeFallback) fallbacks.push_back(group);
  }
  ASSERT_EQ(fallbacks.size(), 1u);
  EXPECT_EQ(fallbacks[0].node, "mul");
  EXPECT_EQ(fallbacks[0].reason, "onednn: backend disabled");  // what the fix changes
  EXPECT_EQ(fallbacks[0].matches, 3u);
  EXPECT_EQ(fallbacks[0].runs, 3u);
  EXPECT_NEAR(fallbacks[0].time_ms, 0.3, 1e-9);
  EXPECT_NE(fallbacks[0].detail.find("blas: rank 5"), std::string::npos)
      << fallbacks[0].detail;  // all of them
  const std::string text = report.text();
  EXPECT_NE(text.find("NativeFallbackPattern: 3 matches at 1 place, 0.300 ms matched"), std::string::npos)
      << text;
  EXPECT_NE(
      text.find("  because onednn: backend disabled: 3 matches at 1 place\n    mul: 3 matches in 3 runs"),
      std::string::npos)
      << text;
  EXPECT_NE(report.json().find(R"("groups": [{"pattern": )"), std::string::npos);
}

// A user pattern's result enters the report as a built-in's does: counted, grouped, its fix kept; one
// that failed is listed with its traceback; one that names an event the trace lacks is an error.
TEST(TidyReport, UserPatternResultsAreReportedAsBuiltInsAre) {
  TraceBuilder builder;
  const uint64_t run = builder.run(0, 1000);
  builder.step(run, "Conv", "conv", 0, 500, {"x", "w"}, {"y"}, "native:conv");
  builder.step(run, "Relu", "relu", 500, 600, {"y"}, {"z"}, "native:relu");
  tidy::PatternResult slow{
      .name = "Slow Conv", .description = "A Conv over 0.4 ms", .url = "https://example.org"};
  slow.matched = {1};  // the Conv's index
  slow.messages = {"A Conv over 0.4 ms at conv"};
  slow.reasons = {"native"};
  slow.fixes = {{tidy::Fix::Kind::settings, {{"onednn_enabled", "1"}}, {}, {}, "oneDNN on"}};
  slow.summary = "Slow Conv: 1 events matched.";
  tidy::PatternResult broken{.name = "Broken"};
  broken.failure = "Traceback ...\nZeroDivisionError: division by zero";
  tidy::PatternResult skipped{.name = "Skipped", .skip = "no GPU in this trace"};
  tidy::TidyOptions options;
  options.user_patterns = {slow, broken, skipped};
  const tidy::TidyReport report = tidy::analyse(builder.trace(), "t", options);
  EXPECT_EQ(report.count("Slow Conv"), 1u);
  const auto match = std::find_if(report.matches.begin(), report.matches.end(),
                                  [](const tidy::TidyMatch& m) { return m.pattern == "Slow Conv"; });
  ASSERT_NE(match, report.matches.end());
  EXPECT_EQ(match->event_id, 2u);
  EXPECT_EQ(match->reason, "native");
  EXPECT_EQ(match->node, "conv");
  EXPECT_EQ(match->fix.kind, tidy::Fix::Kind::settings);
  EXPECT_EQ(match->fix.what, "oneDNN on");
  ASSERT_EQ(report.failed.size(), 1u);
  EXPECT_EQ(report.failed[0].pattern, "Broken");
  EXPECT_NE(report.text().find("failed: Broken raised:\nTraceback ...\nZeroDivisionError"),
            std::string::npos);
  EXPECT_NE(report.json().find(R"("failed": [{"pattern": "Broken", "traceback": )"), std::string::npos);
  bool skip_noted = false;
  for (const tidy::PatternNote& note : report.not_evaluated)
    skip_noted = skip_noted || (note.pattern == "Skipped" && note.text == "no GPU in this trace");
  EXPECT_TRUE(skip_noted);
  options.user_patterns = {slow};
  options.user_patterns[0].matched = {99};
  try {
    tidy::analyse(builder.trace(), "t", options);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("'Slow Conv' matched event index 99, the trace has 3 events"),
              std::string::npos)
        << error.what();
  }
}

// Two runs of one model before and after a backend was disabled: the switched step and the Reorder
// that appeared, largest change first; the plans' settings and step counts.
TEST(TraceDiff, SwitchesAppearancesAndPlanChangesLargestFirst) {
  TraceBuilder before;
  for (int r = 0; r < 2; ++r) {
    const uint64_t run = before.run(r * 1000, r * 1000 + 900);
    before.trace().events[run - 1].plan_steps = 2;
    before.step(run, "Conv", "conv", r * 1000, r * 1000 + 100, {"x", "w"}, {"y"}, "onednn:conv");
    before.step(run, "Relu", "relu", r * 1000 + 100, r * 1000 + 110, {"y"}, {"z"}, "onednn:eltwise");
  }
  TraceBuilder after;
  const uint64_t run = after.run(0, 900);
  after.trace().events[run - 1].settings = "blas,native;threads=2";
  after.trace().events[run - 1].plan_steps = 3;
  after.step(run, "Conv", "conv", 0, 400, {"x", "w"}, {"y"}, "native:conv");
  after.step(run, "Reorder", "y:to_plain", 400, 420, {"y"}, {"y:plain"}, "native:reorder");
  after.step(run, "Relu", "relu", 420, 430, {"y:plain"}, {"z"}, "onednn:eltwise");
  const tidy::TraceDiff diff = tidy::diff_traces(before.trace(), "a.json", after.trace(), "b.json");
  ASSERT_EQ(diff.rows.size(), 3u);
  EXPECT_EQ(diff.rows[0].node, "conv");  // +0.3 ms per run (two runs before, one after)
  EXPECT_EQ(diff.rows[0].change, "backend switched");
  EXPECT_EQ(diff.rows[0].before.backend, "onednn");
  EXPECT_EQ(diff.rows[0].after.backend, "native");
  EXPECT_NEAR(diff.rows[0].delta_ms(), 0.3, 1e-9);
  EXPECT_EQ(diff.rows[1].node, "y:to_plain");
  EXPECT_EQ(diff.rows[1].change, "appeared");
  EXPECT_EQ(diff.rows[2].change, "");  // Relu: same kernel, same time
  EXPECT_EQ(diff.before.runs, 2);
  EXPECT_NEAR(diff.before.ms, 0.11, 1e-9);
  EXPECT_EQ(diff.plan_changes,
            (std::vector<std::string>{"settings: onednn,blas,native;threads=2 -> blas,native;threads=2",
                                      "plan steps: 2 -> 3"}));
  EXPECT_NE(diff.json().find(R"("change": "backend switched", "delta_ms": 0.3)"), std::string::npos)
      << diff.json();
  EXPECT_NE(diff.text().find("[backend switched: onednn -> native]"), std::string::npos) << diff.text();
  // A kiln trace against a PyTorch one: nothing to pair.
  Trace torch;
  torch.source = "kineto_json";
  EXPECT_THROW(tidy::diff_traces(before.trace(), "a.json", torch, "t.json"), Error);
}

// Per thread: compute by backend, data movement, waiting (a run's own time) and idle; a run whose
// steps ran on two threads has a critical path through the data flow; two runs at once overlap.
TEST(TimeBreakdown, ThreadsCriticalPathAndOverlap) {
  TraceBuilder builder;
  const uint64_t run = builder.run(0, 1000);
  builder.step(run, "Conv", "a", 0, 300, {"x"}, {"a"}, "onednn:conv");
  TraceEvent& b = builder.step(run, "Conv", "b", 0, 600, {"x"}, {"b"}, "native:conv");
  b.thread = 1;  // a branch on the pool's thread
  builder.step(run, "Reorder", "a:plain", 300, 350, {"a"}, {"a:plain"}, "onednn:reorder");
  builder.step(run, "Add", "sum", 600, 700, {"a:plain", "b"}, {"y"}, "onednn:binary");
  builder.run(500, 1500, 1);  // another caller's run, overlapping the first by 500 us
  const tidy::EventTree tree(builder.trace());
  const tidy::TimeBreakdown breakdown = tidy::time_breakdown(tree, tidy::StepFlow(tree));
  EXPECT_NEAR(breakdown.span_ms, 1.5, 1e-9);
  ASSERT_EQ(breakdown.threads.size(), 2u);
  const tidy::ThreadTime& main = breakdown.threads[0];
  EXPECT_EQ(main.name, "main");
  const auto category = [](const tidy::ThreadTime& thread, const std::string& name) {
    for (const auto& [category, ms] : thread.categories) {
      if (category == name) return ms;
    }
    return -1.0;
  };
  EXPECT_NEAR(category(main, "compute: onednn"), 0.4, 1e-9);
  EXPECT_NEAR(category(main, "data movement"), 0.05, 1e-9);
  EXPECT_NEAR(category(main, "waiting"), 0.55, 1e-9);  // the run less its steps on its own thread
  EXPECT_NEAR(main.idle_ms, 0.5, 1e-9);
  EXPECT_NEAR(category(breakdown.threads[1], "compute: native"), 0.6, 1e-9);
  ASSERT_EQ(breakdown.critical_path.size(), 1u);
  EXPECT_NEAR(breakdown.critical_path[0].path_ms, 0.7, 1e-9);  // b (0.6) then sum (0.1)
  EXPECT_EQ(breakdown.critical_path[0].steps, (std::vector<std::string>{"b", "sum"}));
  EXPECT_EQ(breakdown.overlap.most_at_once, 2);
  EXPECT_NEAR(breakdown.overlap.overlapped_ms, 0.5, 1e-9);
  EXPECT_NEAR(breakdown.overlap.mean_in_flight, 2.0 / 1.5, 1e-9);
  EXPECT_NE(breakdown.svg().find("<title>compute: native: 0.600 ms</title>"), std::string::npos);
}

}  // namespace
}  // namespace kiln
