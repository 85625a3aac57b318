#include "graph/session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/memory_limit.h"
#include "op_test_util.h"
#include "runtime/core_load.h"
#include "runtime/thread_budget.h"
#include "runtime/threads.h"
#include "settings_test_util.h"

namespace kiln {
namespace {

ValueInfo float_input(const std::string& name, std::vector<Dim> shape) {
  return ValueInfo{name, DType::f32, true, std::move(shape)};
}

Node node(std::string name, std::string op, std::vector<std::string> inputs,
          std::vector<std::string> outputs) {
  Node result;
  result.name = std::move(name);
  result.op_type = std::move(op);
  result.inputs = std::move(inputs);
  result.outputs = std::move(outputs);
  return result;
}

// x [batch, 4] -> Add(bias) -> Relu -> Identity -> out, with the nodes listed out of order.
Model relu_model() {
  Model model;
  model.opsets[""] = 13;
  Graph& graph = model.graph;
  graph.inputs = {float_input("x", {Dim{-1, "batch"}, Dim{4, ""}})};
  graph.outputs = {ValueInfo{"out", DType::f32, false, {}}};
  graph.initializers["bias"] = Tensor::from_vector<float>({1, -1, 0.5f, -0.5f}, {4});
  graph.nodes = {node("relu", "Relu", {"t"}, {"y"}), node("add", "Add", {"x", "bias"}, {"t"}),
                 node("copy", "Identity", {"y"}, {"out"})};
  return model;
}

using testing::error_of;

TEST(Session, RunsNodesInTopologicalOrderAndRemovesIdentity) {
  Session session(relu_model());
  Tensor x = Tensor::from_vector<float>({0, 0, 0, 0, -2, 2, -1, 1}, {2, 4});
  TensorMap outputs = session.run({{"x", x}});
  const Tensor& out = outputs.at("out");
  ASSERT_EQ(out.shape(), (Shape{2, 4}));
  const std::vector<float> expected = {1, 0, 0.5f, 0, 0, 1, 0, 0.5f};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_FLOAT_EQ(out.data<float>()[i], expected[i]) << i;
  auto plan = session.plan_for({{2, 4}});
  EXPECT_EQ(plan->steps().size(), 2u);
  EXPECT_EQ(plan->removed_nodes(), 1);
  EXPECT_EQ(plan->steps()[0].record.op_type, "Add");
  EXPECT_FALSE(plan->steps()[0].record.backend.empty());
}

// x [1, 256, 8, 8] -> 1x1 Conv -> 1x1 Conv: weights oneDNN packs into its blocked layout.
Model pointwise_model() {
  Model model;
  model.opsets[""] = 13;
  Graph& graph = model.graph;
  graph.inputs = {float_input("x", {Dim{1, ""}, Dim{256, ""}, Dim{8, ""}, Dim{8, ""}})};
  graph.outputs = {ValueInfo{"out", DType::f32, false, {}}};
  for (const char* name : {"w1", "w2"}) {
    std::vector<float> weights(256 * 256);
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>((i * 37 + name[1]) % 17) - 8;
    graph.initializers[name] = Tensor::from_vector<float>(weights, {256, 256, 1, 1});
  }
  graph.nodes = {node("conv1", "Conv", {"x", "w1"}, {"t"}), node("conv2", "Conv", {"t", "w2"}, {"out"})};
  return model;
}

TEST(Session, SessionsOfTheSameWeightsShareTheirPackedCopies) {
  const Model model = pointwise_model();
  Model copy = model;  // the same bytes elsewhere: sharing goes by content, not address
  for (auto& [name, tensor] : copy.graph.initializers) tensor = tensor.clone();
  std::vector<float> input(256 * 64);
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(i % 13) * 0.5f;
  const Tensor x = Tensor::from_vector<float>(input, {1, 256, 8, 8});
  const Settings settings = Settings().set("threads", 1);

  Allocator& previous = current_allocator();
  set_current_allocator(find_allocator("counting"));
  struct Restore {
    Allocator& allocator;
    ~Restore() { set_current_allocator(allocator); }
  } restore{previous};
  reset_counting_allocator_counts();
  auto first = std::make_unique<Session>(model, settings);
  const Tensor first_out = first->run({{"x", x}}).at("out");
  const size_t after_first = counting_allocator_counts().live_bytes;
  for (const PlanStep& step : first->plan_for({{1, 256, 8, 8}})->steps()) {
    if (step.record.backend != "onednn")
      GTEST_SKIP() << "conv runs on " << step.record.backend << ", which does not share packed weights";
  }
  auto second = std::make_unique<Session>(copy, settings);
  const Tensor second_out = second->run({{"x", x}}).at("out");
  const size_t added = counting_allocator_counts().live_bytes - after_first;
  const size_t weight_bytes = 2 * 256 * 256 * sizeof(float);
  // The first session's growth holds the packed weights; the second's does not.
  EXPECT_LE(added + weight_bytes, after_first) << "first " << after_first << " bytes, second " << added;
  ASSERT_EQ(first_out.shape(), second_out.shape());
  EXPECT_EQ(std::memcmp(first_out.raw_data(), second_out.raw_data(), first_out.nbytes()), 0);
  // The packed copies live as long as a session holds them, and go with the last one.
  first.reset();
  EXPECT_EQ(
      std::memcmp(second->run({{"x", x}}).at("out").raw_data(), first_out.raw_data(), first_out.nbytes()), 0);
  const size_t with_second_only = counting_allocator_counts().live_bytes;
  second.reset();
  EXPECT_LE(counting_allocator_counts().live_bytes + weight_bytes, with_second_only);
}

TEST(Session, PlansPerInputShapeAndReusesThem) {
  Session session(relu_model());
  auto first = session.plan_for({{1, 4}});
  EXPECT_EQ(session.plan_for({{1, 4}}), first);
  EXPECT_NE(session.plan_for({{3, 4}}), first);
}

TEST(Session, FoldsShapeComputationsAtPlanTime) {
  Model model;
  model.opsets[""] = 13;
  model.graph.inputs = {float_input("x", {Dim{-1, "batch"}, Dim{2, ""}, Dim{3, ""}})};
  model.graph.outputs = {ValueInfo{"y", DType::f32, false, {}}};
  model.graph.initializers["minus_one"] = Tensor::from_vector<int64_t>({-1}, {1});
  model.graph.initializers["zero"] = Tensor::from_vector<int64_t>({0}, {1});
  model.graph.nodes = {
      node("shape", "Shape", {"x"}, {"s"}),
      node("batch", "Gather", {"s", "zero"}, {"b"}),
      node("target", "Concat", {"b", "minus_one"}, {"t"}),
      node("flatten", "Reshape", {"x", "t"}, {"y"}),
  };
  model.graph.nodes[2].attributes.set("axis", testing::int_attr(0));
  Session session(std::move(model));
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3});
  TensorMap outputs = session.run({{"x", x}});
  EXPECT_EQ(outputs.at("y").shape(), (Shape{2, 6}));
  EXPECT_EQ(outputs.at("y").data<float>()[11], 12.0f);
  auto plan = session.plan_for({{2, 2, 3}});
  EXPECT_EQ(plan->folded_nodes(), 3);
  ASSERT_EQ(plan->steps().size(), 1u);
  EXPECT_EQ(plan->steps()[0].record.op_type, "Reshape");
  // The output is a view of the caller's input: it must come back as a copy.
  EXPECT_NE(outputs.at("y").raw_data(), x.raw_data());
}

