// The profiler (core/events.h records, profiler/ reads): the event tree is exact (every step of a
// run present once, under its run; inter-op tasks under what queued them; annotations around what
// ran inside them), memory events add up to the arena and the outputs, grouping arithmetic, and
// nothing is recorded while no profile is.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <thread>

#include "backends/settings.h"
#include "core/events.h"
#include "graph/session.h"
#include "graph_builder.h"
#include "profiler/export.h"
#include "profiler/key_averages.h"
#include "profiler/profile.h"

namespace kiln {
namespace {

using profiler::EventKind;
using profiler::Trace;
using profiler::TraceEvent;

TensorMap demo_inputs() {
  return {{"input", testing::random_tensor({1, 3, 64, 64}, 7)}};
}

// The steps each run executed, as observers see them (the witness the tree is checked against).
class StepLog final : public Observer {
 public:
  void on_run_begin(const Plan&) override {
    std::lock_guard lock(mutex_);
    runs.emplace_back();
  }
  void on_step_begin(const Plan&, size_t step) override {
    std::lock_guard lock(mutex_);
    runs.back().push_back(static_cast<int>(step));
  }
  std::vector<std::vector<int>> runs;

 private:
  std::mutex mutex_;
};

std::vector<const TraceEvent*> of_kind(const Trace& trace, EventKind kind) {
  std::vector<const TraceEvent*> found;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == kind) found.push_back(&event);
  }
  return found;
}

// The run an event belongs to (its nearest run ancestor), or null.
const TraceEvent* run_of(const Trace& trace, const TraceEvent& event) {
  for (const TraceEvent* parent = trace.find(event.parent_id); parent != nullptr;
       parent = trace.find(parent->parent_id)) {
    if (parent->kind == EventKind::run) return parent;
  }
  return nullptr;
}

