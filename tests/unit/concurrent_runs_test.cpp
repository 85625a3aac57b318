// Session::run is safe from many threads: callers sharing sessions whose plans use every kernel
// family kiln has get, on every run, the bits a single run of their input gives at the thread count
// the run got (callers with different inputs run each step at the same moment, so a kernel whose
// runs share memory mixes them); and every oneDNN primitive kiln executes is given a scratchpad of
// kiln's (oneDNN's own is shared by every run executing the primitive).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend_test_util.h"
#include "backends/prefer.h"
#include "backends/registry.h"
#include "backends/sdpa.h"
#include "backends/settings.h"
#include "graph/observer.h"
#include "graph/plan.h"
#include "graph/session.h"
#include "graph_builder.h"
#include "runtime/thread_budget.h"

namespace kiln {
namespace {

using testing::conv_attrs;
using testing::GraphBuilder;
using testing::int_attr;
using testing::ints_attr;

Attributes axis_attr(int64_t axis) {
  Attributes attributes;
  attributes.set("axis", int_attr(axis));
  return attributes;
}

std::string int64_constant(GraphBuilder& g, const std::vector<int64_t>& values) {
  return g.constant(Tensor::from_vector<int64_t>(values, {static_cast<int64_t>(values.size())}));
}

// Sizes at which a run takes about a millisecond on 2 cores: each kernel runs long enough for
// concurrent runs of it to overlap, and the test stays short.
constexpr int64_t kImageSide = 48;
constexpr int64_t kPooledSide = kImageSide / 2;
constexpr int64_t kLength = 64, kWidth = 64;

// A small CNN: a 3x3 Conv + Relu (oneDNN or Winograd), MaxPool and Sigmoid, a channel shuffle (one
// ChannelShuffle step), a depthwise Conv, two branches joined by a channel Concat that only a 1x1 Conv reads
// (the Concat distributed into it), a residual Add, GlobalAveragePool, a Gemm small enough for BLAS and a
// Softmax. Its branches overlap in parallel execution mode.
Model convolutions() {
  GraphBuilder g({1, 8, kImageSide, kImageSide});
  const std::string stem =
      g.add("Relu", {g.add("Conv", {"x", g.weights({16, 8, 3, 3}, 0.3f), g.weights({16})},
                           conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}))});
  Attributes pool;
  pool.set("kernel_shape", ints_attr({2, 2}));
  pool.set("strides", ints_attr({2, 2}));
  const std::string pooled = g.add("Sigmoid", {g.add("MaxPool", {stem}, pool)});
  Attributes swap;
  swap.set("perm", ints_attr({0, 2, 1, 3, 4}));
  const std::string grouped =
      g.add("Reshape", {pooled, int64_constant(g, {1, 2, 8, kPooledSide, kPooledSide})});
  const std::string shuffled = g.add(
      "Reshape", {g.add("Transpose", {grouped}, swap), int64_constant(g, {1, 16, kPooledSide, kPooledSide})});
  const std::string depthwise = g.add("Conv", {shuffled, g.weights({16, 1, 3, 3}), g.weights({16})},
                                      conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, 16));
  const std::string a = g.add("Relu", {g.add("Conv", {depthwise, g.weights({8, 16, 1, 1}, 0.3f)},
                                             conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}))});
  const std::string b = g.add("Relu", {g.add("Conv", {depthwise, g.weights({16, 16, 3, 3}, 0.2f)},
                                             conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}))});
  const std::string joined = g.add("Concat", {a, b}, axis_attr(1));
  const std::string mixed =
      g.add("Relu", {g.add("Conv", {joined, g.weights({16, 24, 1, 1}, 0.3f), g.weights({16})},
                           conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}))});
  const std::string sum = g.add("Add", {mixed, shuffled});
  const std::string features = g.add("Flatten", {g.add("GlobalAveragePool", {sum})});
  Attributes transposed;
  transposed.set("transB", int_attr(1));
  const std::string logits = g.add("Gemm", {features, g.weights({10, 16}), g.weights({10})}, transposed);
  return g.finish({g.add("Softmax", {logits}, axis_attr(-1))});
}