// A constant blown up far beyond its inputs (the fuzzer's case: a Pad of a few floats to 7.6 GB) is
// not folded: planning would allocate it. It runs as a step, with the right values.
TEST(Session, LeavesConstantsBlownUpBeyondTheFoldAllowanceAsSteps) {
  Model model;
  model.opsets[""] = 13;
  model.graph.inputs = {float_input("x", {Dim{1, ""}})};
  model.graph.outputs = {ValueInfo{"y", DType::f32, false, {}}};
  model.graph.initializers["c"] = Tensor::from_vector<float>({1, 2}, {2});
  model.graph.initializers["pads"] = Tensor::from_vector<int64_t>({0, int64_t{1} << 25}, {2});  // 128 MiB
  model.graph.nodes = {
      node("pad", "Pad", {"c", "pads"}, {"padded"}),
      node("sum", "ReduceSum", {"padded"}, {"total"}),
      node("add", "Add", {"total", "x"}, {"y"}),
  };
  model.graph.nodes[1].attributes.set("keepdims", testing::int_attr(0));
  Session session(std::move(model));
  TensorMap outputs = session.run({{"x", Tensor::from_vector<float>({10}, {1})}});
  EXPECT_EQ(outputs.at("y").data<float>()[0], 13.0f);
  auto plan = session.plan_for({Shape{1}});
  EXPECT_EQ(plan->folded_nodes(), 0);
  ASSERT_FALSE(plan->steps().empty());
  EXPECT_EQ(plan->steps()[0].record.op_type, "Pad");
}