std::vector<int> steps_of(const Trace& trace, const TraceEvent& run) {
  std::vector<int> steps;
  for (const TraceEvent& event : trace.events) {
    if ((event.kind == EventKind::step || event.kind == EventKind::reorder) && run_of(trace, event) == &run)
      steps.push_back(event.step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

TEST(Profiler, EveryStepOfEveryRunOnceUnderItsRun) {
  Session session(KILN_DEMO_MODEL, Settings().set("threads", 1));
  const TensorMap inputs = demo_inputs();
  session.run(inputs);
  StepLog log;
  session.add_observer(&log);
  profiler::Profile profile;
  profile.start();
  for (int i = 0; i < 3; ++i) session.run(inputs);
  const Trace trace = profile.stop();
  session.remove_observer(&log);

  const std::shared_ptr<const Plan> plan = session.plan_for(std::vector<Tensor>{inputs.at("input")});
  const std::vector<const TraceEvent*> runs = of_kind(trace, EventKind::run);
  ASSERT_EQ(runs.size(), 3u);
  ASSERT_EQ(log.runs.size(), 3u);
  EXPECT_EQ(trace.unparented, 0);
  for (size_t r = 0; r < runs.size(); ++r) {
    EXPECT_EQ(runs[r]->parent_id, 0u);
    EXPECT_EQ(runs[r]->threads, 1);
    EXPECT_EQ(runs[r]->plan_steps, static_cast<int>(plan->steps().size()));
    std::vector<int> expected = log.runs[r];
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(steps_of(trace, *runs[r]), expected) << "run " << r;
  }
  for (const TraceEvent& event : trace.events) {
    EXPECT_EQ(trace.find(event.id), &event);
    if (event.kind != EventKind::step && event.kind != EventKind::reorder) continue;
    const TraceEvent* parent = trace.find(event.parent_id);
    ASSERT_NE(parent, nullptr);
    EXPECT_EQ(parent->kind, EventKind::run);  // sequential: straight under the run, on its thread
    EXPECT_EQ(parent->thread, event.thread);
    EXPECT_GE(event.start_ns, parent->start_ns);
    EXPECT_LE(event.end_ns, parent->end_ns);
    EXPECT_LT(parent->id, event.id);
    const StepRecord& record = plan->steps()[static_cast<size_t>(event.step)].record;
    EXPECT_EQ(event.name, record.op_type);
    EXPECT_EQ(event.node, record.node_name);
    EXPECT_EQ(event.kernel, record.kernel);
    EXPECT_EQ(event.input_shapes, record.input_shapes);
    EXPECT_EQ(event.kind == EventKind::reorder, record.op_type == "Reorder");
  }
}

TEST(Profiler, PlanningIsAnEventAndStepsRecordTheDataFlowAndRefusals) {
  Session session(KILN_DEMO_MODEL, Settings().set("threads", 1));
  profiler::Profile profile;
  profile.start();
  session.run(demo_inputs());  // the first run plans
  session.run(demo_inputs());  // the second does not
  const Trace trace = profile.stop();
  const std::vector<const TraceEvent*> plans = of_kind(trace, EventKind::plan);
  const std::vector<const TraceEvent*> runs = of_kind(trace, EventKind::run);
  ASSERT_EQ(plans.size(), 1u);
  ASSERT_EQ(runs.size(), 2u);
  const TraceEvent& plan = *plans[0];
  EXPECT_EQ(plan.name, "plan");
  EXPECT_LE(plan.end_ns, runs[0]->start_ns);  // planned before its run started
  EXPECT_GT(plan.duration_ns(), 0);
  EXPECT_EQ(plan.settings, runs[0]->settings);
  EXPECT_EQ(plan.plan_steps, runs[0]->plan_steps);
  EXPECT_EQ(plan.input_shapes, std::vector<Shape>{Shape({1, 3, 64, 64})});
  EXPECT_EQ(runs[0]->input_shapes, plan.input_shapes);

  // Every value a step reads is a graph input, a constant or what an earlier step of its run wrote.
  std::map<std::string, int> written;
  const auto plan_ptr = session.plan_for(std::vector<Shape>{{1, 3, 64, 64}});
  for (const Slot& slot : plan_ptr->slots()) {
    if (slot.origin != SlotOrigin::computed) written[slot.name] = -1;
  }
  for (const TraceEvent& event : trace.events) {
    if (event.kind != EventKind::step && event.kind != EventKind::reorder) continue;
    if (run_of(trace, event) != runs[0]) continue;
    ASSERT_EQ(event.inputs.size(), event.input_shapes.size()) << event.node;
    for (const std::string& input : event.inputs) {
      if (!input.empty()) {
        EXPECT_TRUE(written.count(input)) << event.node << " reads " << input;
      }
    }
    for (const std::string& output : event.outputs) written[output] = event.step;
  }

  // Why the backends before the one that took a step refused it.
  Session native(
      KILN_DEMO_MODEL,
      Settings().set("threads", 1).set_by_name("onednn_enabled", 0).set_by_name("winograd_enabled", 0));
  profile.start();
  native.run(demo_inputs());
  bool refused = false;
  for (const TraceEvent& event : profile.stop().events) {
    if (event.kind != EventKind::step || event.name != "Conv") continue;
    EXPECT_EQ(event.backend, "native");
    for (const char* backend : {"onednn", "winograd"}) {
      const Refusal disabled{backend, "", RefusalKind::disabled, "backend disabled"};
      EXPECT_NE(std::find(event.refusals.begin(), event.refusals.end(), disabled), event.refusals.end())
          << backend;
    }
    refused = true;
  }
  EXPECT_TRUE(refused);
}

TEST(Profiler, AnnotationsContainWhatRanInsideThem) {
  Session session(KILN_DEMO_MODEL, Settings().set("threads", 1));
  const TensorMap inputs = demo_inputs();
  session.run(inputs);
  Trace trace;
  {
    const profiler::ScopedProfile scope(trace);
    const profiler::RecordFunction outer("outer");
    session.run(inputs);
    {
      const profiler::RecordFunction inner("inner");
      session.run(inputs);
    }
  }
  const std::vector<const TraceEvent*> annotations = of_kind(trace, EventKind::annotation);
  ASSERT_EQ(annotations.size(), 2u);
  const TraceEvent& outer = *annotations[0];
  const TraceEvent& inner = *annotations[1];
  EXPECT_EQ(outer.name, "outer");
  EXPECT_EQ(outer.parent_id, 0u);
  EXPECT_EQ(inner.name, "inner");
  EXPECT_EQ(inner.parent_id, outer.id);
  const std::vector<const TraceEvent*> runs = of_kind(trace, EventKind::run);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0]->parent_id, outer.id);
  EXPECT_EQ(runs[1]->parent_id, inner.id);
  EXPECT_GE(runs[1]->start_ns, inner.start_ns);
  EXPECT_LE(runs[1]->end_ns, inner.end_ns);
}

TEST(Profiler, AsyncRunsSitUnderTheTaskThatRanThemAndTheTaskUnderItsCaller) {
  Session session(KILN_DEMO_MODEL, Settings().set("threads", 1));
  const TensorMap inputs = demo_inputs();
  session.run(inputs);
  Trace trace;
  {
    const profiler::ScopedProfile scope(trace);
    const profiler::RecordFunction caller("caller");
    session.run_async(inputs).wait();
  }
  const std::vector<const TraceEvent*> tasks = of_kind(trace, EventKind::interop_task);
  const std::vector<const TraceEvent*> runs = of_kind(trace, EventKind::run);
  const std::vector<const TraceEvent*> annotations = of_kind(trace, EventKind::annotation);
  ASSERT_EQ(tasks.size(), 1u);
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_EQ(annotations.size(), 1u);
  EXPECT_EQ(tasks[0]->name, "run_async");
  EXPECT_EQ(tasks[0]->parent_id, annotations[0]->id);
  EXPECT_NE(tasks[0]->thread, annotations[0]->thread);  // on the inter-op pool
  EXPECT_EQ(runs[0]->parent_id, tasks[0]->id);
  EXPECT_EQ(runs[0]->thread, tasks[0]->thread);
  EXPECT_EQ(trace.threads[tasks[0]->thread].name.rfind("kiln-interop-", 0), 0u);
  EXPECT_FALSE(steps_of(trace, *runs[0]).empty());
}

// x -> conv -> three branches -> concat: a parallel plan whose ready branches may start together.
Model branching_model() {
  testing::GraphBuilder g({1, 8, 16, 16});
  const std::string stem = g.add("Conv", {"x", g.weights({16, 8, 3, 3}), g.weights({16})},
                                 testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
  std::vector<std::string> branches;
  for (int b = 0; b < 3; ++b) {
    branches.push_back(g.add("Relu", {g.add("Conv", {stem, g.weights({16, 16, 3, 3}), g.weights({16})},
                                            testing::conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}))}));
  }
  Attributes axis;
  axis.set("axis", testing::int_attr(1));
  return g.finish({g.add("Concat", branches, axis)});
}

