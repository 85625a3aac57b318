// Parallel execution mode (graph/step_graph.h, graph/passes/parallel.cpp, graph/executor.cpp):
// dependencies and fork-join groups, outputs equal to a sequential run's bit for bit, memory that
// independent steps never share, errors and observers from pool threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/settings.h"
#include "core/error.h"
#include "graph/session.h"
#include "graph_builder.h"

namespace kiln {
namespace {

using testing::conv_attrs;
using testing::GraphBuilder;
using testing::int_attr;
using testing::ints_attr;

Settings mode(ExecutionMode execution_mode, int threads) {
  return Settings().set("execution_mode", static_cast<int>(execution_mode)).set("threads", threads);
}

// x -> stem conv -> four branches (1x1; 1x1 then 3x3; 3x3 then relu; maxpool then 1x1) -> concat
// -> conv, plus a residual Add of the stem: an inception module with a skip connection.
Model inception_model() {
  GraphBuilder g({1, 8, 12, 12});
  const std::string stem = g.add("Relu", {g.add("Conv", {"x", g.weights({16, 8, 3, 3}), g.weights({16})},
                                                conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}))});
  const std::string b1 = g.add("Conv", {stem, g.weights({8, 16, 1, 1}), g.weights({8})},
                               conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
  const std::string b2a = g.add("Conv", {stem, g.weights({8, 16, 1, 1}), g.weights({8})},
                                conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
  const std::string b2 =
      g.add("Conv", {b2a, g.weights({8, 8, 3, 3}), g.weights({8})}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}));
  const std::string b3 = g.add("Relu", {g.add("Conv", {stem, g.weights({8, 16, 3, 3}), g.weights({8})},
                                              conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}))});
  Attributes pool;
  pool.set("kernel_shape", ints_attr({3, 3}));
  pool.set("strides", ints_attr({1, 1}));
  pool.set("pads", ints_attr({1, 1, 1, 1}));
  const std::string b4 =
      g.add("Conv", {g.add("MaxPool", {stem}, pool), g.weights({8, 16, 1, 1}), g.weights({8})},
            conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
  Attributes axis;
  axis.set("axis", int_attr(1));
  const std::string joined = g.add("Concat", {b1, b2, b3, b4}, axis);
  const std::string mixed = g.add("Conv", {joined, g.weights({16, 32, 1, 1}), g.weights({16})},
                                  conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}));
  const std::string out = g.add("Sigmoid", {g.add("Add", {mixed, stem})});
  return g.finish({out});
}

std::vector<Tensor> run_outputs(Session& session, const Tensor& x, const Settings& settings) {
  const ScopedSettings scoped(settings);
  TensorMap outputs = session.run({{"x", x}});
  std::vector<Tensor> values;
  for (const ValueInfo& info : session.outputs()) values.push_back(outputs.at(info.name));
  return values;
}

bool same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].shape() != b[i].shape() || std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].nbytes()) != 0)
      return false;
  }
  return true;
}

TEST(ParallelExecution, StepGraphFindsTheBranchesAndTheirJoin) {
  Session session(inception_model(), mode(ExecutionMode::parallel, 2));
  const std::shared_ptr<const Plan> plan = session.plan_for({{1, 8, 12, 12}});
  ASSERT_TRUE(plan->parallel());
  const StepGraph& graph = plan->step_graph();
  ASSERT_EQ(graph.size(), plan->steps().size());
  const auto step_of = [&](const std::string& node) {
    for (size_t s = 0; s < plan->steps().size(); ++s) {
      if (plan->steps()[s].record.node_name == node) return static_cast<int>(s);
    }
    ADD_FAILURE() << "no step for " << node;
    return 0;
  };
  const int stem = step_of("Conv0");
  const int branch1 = step_of("Conv2");
  const int branch2 = step_of("Conv4");
  const int concat = step_of("Concat9");
  EXPECT_TRUE(graph.precedes(stem, branch1));
  EXPECT_TRUE(graph.precedes(branch2, concat));
  EXPECT_TRUE(graph.independent(branch1, branch2));
  EXPECT_FALSE(graph.independent(stem, concat));
  // The stem has five readers (four branches and the residual Add): its group ends at that Add; the
  // branches' own group ends at the Concat.
  const std::vector<std::vector<int>> groups = graph.fork_join_groups();
  ASSERT_FALSE(groups.empty());
  const std::vector<int>& largest = groups.front();
  EXPECT_NE(std::find(largest.begin(), largest.end(), branch1), largest.end());
  EXPECT_NE(std::find(largest.begin(), largest.end(), concat), largest.end());
  EXPECT_EQ(std::find(largest.begin(), largest.end(), stem), largest.end());
  // Every group was measured and decided, and every step in it names it.
  EXPECT_FALSE(plan->parallel_groups().empty());
  for (const ParallelGroup& group : plan->parallel_groups()) {
    EXPECT_GT(group.sequential_ms, 0);
    EXPECT_GT(group.parallel_ms, 0);
    for (int s : group.steps) EXPECT_GE(plan->steps()[s].record.parallel_group, 0);
  }
}

TEST(ParallelExecution, OutputsEqualASequentialRunBitForBit) {
  Session session(inception_model());
  const Tensor x = testing::random_tensor({1, 8, 12, 12}, 3);
  for (int threads : {1, 2, 3}) {
    const std::vector<Tensor> sequential = run_outputs(session, x, mode(ExecutionMode::sequential, threads));
    for (int run = 0; run < 30; ++run) {
      const std::vector<Tensor> parallel = run_outputs(session, x, mode(ExecutionMode::parallel, threads));
      ASSERT_TRUE(same_bits(sequential, parallel)) << "threads " << threads << ", run " << run;
    }
  }
}