// Planning refuses a value larger than its memory limit, naming the node; the model fuzzer sets
// the limit below its own.
TEST(Session, RefusesValuesLargerThanThePlanningMemoryLimit) {
  Model model;
  model.opsets[""] = 13;
  model.graph.inputs = {float_input("x", {Dim{-1, "batch"}, Dim{1024, ""}})};
  model.graph.outputs = {ValueInfo{"y", DType::f32, false, {}}};
  model.graph.nodes = {node("relu", "Relu", {"x"}, {"y"})};
  Session session(std::move(model));
  set_planning_memory_limit(1 << 20);
  EXPECT_NO_THROW(session.plan_for({Shape{256, 1024}}));  // exactly 1 MiB
  try {
    session.plan_for({Shape{257, 1024}});
    ADD_FAILURE() << "a 1028 KiB value planned under a 1 MiB limit";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("Relu output 0 of shape [257, 1024]"), std::string::npos)
        << error.what();
  }
  set_planning_memory_limit(0);
  EXPECT_NO_THROW(session.plan_for({Shape{257, 1024}}));
}

TEST(Session, RejectsBadInputsNamingThem) {
  Session session(relu_model());
  Tensor good = Tensor::zeros(DType::f32, {1, 4});
  EXPECT_NE(error_of([&] { session.run({}); }).find("missing input 'x'"), std::string::npos);
  EXPECT_NE(error_of([&] {
              session.run({{"x", good}, {"nosuch", good}});
            }).find("unknown input 'nosuch'"),
            std::string::npos);
  const std::string rank = error_of([&] { session.run({{"x", Tensor::zeros(DType::f32, {4})}}); });
  EXPECT_NE(rank.find("rank 2"), std::string::npos) << rank;
  const std::string shape = error_of([&] { session.run({{"x", Tensor::zeros(DType::f32, {1, 5})}}); });
  EXPECT_NE(shape.find("[batch, 4]"), std::string::npos) << shape;
  const std::string dtype = error_of([&] { session.run({{"x", Tensor::zeros(DType::f64, {1, 4})}}); });
  EXPECT_NE(dtype.find("float32"), std::string::npos) << dtype;
  EXPECT_NE(dtype.find("float64"), std::string::npos) << dtype;
}

TEST(Session, RejectsMalformedGraphs) {
  Model cyclic = relu_model();
  cyclic.graph.nodes[1].inputs[0] = "y";  // add reads relu's output, relu reads add's
  EXPECT_NE(error_of([&] {
              Session(std::move(cyclic)).run({{"x", Tensor::zeros(DType::f32, {1, 4})}});
            }).find("cycle"),
            std::string::npos);

  Model dangling = relu_model();
  dangling.graph.nodes[0].inputs[0] = "ghost";
  const std::string message = error_of([&] {
    Session(std::move(dangling)).run({{"x", Tensor::zeros(DType::f32, {1, 4})}});
  });
  EXPECT_NE(message.find("'ghost'"), std::string::npos) << message;
  EXPECT_NE(message.find("node 'relu'"), std::string::npos) << message;

  Model twice = relu_model();
  twice.graph.nodes[0].outputs[0] = "t";
  EXPECT_NE(error_of([&] {
              Session(std::move(twice)).run({{"x", Tensor::zeros(DType::f32, {1, 4})}});
            }).find("also produced"),
            std::string::npos);
}