// An encoder block on x [2, kLength, kWidth]: Q, K, V products, masked attention (one fused step), an output
// product, the residual Add and LayerNormalization (one step on the MHA fast path), a feed-forward
// block whose second product adds the residual as it writes, then an Einsum.
Model encoder() {
  GraphBuilder g({2, kLength, kWidth});
  g.set_opset(17);
  const std::string q = g.add("MatMul", {"x", g.weights({kWidth, kWidth}, 0.3f)});
  const std::string k = g.add("MatMul", {"x", g.weights({kWidth, kWidth}, 0.3f)});
  const std::string v = g.add("MatMul", {"x", g.weights({kWidth, kWidth}, 0.3f)});
  const std::string scaled =
      g.add("Div", {q, g.constant(Tensor::scalar<float>(std::sqrt(static_cast<float>(kWidth))))});
  Attributes perm;
  perm.set("perm", ints_attr({0, 2, 1}));
  const std::string scores =
      g.add("Add", {g.add("MatMul", {scaled, g.add("Transpose", {k}, perm)}), g.weights({kLength, kLength})});
  const std::string attended = g.add("MatMul", {g.add("Softmax", {scores}, axis_attr(-1)), v});
  const std::string projected = g.add("MatMul", {attended, g.weights({kWidth, kWidth}, 0.3f)});
  Attributes epsilon;
  epsilon.set("epsilon", testing::float_attr(1e-5f));
  const std::string normalized =
      g.add("LayerNormalization",
            {g.add("Add", {projected, "x"}), g.weights({kWidth}, 1.5f), g.weights({kWidth})}, epsilon);
  constexpr int64_t kHidden = 2 * kWidth;
  const std::string hidden =
      g.add("Relu", {g.add("Add", {g.add("MatMul", {normalized, g.weights({kWidth, kHidden}, 0.3f)}),
                                   g.weights({kHidden})})});
  const std::string fed = g.add(
      "Add",
      {g.add("Add", {g.add("MatMul", {hidden, g.weights({kHidden, kWidth}, 0.2f)}), g.weights({kWidth})}),
       normalized});
  Attributes equation;
  equation.set("equation", testing::string_attr("ble,ef->blf"));
  return g.finish({g.add("Einsum", {fed, g.weights({kWidth, 8})}, equation)});
}

Settings native_only() {
  const std::string_view native = "native";
  return backends::prefer_setting(std::span(&native, 1), {});
}

Settings attention_kernel(std::string_view kernel) {
  return backends::sdpa::kernels_setting(std::span(&kernel, 1));
}

Settings parallel_mode() {
  return Settings().set(SettingKey("execution_mode"), static_cast<int>(ExecutionMode::parallel));
}

// One session of one model under its own settings.
struct Case {
  std::string name;
  Model model;
  Settings settings;
  Shape input_shape;
};

std::vector<Case> cases() {
  const Shape image = {1, 8, kImageSide, kImageSide};
  const Shape sequence = {2, kLength, kWidth};
  const Settings winograd =
      Settings().set(SettingKey("conv_algorithm"), static_cast<int>(ConvAlgorithm::winograd));
  // bf16 products where the ISA tier has bf16 dot products, float32 ones elsewhere.
  const Settings bf16 = Settings().set(SettingKey("matmul_precision"), static_cast<int>(Precision::bf16));
  std::vector<Case> all = {
      {"convolutions", convolutions(), Settings(), image},
      {"convolutions, parallel", convolutions(), parallel_mode(), image},
      {"convolutions, winograd", convolutions(), winograd, image},
      {"convolutions, native", convolutions(), native_only(), image},
      {"encoder, flash attention", encoder(), attention_kernel("flash"), sequence},
      {"encoder, math attention", encoder(), attention_kernel("math"), sequence},
      {"encoder, native", encoder(), native_only(), sequence},
      {"encoder, bf16", encoder(), bf16, sequence},
  };
  // Where oneDNN was configured out, a plan that allows only its attention kernel fails.
  if (backends::info("onednn").built)
    all.push_back({"encoder, onednn attention", encoder(), attention_kernel("onednn"), sequence});
  return all;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// A barrier for `parties` threads that breaks for good when a wait takes longer than kPatience
// (every wait then returns at once): a caller that stops arriving fails the test instead of hanging it.
class Rendezvous {
 public:
  static constexpr std::chrono::seconds kPatience{20};
  explicit Rendezvous(int parties) : parties_(parties) {}

  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    if (broken_) return;
    const uint64_t generation = generation_;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      ++generation_;
      all_arrived_.notify_all();
      return;
    }
    if (!all_arrived_.wait_for(lock, kPatience, [&] { return generation_ != generation || broken_; })) {
      broken_ = true;
      all_arrived_.notify_all();
    }
  }
  bool broken() const {
    std::lock_guard lock(mutex_);
    return broken_;
  }

 private:
  const int parties_;
  mutable std::mutex mutex_;
  std::condition_variable all_arrived_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
};