TEST(ParallelExecution, IndependentStepsNeverShareMemory) {
  Session session(inception_model(), mode(ExecutionMode::parallel, 2));
  const std::shared_ptr<const Plan> plan = session.plan_for({{1, 8, 12, 12}});
  const MemoryPlan& memory = plan->memory_plan();
  const StepGraph& graph = plan->step_graph();
  // Which steps use each placed block (its root slot).
  std::vector<std::vector<int>> users(plan->slots().size());
  std::vector<size_t> bytes(plan->slots().size(), 0);
  for (size_t s = 0; s < plan->steps().size(); ++s) {
    const PlanStep& step = plan->steps()[s];
    for (size_t o = 0; o < step.outputs.size(); ++o) {
      if (step.outputs[o] < 0) continue;
      const int root = memory.root[step.outputs[o]];
      users[root].push_back(static_cast<int>(s));
      bytes[root] = std::max(bytes[root], static_cast<size_t>(checked_numel(step.output_infos[o].shape)) *
                                              dtype_size(step.output_infos[o].dtype));
    }
    for (int slot : step.inputs) {
      if (slot >= 0) users[memory.root[slot]].push_back(static_cast<int>(s));
    }
  }
  int placed_pairs = 0;
  for (size_t a = 0; a < users.size(); ++a) {
    for (size_t b = a + 1; b < users.size(); ++b) {
      if (memory.offset[a] < 0 || memory.offset[b] < 0) continue;
      const bool share = memory.offset[a] < memory.offset[b] + static_cast<int64_t>(bytes[b]) &&
                         memory.offset[b] < memory.offset[a] + static_cast<int64_t>(bytes[a]);
      if (!share) continue;
      ++placed_pairs;
      // Sharing blocks must be ordered: every user of one precedes every user of the other.
      const auto ordered = [&](const std::vector<int>& before, const std::vector<int>& after) {
        for (int x : before) {
          for (int y : after) {
            if (x != y && !graph.precedes(x, y)) return false;
          }
        }
        return true;
      };
      EXPECT_TRUE(ordered(users[a], users[b]) || ordered(users[b], users[a]))
          << plan->slots()[a].name << " and " << plan->slots()[b].name << " share memory";
    }
  }
  EXPECT_GT(placed_pairs, 0);  // the arena is still reused where the order allows
}

// Counts every step a run reports, from whichever thread runs it.
class StepCounter final : public Observer {
 public:
  void on_step_begin(const Plan& plan, size_t step) override {
    std::lock_guard lock(mutex_);
    begins.resize(plan.steps().size());
    ++begins[step];
  }
  std::mutex mutex_;
  std::vector<int> begins;
};

TEST(ParallelExecution, ObserversSeeEveryStepOnce) {
  Session session(inception_model(), mode(ExecutionMode::parallel, 2));
  StepCounter counter;
  session.add_observer(&counter);
  session.run({{"x", testing::random_tensor({1, 8, 12, 12}, 5)}});
  ASSERT_FALSE(counter.begins.empty());
  for (int count : counter.begins) EXPECT_EQ(count, 1);
}

// Two branches from x: Gather(x, indices) and Relu(x), each a graph output.
Model gather_beside_relu_model() {
  Model model;
  model.opsets[""] = 13;
  model.graph.inputs = {ValueInfo{"x", DType::f32, true, {Dim{4, ""}, Dim{8, ""}}},
                        ValueInfo{"indices", DType::i64, true, {Dim{2, ""}}}};
  Node gather;
  gather.name = "pick_rows";
  gather.op_type = "Gather";
  gather.inputs = {"x", "indices"};
  gather.outputs = {"rows"};
  Node relu;
  relu.name = "relu";
  relu.op_type = "Relu";
  relu.inputs = {"x"};
  relu.outputs = {"positive"};
  model.graph.nodes = {gather, relu};
  model.graph.outputs = {ValueInfo{"rows", DType::f32, false, {}},
                         ValueInfo{"positive", DType::f32, false, {}}};
  return model;
}

TEST(ParallelExecution, AFailingStepFailsTheRunNamingItsNodeAndTheNextRunWorks) {
  Session session(gather_beside_relu_model(), mode(ExecutionMode::parallel, 2));
  const Tensor x = testing::random_tensor({4, 8}, 9);
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      session.run({{"x", x}, {"indices", Tensor::from_vector<int64_t>({1, 7}, {2})}});
      ADD_FAILURE() << "index 7 of 4 rows accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("pick_rows"), std::string::npos) << error.what();
    }
    const TensorMap good = session.run({{"x", x}, {"indices", Tensor::from_vector<int64_t>({3, 0}, {2})}});
    EXPECT_EQ(good.at("rows").data<float>()[0], x.data<float>()[3 * 8]);
  }
}

TEST(ParallelExecution, ConcurrentParallelRunsStayCorrect) {
  Session session(inception_model(), mode(ExecutionMode::parallel, 1));
  const Tensor x = testing::random_tensor({1, 8, 12, 12}, 11);
  const std::vector<Tensor> expected = run_outputs(session, x, mode(ExecutionMode::sequential, 1));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int run = 0; run < 10; ++run) {
        if (!same_bits(expected, run_outputs(session, x, mode(ExecutionMode::parallel, 1)))) ++mismatches;
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace kiln