TEST(Session, UnknownOpNamesOpNodeAndOpset) {
  Model model = relu_model();
  model.graph.nodes[0].op_type = "FrobnicateX";
  const std::string message = error_of([&] {
    Session(std::move(model)).run({{"x", Tensor::zeros(DType::f32, {1, 4})}});
  });
  EXPECT_NE(message.find("FrobnicateX"), std::string::npos) << message;
  EXPECT_NE(message.find("node 'relu'"), std::string::npos) << message;
  EXPECT_NE(message.find("opset 13"), std::string::npos) << message;
}

// Found by the model-loading fuzzer: a node declaring more outputs than its op has hit an assertion.
TEST(Session, NodeWithTooManyOutputsIsAnError) {
  Model model = relu_model();
  model.graph.nodes[0].outputs.push_back("extra");
  const std::string message = error_of([&] {
    Session(std::move(model)).run({{"x", Tensor::zeros(DType::f32, {1, 4})}});
  });
  EXPECT_NE(message.find("declares 2 outputs"), std::string::npos) << message;
}

class CountingObserver : public Observer {
 public:
  void on_step_begin(const Plan&, size_t) override { ++begins; }
  void on_step_end(const Plan& plan, size_t step) override {
    ops.push_back(plan.steps()[step].record.op_type);
  }
  int begins = 0;
  std::vector<std::string> ops;
};

TEST(Session, ObserversSeeEveryStep) {
  Session session(relu_model());
  CountingObserver observer;
  session.add_observer(&observer);
  session.run({{"x", Tensor::zeros(DType::f32, {1, 4})}});
  EXPECT_EQ(observer.begins, 2);
  EXPECT_EQ(observer.ops, (std::vector<std::string>{"Add", "Relu"}));
  session.remove_observer(&observer);
  session.run({{"x", Tensor::zeros(DType::f32, {1, 4})}});
  EXPECT_EQ(observer.begins, 2);
}

TEST(Session, ConcurrentRunsShareOnePlanSafely) {
  Session session(relu_model());
  constexpr int kThreads = 4;
  constexpr int kRunsPerThread = 25;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      try {
        for (int run = 0; run < kRunsPerThread; ++run) {
          const float value = static_cast<float>(t * 100 + run);
          Tensor x = Tensor::from_vector<float>({value, value, value, value}, {1, 4});
          const Tensor out = session.run({{"x", x}}).at("out");
          const float expected[] = {value + 1, value - 1, value + 0.5f, value - 0.5f};
          for (int i = 0; i < 4; ++i) mismatches[t] += out.data<float>()[i] != std::max(expected[i], 0.0f);
        }
      } catch (const Error&) {
        mismatches[t] = -1;  // a run failed
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

TEST(Session, RunAsyncMatchesRunAndCarriesErrors) {
  Session session(relu_model());
  Tensor x = Tensor::from_vector<float>({0, 0, 0, 0, -2, 2, -1, 1}, {2, 4});
  const Tensor expected = session.run({{"x", x}}).at("out");
  Future<TensorMap> future = session.run_async({{"x", x}});
  const Tensor out = future.wait().at("out");
  ASSERT_EQ(out.shape(), expected.shape());
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out.data<float>()[i], expected.data<float>()[i]);
  // Bad inputs are reported through the future, with the message run() gives.
  Future<TensorMap> bad = session.run_async({{"y", x}});
  EXPECT_NE(error_of([&] { bad.wait(); }).find("unknown input 'y'"), std::string::npos);
}

TEST(Session, RunAsyncKeepsInputsAliveUntilTheRunEnds) {
  Session session(relu_model());
  std::vector<Future<TensorMap>> futures;
  std::vector<std::weak_ptr<int>> keep_alive_watch;
  for (int i = 0; i < 32; ++i) {
    // The future holds the only reference to this input and to the keep-alive.
    const float value = static_cast<float>(i);
    auto keep_alive = std::make_shared<int>(i);
    keep_alive_watch.push_back(keep_alive);
    futures.push_back(session.run_async(
        {{"x", Tensor::from_vector<float>({value, value, value, value}, {1, 4})}}, keep_alive));
  }
  for (int i = 0; i < 32; ++i) {
    const Tensor out = futures[i].wait().at("out");
    EXPECT_EQ(out.data<float>()[0], static_cast<float>(i) + 1) << i;
    EXPECT_TRUE(keep_alive_watch[i].expired()) << i;
  }
}

// Records the thread count each step runs with (what parallel_for and oneDNN read) and the threads
// leased by all runs at that moment.
class TeamObserver final : public Observer {
 public:
  void on_step_begin(const Plan&, size_t) override {
    std::lock_guard lock(mutex_);
    counts.push_back(intra_op_threads());
    max_leased = std::max(max_leased, leased_threads());
  }
  std::mutex mutex_;
  std::vector<int> counts;
  int max_leased = 0;
};

TEST(Session, ConcurrentCallersStayWithinTheThreadBudget) {
  const int saved_budget = get_thread_budget();
  set_thread_budget(2);
  Session session(relu_model(), Settings().set("threads", 2));
  TeamObserver observer;
  session.add_observer(&observer);
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int run = 0; run < 20; ++run) session.run({{"x", Tensor::zeros(DType::f32, {1, 4})}});
    });
  }
  for (std::thread& caller : callers) caller.join();
  set_thread_budget(saved_budget);
  EXPECT_LE(observer.max_leased, 2);
  ASSERT_EQ(observer.counts.size(), 3u * 20 * 2);
  for (int count : observer.counts) EXPECT_TRUE(count == 1 || count == 2) << count;
}