// Watches the callers' runs: counts them by the thread count of their plan (the count the run got),
// and holds a run whose thread has a step rendezvous at the start of each step until the rest of
// its group is there, so the group runs every kernel at the same moment and a kernel whose runs
// share state corrupts their outputs.
class CallerObserver final : public Observer {
 public:
  static Rendezvous*& step_rendezvous() {
    thread_local Rendezvous* rendezvous = nullptr;
    return rendezvous;
  }
  void on_run_begin(const Plan& plan) override {
    std::lock_guard lock(mutex_);
    ++runs_[plan.threads()];
  }
  void on_step_begin(const Plan&, size_t) override {
    if (Rendezvous* rendezvous = step_rendezvous()) rendezvous->arrive_and_wait();
  }
  std::map<int, int> runs() const {
    std::lock_guard lock(mutex_);
    return runs_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<int, int> runs_;
};

// What the plan of `session` at 2 threads runs: "backend NAME", "op TYPE" and "kernel NAME" entries.
std::set<std::string> planned(Session& session, const Shape& input_shape) {
  const ScopedSettings threads(Settings().set("threads", 2));
  std::set<std::string> seen;
  for (const PlanStep& step : session.plan_for(std::vector<Shape>{input_shape})->steps()) {
    seen.insert("backend " + step.record.backend);
    seen.insert("op " + step.record.op_type);
    seen.insert("kernel " + step.record.kernel);
  }
  return seen;
}

std::string listing(const std::set<std::string>& entries) {
  std::string text;
  for (const std::string& entry : entries) text += entry + "\n";
  return text;
}

bool has_prefix(const std::set<std::string>& seen, const std::string& prefix) {
  const auto it = seen.lower_bound(prefix);
  return it != seen.end() && it->starts_with(prefix);
}

// How the callers run one case in a round.
enum class Pattern {
  lockstep,   // the same session, synchronously, each step started together within a thread count
  together,   // the same session, started together, run() and run_async() mixed
  staggered,  // each caller another session, run() and run_async() mixed
};

TEST(ConcurrentRuns, EveryKernelFamilyGivesASingleRunsBitsToEveryCaller) {
  std::vector<Case> all = cases();
  std::vector<std::unique_ptr<Session>> sessions;
  for (const Case& c : all) sessions.push_back(std::make_unique<Session>(c.model, c.settings));

  // The plans run what this test is about, where the backend was built.
  std::set<std::string> seen;
  for (size_t c = 0; c < all.size(); ++c) {
    const std::set<std::string> entries = planned(*sessions[c], all[c].input_shape);
    if (c == 0 && (backends::info("onednn").built || backends::info("winograd").built)) {
      EXPECT_FALSE(entries.contains("op Concat")) << "the Concat is distributed into its reader\n"
                                                  << listing(entries);
    }
    seen.insert(entries.begin(), entries.end());
  }
  for (const char* entry :
       {"op ChannelShuffle", "op ResidualLayerNorm", "op Einsum", "op ScaledDotProductAttention"})
    EXPECT_TRUE(seen.contains(entry)) << entry << " not among\n" << listing(seen);
  for (const char* prefix :
       {"kernel native:flash_attention", "kernel native:math_attention", "kernel native:conv"})
    EXPECT_TRUE(has_prefix(seen, prefix)) << prefix << " not among\n" << listing(seen);
  if (backends::info("onednn").built) {
    EXPECT_TRUE(has_prefix(seen, "kernel onednn:attention(")) << listing(seen);
  }
  for (const char* backend : {"blas", "winograd"}) {
    if (backends::info(backend).built) {
      EXPECT_TRUE(seen.contains(str_cat("backend ", backend))) << listing(seen);
    }
  }

  // Each caller its own input (a kernel whose runs share memory then mixes different values), and
  // its thread count: half the callers ask for 1 thread, half for 2. A single run's answer for each.
  constexpr int kCallers = 6;
  const auto threads_of = [](int caller) { return 1 + caller % 2; };
  std::vector<std::vector<Tensor>> inputs(all.size()), expected(all.size());
  for (size_t c = 0; c < all.size(); ++c) {
    for (int caller = 0; caller < kCallers; ++caller) {
      inputs[c].push_back(
          testing::random_tensor(all[c].input_shape, static_cast<uint32_t>(100 * c + caller)));
      const ScopedSettings scoped(Settings().set("threads", threads_of(caller)));
      expected[c].push_back(sessions[c]->run({{"x", inputs[c].back()}}).begin()->second);
    }
  }

  // No budget: every run gets the threads it asks for, so each has one right answer.
  const int saved_budget = get_thread_budget();
  set_thread_budget(0);
  CallerObserver observer;
  for (auto& session : sessions) session->add_observer(&observer);
  constexpr int kRounds = 12;
  Rendezvous start(kCallers);
  Rendezvous step_groups[2] = {Rendezvous(kCallers / 2), Rendezvous(kCallers / 2)};  // per thread count
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  std::atomic<int> runs_at_one{0};
  std::vector<std::thread> callers;
  for (int caller = 0; caller < kCallers; ++caller) {
    callers.emplace_back([&, caller] {
      const int threads = threads_of(caller);
      const ScopedSettings scoped(Settings().set("threads", threads));
      for (int round = 0; round < kRounds; ++round) {
        const auto pattern = static_cast<Pattern>(round % 3);
        for (size_t step = 0; step < all.size(); ++step) {
          start.arrive_and_wait();
          const size_t c =
              pattern == Pattern::staggered ? (step + static_cast<size_t>(caller)) % all.size() : step;
          const bool async = pattern != Pattern::lockstep && (round + caller) % 2 == 0;
          // Parallel mode runs steps on pool threads too: its steps are not held.
          const bool held = pattern == Pattern::lockstep &&
                            !sessions[c]->plan_for(std::vector<Shape>{all[c].input_shape})->parallel();
          CallerObserver::step_rendezvous() = held ? &step_groups[threads - 1] : nullptr;
          std::string failure;
          try {
            const Tensor& x = inputs[c][static_cast<size_t>(caller)];
            const TensorMap out =
                async ? sessions[c]->run_async({{"x", x}}).wait() : sessions[c]->run({{"x", x}});
            if (!same_bits(out.begin()->second, expected[c][static_cast<size_t>(caller)]))
              failure = str_cat(all[c].name, " at ", threads, " threads", async ? " (run_async)" : "",
                                ": output differs from a single run's");
          } catch (const std::exception& error) {
            failure = str_cat(all[c].name, ": ", error.what());
          }
          CallerObserver::step_rendezvous() = nullptr;
          if (threads == 1) ++runs_at_one;
          if (!failure.empty()) {
            std::lock_guard lock(failures_mutex);
            failures.push_back(str_cat("caller ", caller, ", round ", round, ": ", failure));
          }
        }
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  for (auto& session : sessions) session->remove_observer(&observer);
  set_thread_budget(saved_budget);

  EXPECT_TRUE(failures.empty()) << failures.size() << " wrong runs, the first: " << failures.front();
  EXPECT_FALSE(start.broken() || step_groups[0].broken() || step_groups[1].broken())
      << "a caller stopped arriving for " << Rendezvous::kPatience.count() << " s";
  const int total = kCallers * kRounds * static_cast<int>(all.size());
  EXPECT_EQ(observer.runs()[1], runs_at_one.load()) << "every run ran the plan for the threads it asked";
  EXPECT_EQ(observer.runs()[1] + observer.runs()[2], total);
}

// The primitive kinds of the lines oneDNN printed ("onednn_verbose,exec,cpu,KIND,...") and the lines
// that name no user scratchpad.
struct ExecutedPrimitives {
  std::set<std::string> kinds;
  std::vector<std::string> without_user_scratchpad;
};

ExecutedPrimitives executed_primitives(const std::string& printed) {
  ExecutedPrimitives executed;
  std::istringstream lines(printed);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("onednn_verbose,exec,")) continue;
    std::vector<std::string> fields;
    std::istringstream row(line);
    for (std::string field; std::getline(row, field, ',');) fields.push_back(field);
    if (fields.size() > 3) executed.kinds.insert(fields[3]);
    if (line.find("attr-scratchpad:user") == std::string::npos)
      executed.without_user_scratchpad.push_back(line);
  }
  return executed;
}

// oneDNN's verbose prints a line per primitive execution, its attributes among the fields: each of
// kiln's, at plan time (weights reordered) and at run time, is given a scratchpad of kiln's.
TEST(ConcurrentRuns, EveryOnednnPrimitiveRunsWithAScratchpadOfKilns) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const std::vector<Case> all = cases();
  ::testing::internal::CaptureStdout();
  {
    const ScopedSettings verbose(Settings().set(BackendSettingKey("verbose"), backend_position("onednn"), 1));
    for (const Case& c : all) {
      Session session(c.model, c.settings);
      for (int threads : {1, 2}) {
        const ScopedSettings scoped(Settings().set("threads", threads));
        session.run({{"x", testing::random_tensor(c.input_shape, 1)}});
      }
    }
  }
  const ExecutedPrimitives executed = executed_primitives(::testing::internal::GetCapturedStdout());
  EXPECT_TRUE(executed.without_user_scratchpad.empty())
      << executed.without_user_scratchpad.size() << " executions with oneDNN's own scratchpad, the first:\n"
      << executed.without_user_scratchpad.front();
  // Every kind of primitive kiln creates ran (concat aside: oneDNN's is never chosen for float32).
  std::string kinds;
  for (const std::string& kind : executed.kinds) kinds += kind + " ";
  for (const char* kind : {"convolution", "matmul", "pooling_v2", "eltwise", "softmax_v2", "reorder",
                           "binary", "layer_normalization"})
    EXPECT_TRUE(executed.kinds.contains(kind)) << kind << " not among " << kinds;
}

}  // namespace
}  // namespace kiln
