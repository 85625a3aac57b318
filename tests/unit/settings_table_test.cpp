// The settings table and what derives from it: every setting through the C++ guard and the CLI
// (the Python face is tests/python/test_settings_table.py), a run that owns its settings (thread
// count and verbose per run, across threads), oneDNN's reference-counted verbose level, BLAS's
// per-call lines, verbose CSV and headers, the plan key, and the allocator arenas use.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include "backend_test_util.h"
#include "backends/backends.h"
#include "backends/selection.h"
#include "backends/setting_text.h"
#include "graph/plan_key.h"
#include "graph/session.h"
#include "graph/verbose.h"
#include "graph_builder.h"
#include "runtime/parallel.h"
#include "runtime/threads.h"
#include "settings_test_util.h"
#include "tools/setting_options.h"

namespace kiln {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;
using testing::ScopedGlobalSettings;
using testing::VerboseLines;

// A value of `slot` other than its default, valid for it.
int other_value(const SettingSlot& slot) {
  const SettingRow& row = *slot.row;
  switch (row.type) {
    case SettingType::boolean:
      return 1 - row.default_value;
    case SettingType::integer:
      return row.default_value == row.max ? row.min : std::min(row.max, row.default_value + 1);
    case SettingType::choice:
      return row.default_value == 0 ? 1 : 0;
    case SettingType::priority_list:  // the first choice alone
      return row.default_value == priority_list_value({0}) ? priority_list_value({1})
                                                           : priority_list_value({0});
    case SettingType::sink:
      break;
  }
  return 0;
}

bool can_take(const SettingSlot& slot, int value) {
  return !(slot.backend >= 0 && slot.row->type == SettingType::boolean && value == 0 &&
           !all_backends()[slot.backend]->can_be_disabled());
}

TEST(SettingsTable, NamesAreUniqueAndEveryBackendHasItsRows) {
  std::vector<std::string> names;
  for (const SettingSlot& slot : setting_slots()) names.push_back(slot.name);
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  for (std::string_view backend : kBackendNames) {
    for (const char* row : {"_enabled", "_verbose"}) {
      EXPECT_NE(std::find(names.begin(), names.end(), str_cat(backend, row)), names.end()) << backend << row;
    }
  }
  ASSERT_EQ(all_backends().size(), kBackendNames.size());
  for (size_t i = 0; i < kBackendNames.size(); ++i) EXPECT_EQ(all_backends()[i]->name(), kBackendNames[i]);
}

TEST(SettingsTable, EverySettingThroughTheGuardAndBackendsGet) {
  for (const SettingSlot& slot : setting_slots()) {
    if (slot.row->type == SettingType::sink) continue;
    const int value = other_value(slot);
    const int before = backends::get(slot.name);
    EXPECT_EQ(before, global_settings().value(slot.slot)) << slot.name;
    if (!can_take(slot, value)) {
      EXPECT_THROW(ScopedSettings(Settings().set_by_name(slot.name, value)), Error) << slot.name;
      continue;
    }
    {
      ScopedSettings guard(Settings().set_by_name(slot.name, value));
      EXPECT_EQ(backends::get(slot.name), value) << slot.name;
      EXPECT_EQ(current_settings().value(slot.slot), value) << slot.name;
    }
    EXPECT_EQ(backends::get(slot.name), before) << slot.name;
  }
}

TEST(SettingsTable, EverySettingThroughTheCli) {
  for (const SettingSlot& slot : setting_slots()) {
    if (slot.row->type == SettingType::sink) continue;
    const int value = other_value(slot);
    std::vector<std::string> args;
    switch (slot.row->cli) {
      case CliForm::disable:
        args = {"--disable", std::string(kBackendNames[slot.backend])};
        break;
      case CliForm::flag:
        args = {"--" + slot.cli_name};
        break;
      case CliForm::value:
        args = {"--" + slot.cli_name, setting_value_text(slot, value)};
        break;
    }
    const ParsedArgs parsed = parse_args("info", args, with_setting_options({{"help", false, "help"}}));
    ScopedGlobalSettings restore;
    if (!can_take(slot, value)) {
      EXPECT_THROW(apply_setting_options(parsed), Error) << slot.name;
      continue;
    }
    apply_setting_options(parsed);
    EXPECT_EQ(global_settings().value(slot.slot), value) << slot.name;
  }
  // The shorthand sets both precisions; an unknown option or backend is named.
  {
    ScopedGlobalSettings restore;
    apply_setting_options(
        parse_args("info", {"--precision", "bf16"}, with_setting_options({{"help", false, "help"}})));
    EXPECT_EQ(global_settings().precision("conv_precision"), Precision::bf16);
    EXPECT_EQ(global_settings().precision("matmul_precision"), Precision::bf16);
  }
  EXPECT_THROW(parse_args("info", {"--onednn-verbosity", "1"}, with_setting_options({})), Error);
  try {
    ScopedGlobalSettings restore;
    apply_setting_options(parse_args("info", {"--disable", "cudnn"}, with_setting_options({})));
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(
        std::string(error.what()).find("unknown backend 'cudnn' (known: onednn, blas, winograd, native)"),
        std::string::npos)
        << error.what();
  }
}

// The plan settings a trace records read back as the settings that plan the same way.
TEST(PlanSettingsText, ReadsBackWhatPlansDescribe) {
  Settings settings = Settings::defaults();
  settings.set(SettingKey("threads"), 3).set(SettingKey("deterministic"), 1);
  settings.set(BackendSettingKey("enabled"), backend_position("onednn"), 0);
  set_setting_from_text(settings, "conv_algorithm", "direct", "test");  // a choice, as text
  set_setting_from_text(settings, "conv_precision", "bf16", "test");
  const std::string text = settings.describe_plan_settings();
  EXPECT_EQ(plan_settings_from_text(text).describe_plan_settings(), text);
  Settings defaults = Settings::defaults();
  defaults.set(SettingKey("threads"), 2);
  EXPECT_EQ(plan_settings_from_text(defaults.describe_plan_settings()).describe_plan_settings(),
            defaults.describe_plan_settings());
  EXPECT_THROW(plan_settings_from_text("onednn,gpu;threads=2"), Error);
  EXPECT_THROW(plan_settings_from_text("native;threads"), Error);
  EXPECT_THROW(plan_settings_from_text("native;deterministic=maybe"), Error);
}

// Two threads' scopes overlap: each sees its own count, in the setting and in the count kernels
// read, and a run inside a scope uses it.
TEST(RunScope, OverlappingThreadScopesEachSeeTheirOwnCount) {
  std::promise<void> first_open, second_checked;
  std::shared_future<void> first_opened = first_open.get_future().share();
  std::shared_future<void> second_done = second_checked.get_future().share();
  int seen_in_first = 0, seen_in_second = 0, kernel_in_first = 0, kernel_in_second = 0;
  std::thread first([&] {
    ScopedThreads one(1);
    first_open.set_value();
    second_done.wait();  // the second thread's scope is open now too
    seen_in_first = get_num_threads();
    kernel_in_first = intra_op_threads();
  });
  std::thread second([&] {
    first_opened.wait();
    ScopedThreads three(3);
    seen_in_second = get_num_threads();
    kernel_in_second = threads_for_work(1 << 30);
    second_checked.set_value();
  });
  first.join();
  second.join();
  EXPECT_EQ(seen_in_first, 1);
  EXPECT_EQ(kernel_in_first, 1);
  EXPECT_EQ(seen_in_second, 3);
  EXPECT_EQ(kernel_in_second, 3);
  EXPECT_EQ(num_threads_source(), environment_thread_count().source);  // this thread: no scope
}

// libdnnl has one verbose switch per process: it runs at the highest level any open scope asks.
TEST(LibraryVerbose, OverlappingScopesOnTwoThreadsAreReferenceCounted) {
  ASSERT_EQ(library_verbose_requested(backend_position("onednn")), 0);
  std::promise<void> a_open, b_open, a_closed;
  auto a_opened = a_open.get_future().share();
  auto b_opened = b_open.get_future().share();
  auto a_done = a_closed.get_future().share();
  int while_both = -1, after_a = -1;
  std::thread a([&] {
    {
      ScopedSettings one(Settings().set_by_name("onednn_verbose", 1));
      a_open.set_value();
      b_opened.wait();
      while_both = library_verbose_requested(backend_position("onednn"));
    }
    a_closed.set_value();
  });
  std::thread b([&] {
    a_opened.wait();
    ScopedSettings two(Settings().set_by_name("onednn_verbose", 2));
    b_open.set_value();
    a_done.wait();
    after_a = library_verbose_requested(backend_position("onednn"));
  });
  a.join();
  b.join();
  EXPECT_EQ(while_both, 2);
  EXPECT_EQ(after_a, 2);  // b's scope is still open
  EXPECT_EQ(library_verbose_requested(backend_position("onednn")), 0);
  {
    ScopedSettings low(Settings().set_by_name("onednn_verbose", 1));
    {
      ScopedSettings high(Settings().set_by_name("onednn_verbose", 2));
      EXPECT_EQ(library_verbose_requested(backend_position("onednn")), 2);
    }
    EXPECT_EQ(library_verbose_requested(backend_position("onednn")), 1);
  }
  EXPECT_EQ(library_verbose_requested(backend_position("onednn")), 0);
}

// A batched MatMul BLAS takes makes one cblas_sgemm call per batch: one line each.
TEST(BlasVerbose, OneLinePerCblasSgemmCall) {
  KILN_SKIP_UNLESS_BUILT("blas");
  GraphBuilder g({3, 4, 5});
  Model model = g.finish({g.add("MatMul", {"x", g.weights({3, 5, 6})})});
  Session session(model);
  const Tensor x = random_tensor({3, 4, 5}, 4);
  session.run({{"x", x}});
  ASSERT_EQ(session.plan_for({x.shape()})->steps()[0].record.backend, "blas");
  VerboseLines lines;
  {
    ScopedSettings verbose(Settings().set_by_name("blas_verbose", 1).set_verbose_sink(lines.sink()));
    session.run({{"x", x}});
  }
  const std::vector<std::string> calls = lines.starting("kiln_verbose,call,blas,cblas_sgemm,");
  ASSERT_EQ(calls.size(), 3u);
  for (const std::string& call : calls) {
    EXPECT_NE(call.find(",float32,trans:NN,m:4 n:6 k:5,ld:5;6;6,threads:1,"), std::string::npos) << call;
  }
  EXPECT_EQ(lines.starting("kiln_verbose,exec,blas,MatMul,").size(), 1u);
  // Calls come before their step's exec line; the info line before everything.
  const std::vector<std::string> all = lines.all();
  ASSERT_EQ(all.size(), 5u);
  EXPECT_TRUE(all[0].starts_with("kiln_verbose,info,")) << all[0];
  EXPECT_TRUE(all[4].starts_with("kiln_verbose,exec,")) << all[4];
  // Verbose off: no calls logged.
  session.run({{"x", x}});
  EXPECT_EQ(lines.starting("kiln_verbose,call,").size(), 3u);
}

TEST(Verbose, NodeNamesWithCommasAreQuotedAndEachSinkGetsTheHeaderOnce) {
  GraphBuilder g({1, 4});
  Model model = g.finish({g.add("Relu", {"x"})});
  model.graph.nodes[0].name = "relu, \"the first\"";
  Session session(model);
  VerboseLines first, second;
  for (VerboseLines* lines : {&first, &second}) {
    ScopedSettings verbose(Settings().set("verbose", 1).set_verbose_sink(lines->sink()));
    session.run({{"x", random_tensor({1, 4}, 1)}});
    session.run({{"x", random_tensor({1, 4}, 1)}});
  }
  for (VerboseLines* lines : {&first, &second}) {
    const std::vector<std::string> all = lines->all();
    ASSERT_EQ(all.size(), 3u);
    EXPECT_TRUE(all[0].starts_with("kiln_verbose,info,kiln ")) << all[0];
    EXPECT_EQ(lines->starting("kiln_verbose,info,").size(), 1u);
    EXPECT_NE(all[1].find(",\"relu, \"\"the first\"\"\","), std::string::npos) << all[1];
  }
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
}

TEST(PlanKey, EqualityHashAndTheFastPathAgree) {
  const Settings settings = Settings::defaults();
  const Tensor input = random_tensor({2, 3}, 1);
  const Tensor* inputs[] = {&input};
  PlanKey key{settings.plan_values(), {input.shape()}, {""}};
  EXPECT_TRUE(key.matches(settings.plan_values(), inputs));
  PlanKey same{settings.plan_values(), {{2, 3}}, {""}};
  EXPECT_EQ(key, same);
  EXPECT_EQ(PlanKeyHash{}(key), PlanKeyHash{}(same));
  Settings other_threads = settings;
  other_threads.set("threads", settings.threads() + 1);
  EXPECT_FALSE(key.matches(other_threads.plan_values(), inputs));
  EXPECT_NE(key, (PlanKey{other_threads.plan_values(), {{2, 3}}, {""}}));
  // Settings that do not change plans are not part of the key.
  Settings verbose = settings;
  verbose.set("verbose", 2);
  EXPECT_TRUE(key.matches(verbose.plan_values(), inputs));
  const Tensor wider = random_tensor({2, 4}, 1);
  const Tensor* wider_inputs[] = {&wider};
  EXPECT_FALSE(key.matches(settings.plan_values(), wider_inputs));
  PlanKey bound{settings.plan_values(), {{2, 3}}, {"bytes"}};
  EXPECT_FALSE(bound.matches(settings.plan_values(), inputs));  // value-bound plans are looked up
}

// An allocator that counts what it hands out (static: the registry keeps a reference).
class RecordingAllocator final : public Allocator {
 public:
  std::string_view name() const override { return "recording"; }
  void* allocate(size_t bytes) override {
    largest = std::max(largest.load(), bytes);
    ++count;
    return default_allocator().allocate(bytes);
  }
  void deallocate(void* pointer, size_t bytes) noexcept override {
    default_allocator().deallocate(pointer, bytes);
  }
  std::atomic<size_t> count{0};
  std::atomic<size_t> largest{0};
};

TEST(Allocator, AReplacedAllocatorSeesTheArena) {
  static RecordingAllocator recording;
  GraphBuilder g({1, 64, 32, 32});
  const std::string a = g.add("Relu", {"x"});
  const std::string b = g.add("Sigmoid", {a});
  Model model = g.finish({g.add("Add", {a, b})});
  Session session(model);
  const Tensor x = random_tensor({1, 64, 32, 32}, 2);
  const size_t arena = session.plan_for({x.shape()})->memory_plan().arena_bytes;
  ASSERT_GT(arena, 0u);
  Allocator& previous = backends::allocator();
  {
    struct RestoreAllocator {
      Allocator& saved;
      ~RestoreAllocator() { backends::set_allocator(saved); }
    } restore{previous};
    backends::set_allocator(recording);
    session.run({{"x", x}});  // the run context and its arena are created now
  }
  EXPECT_EQ(&backends::allocator(), &previous);
  EXPECT_GE(recording.largest.load(), arena);
  const std::vector<std::string> names = registered_allocators();
  EXPECT_NE(std::find(names.begin(), names.end(), "recording"), names.end());
  EXPECT_THROW(backends::set_allocator("no-such-allocator"), Error);
}

}  // namespace
}  // namespace kiln