TEST(Session, VerboseSaysWhenTheBudgetGaveARunFewerThreads) {
  const int saved_budget = get_thread_budget();
  set_thread_budget(2);
  Session session(relu_model());
  TeamObserver observer;
  session.add_observer(&observer);
  testing::VerboseLines lines;
  {
    const ThreadLease other_run(1);  // another run holding one of the two threads
    const ScopedSettings verbose(
        Settings().set("verbose", 1).set("threads", 2).set_verbose_sink(lines.sink()));
    session.run({{"x", Tensor::zeros(DType::f32, {1, 4})}});
  }
  set_thread_budget(saved_budget);
  const std::vector<std::string> runs = lines.starting("kiln_verbose,run,");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0], "kiln_verbose,run,threads:1,asked:2,budget:2,held by other runs:1,waited:0");
  // Its steps ran on the one thread it got.
  ASSERT_FALSE(observer.counts.empty());
  for (int count : observer.counts) EXPECT_EQ(count, 1);
}

// Runs at the default thread count give up the cores other processes keep busy; a count anybody
// chose, or adapt_to_load off, keeps every thread.
TEST(Session, RunsAtTheDefaultCountAdaptToCoresBusyElsewhere) {
  if (available_cores() < 2) GTEST_SKIP() << "one core: nothing to give up";
  if (!current_settings().threads_are_default())
    GTEST_SKIP() << "the environment sets the thread count (" << num_threads_source() << ")";
  Session session(relu_model());
  TeamObserver observer;
  session.add_observer(&observer);
  testing::VerboseLines lines;
  const ScopedFakeCoreLoad load(1.0);
  // adapt_to_load on first (the suite runs with KILN_ADAPT_TO_LOAD=0), then each case's changes.
  const auto run_with = [&](const Settings& changes) {
    observer.counts.clear();
    Settings settings = Settings().set("adapt_to_load", 1).set("verbose", 1).set_verbose_sink(lines.sink());
    settings.overlay(changes);
    const ScopedSettings scope(settings);
    session.run({{"x", Tensor::zeros(DType::f32, {1, 4})}});
    EXPECT_FALSE(observer.counts.empty());
    return observer.counts;
  };
  const int cores = available_cores();
  for (int count : run_with(Settings())) EXPECT_EQ(count, cores - 1);
  std::vector<std::string> runs = lines.starting("kiln_verbose,run,");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_NE(runs[0].find(str_cat("threads:", cores - 1, ",asked:", cores, ",free cores:", cores - 1,
                                 ",busy elsewhere:1.00 cores")),
            std::string::npos)
      << runs[0];
  for (int count : run_with(Settings().set("adapt_to_load", 0))) EXPECT_EQ(count, cores);
  for (int count : run_with(Settings().set("threads", cores))) EXPECT_EQ(count, cores);
  EXPECT_EQ(lines.starting("kiln_verbose,run,").size(), 1u) << "runs that kept their threads say nothing";
}