TEST(Profiler, ParallelModeStepsSitUnderTheirRunDirectlyOrThroughTheirTask) {
  Session session(
      branching_model(),
      Settings().set("execution_mode", static_cast<int>(ExecutionMode::parallel)).set("threads", 1));
  const TensorMap inputs{{"x", testing::random_tensor({1, 8, 16, 16}, 3)}};
  session.run(inputs);
  StepLog log;
  session.add_observer(&log);
  Trace trace;
  {
    const profiler::ScopedProfile scope(trace);
    for (int i = 0; i < 4; ++i) session.run(inputs);
  }
  session.remove_observer(&log);
  const std::vector<const TraceEvent*> runs = of_kind(trace, EventKind::run);
  ASSERT_EQ(runs.size(), 4u);
  for (size_t r = 0; r < runs.size(); ++r) {
    std::vector<int> expected = log.runs[r];
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(steps_of(trace, *runs[r]), expected) << "run " << r;
  }
  for (const TraceEvent& event : trace.events) {
    if (event.kind == EventKind::interop_task) {
      EXPECT_EQ(event.name, "parallel step");
      ASSERT_NE(trace.find(event.parent_id), nullptr);
      EXPECT_EQ(trace.find(event.parent_id)->kind, EventKind::run);
      std::vector<const TraceEvent*> ran = trace.children(event.id);
      std::erase_if(ran, [](const TraceEvent* child) { return child->kind == EventKind::memory; });
      EXPECT_EQ(ran.size(), 1u);  // the one step it ran
    }
    if (event.kind != EventKind::step && event.kind != EventKind::reorder) continue;
    const TraceEvent* parent = trace.find(event.parent_id);
    ASSERT_NE(parent, nullptr);
    EXPECT_TRUE(parent->kind == EventKind::run || parent->kind == EventKind::interop_task);
    EXPECT_EQ(parent->thread, event.thread);
  }
}

TEST(Profiler, MemoryEventsAddUpToTheArenaAndTheOutputs) {
  Session session(KILN_DEMO_MODEL, Settings().set("threads", 1));
  const TensorMap inputs = demo_inputs();
  const std::shared_ptr<const Plan> plan = session.plan_for(std::vector<Tensor>{inputs.at("input")});
  const auto arena_bytes = static_cast<int64_t>(plan->memory_plan().arena_bytes);
  ASSERT_GT(arena_bytes, 0);
  Trace trace;
  int64_t output_bytes = 0;
  {
    const profiler::ScopedProfile scope(trace);
    session.run(inputs);  // the first run creates its context: the arena is allocated inside it
    for (const auto& [name, output] : session.run(inputs))
      output_bytes += static_cast<int64_t>(output.nbytes());
  }
  const std::vector<const TraceEvent*> runs = of_kind(trace, EventKind::run);
  ASSERT_EQ(runs.size(), 2u);
  int arenas = 0;
  for (const TraceEvent* memory : of_kind(trace, EventKind::memory)) {
    if (memory->memory_tag != "arena") continue;
    ++arenas;
    EXPECT_EQ(memory->memory_bytes, arena_bytes);
    EXPECT_EQ(run_of(trace, *memory), runs[0]);
  }
  EXPECT_EQ(arenas, 1);
  for (const TraceEvent* run : runs) EXPECT_EQ(run->arena_bytes, arena_bytes);
  // The second run allocates only its outputs (freeing the first run's as it replaces them).
  EXPECT_EQ(runs[1]->allocated_bytes, output_bytes);
  EXPECT_EQ(runs[1]->peak_bytes, arena_bytes + output_bytes);
  // Each event's total is the one before plus its bytes (one thread allocates here).
  const std::vector<const TraceEvent*> memory = of_kind(trace, EventKind::memory);
  for (size_t i = 1; i < memory.size(); ++i)
    EXPECT_EQ(memory[i]->memory_total, memory[i - 1]->memory_total + memory[i]->memory_bytes) << i;
}

TEST(Profiler, NothingIsRecordedWhileNoProfileIs) {
  Session session(KILN_DEMO_MODEL, Settings().set("threads", 1));
  session.run(demo_inputs());
  EXPECT_FALSE(events::recording());
  profiler::Profile profile;
  profile.start();
  const Trace trace = profile.stop();  // start() dropped whatever was there; nothing ran since
  EXPECT_TRUE(trace.events.empty());
  session.run(demo_inputs());
  profile.start();
  EXPECT_TRUE(profile.stop().events.empty());
}

TEST(Profiler, OneProfileAtATime) {
  profiler::Profile first;
  profiler::Profile second;
  first.start();
  EXPECT_THROW(second.start(), Error);
  EXPECT_THROW(second.stop(), Error);
  first.stop();
  second.start();
  second.stop();
}

TEST(Profiler, DiscardDropsWhatCameBeforeAndKeepsRecording) {
  profiler::Profile profile;
  profile.start();
  { const profiler::RecordFunction warmup("warmup"); }
  profile.discard();
  { const profiler::RecordFunction active("active"); }
  const Trace trace = profile.stop();
  ASSERT_EQ(trace.events.size(), 1u);
  EXPECT_EQ(trace.events[0].name, "active");
}