TEST(CoreLoad, CoresTextIsTheSameInAnyLocale) {
  EXPECT_EQ(cores_text(0.984), "0.98");
  EXPECT_EQ(cores_text(1.0), "1.00");
  EXPECT_EQ(cores_text(2.05), "2.05");
  EXPECT_EQ(cores_text(-0.2), "0.00");
}

TEST(CoreLoad, ACoreIsLostFromHalfACoresWorkElsewhere) {
  EXPECT_EQ(free_cores(2, 0.0), 2);
  EXPECT_EQ(free_cores(2, 0.49), 2);
  EXPECT_EQ(free_cores(2, 0.5), 1);
  EXPECT_EQ(free_cores(2, 7.0), 1);  // at least one
  EXPECT_EQ(free_cores(8, 2.6), 5);
  EXPECT_EQ(free_cores(4, -0.3), 4);  // clock skew between the two sources
}

TEST(CoreLoad, BusyTimeCountsTheProcessCpusFromProcStat) {
  // user nice system idle iowait irq softirq steal guest guest_nice, in ticks of 1/100 s.
  const std::string proc_stat =
      "cpu  900 0 300 5000 100 0 0 0 0 0\n"
      "cpu0 100 10 20 1000 50 5 5 10 40 0\n"
      "cpu1 200 0 0 2000 50 0 0 0 0 0\n"
      "cpu2 400 0 100 1000 0 0 0 0 0 0\n";
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(0, &cpus);
  CPU_SET(2, &cpus);
  // cpu0: 100+10+20+5+5+10 (idle, iowait and guest, already in user, left out); cpu2: 400+100.
  const std::optional<double> busy = busy_seconds_from_proc_stat(proc_stat, cpus, 100);
  ASSERT_TRUE(busy.has_value());
  EXPECT_DOUBLE_EQ(*busy, (150.0 + 500.0) / 100.0);
  CPU_ZERO(&cpus);
  CPU_SET(5, &cpus);
  EXPECT_FALSE(busy_seconds_from_proc_stat(proc_stat, cpus, 100).has_value()) << "no line for cpu5";
  CPU_SET(0, &cpus);
  EXPECT_FALSE(busy_seconds_from_proc_stat("cpu0 garbage\nintr 1 2 3\n", cpus, 100).has_value());
}

// Busy times summed over different CPUs do not subtract: a window across a change of the affinity
// mask measures nothing, and the next one measures again.
TEST(CoreLoad, AChangeOfAffinityStartsAFreshWindow) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  struct RestoreAffinity {  // also when an assertion below returns early
    cpu_set_t mask;
    ~RestoreAffinity() { sched_setaffinity(0, sizeof(mask), &mask); }
  } restore{all};
  if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "one core: no other mask to change to";
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &all)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  core_load();
  std::this_thread::sleep_for(kLoadWindow + std::chrono::milliseconds(10));
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const CoreLoad across = core_load();
  std::this_thread::sleep_for(kLoadWindow + std::chrono::milliseconds(10));
  const CoreLoad after = core_load();
  EXPECT_FALSE(across.measured);
  EXPECT_EQ(across.free_cores, 1);
  EXPECT_TRUE(after.measured);
  EXPECT_EQ(after.cores, 1);
}

TEST(CoreLoad, MeasuresThisMachine) {
  core_load();
  std::this_thread::sleep_for(kLoadWindow + std::chrono::milliseconds(10));  // a window closes
  CoreLoad load = core_load();
  if (!load.measured) {  // the window that just closed started under another affinity mask
    std::this_thread::sleep_for(kLoadWindow + std::chrono::milliseconds(10));
    load = core_load();
  }
  EXPECT_TRUE(load.readable);
  EXPECT_TRUE(load.measured);
  EXPECT_EQ(load.cores, available_cores());
  EXPECT_GE(load.free_cores, 1);
  EXPECT_LE(load.free_cores, load.cores);
  EXPECT_GE(load.busy_elsewhere, 0.0);
}

}  // namespace
}  // namespace kiln