TEST(Profiler, ChunksAndExitedThreadsLoseNoEvent) {
  profiler::Profile profile({.record_shapes = true, .profile_memory = false});
  profile.start();
  constexpr int kEvents = static_cast<int>(events::kEventsPerChunk) * 2 + 10;
  {
    const profiler::RecordFunction parent("parent");
    for (int i = 0; i < kEvents; ++i) const profiler::RecordFunction child("child");
  }
  std::thread([] { const profiler::RecordFunction gone("on an exited thread"); }).join();
  const Trace trace = profile.stop();
  ASSERT_EQ(trace.events.size(), static_cast<size_t>(kEvents) + 2);
  const uint64_t parent = trace.events[0].id;
  EXPECT_EQ(trace.events[0].name, "parent");
  int children = 0;
  for (const TraceEvent& event : trace.events) children += event.parent_id == parent ? 1 : 0;
  EXPECT_EQ(children, kEvents);
  EXPECT_EQ(trace.events.back().name, "on an exited thread");
  EXPECT_EQ(trace.threads.size(), 2u);
}

TEST(Profiler, BuffersOfExitedThreadsGoAtTheNextCollection) {
  profiler::Profile profile;
  profile.start();
  { const profiler::RecordFunction here("this thread has a buffer"); }
  const size_t before = events::thread_buffers();
  std::thread([] { const profiler::RecordFunction gone("exits"); }).join();
  EXPECT_EQ(events::thread_buffers(), before + 1);
  EXPECT_EQ(profile.stop().events.size(), 2u);
  EXPECT_EQ(events::thread_buffers(), before);
}

TEST(Profiler, PlansLiveUntilTheProfileIsReadAndNoLonger) {
  std::weak_ptr<const Plan> plan;
  std::vector<std::string> nodes;  // per plan step
  Trace trace;
  {
    profiler::Profile profile;
    profile.start();
    {
      Session session(KILN_DEMO_MODEL, Settings().set("threads", 1));
      const TensorMap inputs = demo_inputs();
      plan = session.plan_for(std::vector<Tensor>{inputs.at("input")});
      for (const PlanStep& step : plan.lock()->steps()) nodes.push_back(step.record.node_name);
      session.run(inputs);
    }
    EXPECT_FALSE(plan.expired());  // the session is gone; the profile still needs the plan
    trace = profile.stop();
  }
  EXPECT_TRUE(plan.expired());  // read: nothing holds it any more
  const std::vector<const TraceEvent*> steps = of_kind(trace, EventKind::step);
  ASSERT_FALSE(steps.empty());
  for (const TraceEvent* step : steps) EXPECT_EQ(step->node, nodes.at(static_cast<size_t>(step->step)));
}

TEST(Profiler, AnEventThatEndsUnderTheNextProfileIsNotItsEvent) {
  profiler::Profile first;
  first.start();
  std::optional<events::Scope> straddling;
  straddling.emplace(events::EventKind::annotation, events::intern("began under the first"), 0);
  EXPECT_TRUE(first.stop().events.empty());  // still open
  profiler::Profile second;
  second.start();
  straddling.reset();  // ends now, but belongs to the first profile (whose plans it may point into)
  { const profiler::RecordFunction mine("the second's own"); }
  const Trace trace = second.stop();
  ASSERT_EQ(trace.events.size(), 1u);
  EXPECT_EQ(trace.events[0].name, "the second's own");
}

TEST(Profiler, WorkersTakeTheirCallersEventAndScopesEndingOutOfOrderLeaveTheCurrentOne) {
  profiler::Profile profile;
  profile.start();
  {
    const profiler::RecordFunction outer("outer");
    const uint64_t caller = events::current_event();
    std::thread([caller] {
      const events::ScopedCurrentEvent as_caller(caller);
      const profiler::RecordFunction worker("worker");
    }).join();
    auto first = std::make_unique<events::Scope>(events::EventKind::annotation, events::intern("first"), 0);
    auto second = std::make_unique<events::Scope>(events::EventKind::annotation, events::intern("second"), 0);
    const uint64_t second_id = second->id();
    first.reset();  // out of order: the current event stays `second`
    EXPECT_EQ(events::current_event(), second_id);
    second.reset();
    EXPECT_NE(events::current_event(), second_id);
  }
  const Trace trace = profile.stop();
  std::map<std::string, const TraceEvent*> by_name;
  for (const TraceEvent& event : trace.events) by_name[event.name] = &event;
  ASSERT_EQ(by_name.size(), 4u);
  EXPECT_EQ(by_name["worker"]->parent_id, by_name["outer"]->id);
  EXPECT_NE(by_name["worker"]->thread, by_name["outer"]->thread);
  EXPECT_EQ(by_name["second"]->parent_id, by_name["first"]->id);
}

TEST(Profiler, SelfTimeIsTotalMinusChildrenOnTheSameThread) {
  Session session(KILN_DEMO_MODEL, Settings().set("threads", 1));
  const TensorMap inputs = demo_inputs();
  session.run(inputs);
  Trace trace;
  {
    const profiler::ScopedProfile scope(trace, {.record_shapes = true, .profile_memory = false});
    for (int i = 0; i < 3; ++i) session.run(inputs);
  }
  int64_t run_total = 0;
  int64_t step_total = 0;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == EventKind::run) run_total += event.duration_ns();
    if (event.kind == EventKind::step || event.kind == EventKind::reorder) step_total += event.duration_ns();
  }
  for (const profiler::GroupBy group :
       {profiler::GroupBy::op, profiler::GroupBy::node, profiler::GroupBy::backend, profiler::GroupBy::kernel,
        profiler::GroupBy::shape}) {
    const profiler::KeyAverages averages = profiler::key_averages(trace, group);
    int64_t steps_self = 0;
    int64_t calls = 0;
    const profiler::KeyAverage* run = nullptr;
    for (const profiler::KeyAverage& row : averages.rows()) {
      if (row.kind == "run") {
        run = &row;
        continue;
      }
      steps_self += row.self_ns;
      calls += row.calls;
      EXPECT_EQ(row.self_ns, row.total_ns) << row.key;  // steps have no children
    }
    ASSERT_NE(run, nullptr);
    EXPECT_EQ(run->calls, 3);
    EXPECT_EQ(run->total_ns, run_total);
    EXPECT_EQ(run->self_ns, run_total - step_total);
    EXPECT_EQ(steps_self, step_total);
    EXPECT_EQ(averages.self_ns_total(), run_total);  // one thread: self times add up to the runs
    EXPECT_EQ(calls, static_cast<int64_t>(of_kind(trace, EventKind::step).size() +
                                          of_kind(trace, EventKind::reorder).size()));
  }
  EXPECT_THROW(profiler::parse_group_by("layer"), Error);
  EXPECT_THROW(profiler::key_averages(trace).table("fastest"), Error);
  const std::string table = profiler::key_averages(trace).table("total_time", 2);
  EXPECT_NE(table.find("run"), std::string::npos);  // the largest total comes first
}

TEST(Profiler, WithoutShapesStepsKeepTheirKernelButNoShapes) {
  Session session(KILN_DEMO_MODEL, Settings().set("threads", 1));
  session.run(demo_inputs());
  Trace trace;
  {
    const profiler::ScopedProfile scope(trace, {.record_shapes = false, .profile_memory = false});
    session.run(demo_inputs());
  }
  EXPECT_FALSE(trace.shapes_recorded);
  EXPECT_TRUE(of_kind(trace, EventKind::memory).empty());
  for (const TraceEvent* step : of_kind(trace, EventKind::step)) {
    EXPECT_TRUE(step->input_shapes.empty());
    EXPECT_FALSE(step->kernel.empty());
  }
  EXPECT_EQ(profiler::chrome_trace_json(trace).find("input_shapes"), std::string::npos);
}

}  // namespace
}  // namespace kiln
