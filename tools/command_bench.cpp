// `kiln bench MODEL`: latency percentiles, throughput and GFLOP/s of Session::run on seeded random
// inputs (`--json` for scripts, a progress bar on a terminal). Loading and the
// first plan happen before timing; warm-up runs are not counted. `--profile` records the timed runs
// (what the profiler costs is measured by comparing medians with and without it).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backends/selection.h"
#include "core/error.h"
#include "core/version.h"
#include "graph/flops.h"
#include "graph/observer.h"
#include "graph/plan.h"
#include "graph/random_input.h"
#include "graph/session.h"
#include "profiler/export.h"
#include "profiler/key_averages.h"
#include "profiler/profile.h"
#include "runtime/thread_budget.h"
#include "runtime/threads.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/setting_options.h"

namespace kiln {
namespace {

double percentile(std::vector<double> sorted, double fraction) {
  const size_t index = static_cast<size_t>(fraction * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(index, sorted.size() - 1)];
}

double elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// A field of /proc/self/status in MB ("VmRSS": resident now, "VmHWM": peak resident), or -1.
double process_memory_mb(const char* field) {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return -1;
  char line[256];
  double kilobytes = -1;
  const size_t length = std::strlen(field);
  while (std::fgets(line, sizeof line, status) != nullptr) {
    if (std::strncmp(line, field, length) == 0 && line[length] == ':')
      kilobytes = std::atof(line + length + 1);
  }
  std::fclose(status);
  return kilobytes < 0 ? -1 : kilobytes / 1024;
}

// A one-line bar on stderr, redrawn in place: "[#########.........]  9/20".
void print_progress(int done, int total) {
  constexpr int kWidth = 40;
  const int filled = done * kWidth / total;
  std::fprintf(stderr, "\r[%s%s] %d/%d", std::string(static_cast<size_t>(filled), '#').c_str(),
               std::string(static_cast<size_t>(kWidth - filled), '.').c_str(), done, total);
  std::fflush(stderr);
}

std::string json_escape(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    escaped += c;
  }
  return escaped;
}

}  // namespace

int command_bench(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> specs = with_setting_options({
      {"batch", true, "B: size of symbolic input dims (default 1)"},
      {"warmup", true, "W: untimed runs first (default 5)"},
      {"iters", true, "N: timed runs (default 20)"},
      {"callers", true, "C: threads calling Session::run at the same time, N timed runs each (default 1)"},
      {"thread-budget", true,
       "T: threads concurrent runs share (0: no budget; default KILN_THREAD_BUDGET, else the cores)"},
      {"profile", false,
       "record the timed runs with the profiler (shapes and memory) and print the time per op after the "
       "results"},
      {"trace", true, "FILE: with --profile, write the recorded runs as a Chrome trace"},
      {"json", false, "print one JSON object instead of text (for scripts)"},
      {"help", false, "show this help"},
  });
  const ParsedArgs parsed = parse_args("bench", args, specs);
  if (parsed.has("help")) {
    std::printf("usage: kiln bench MODEL [options]\n\nTimes Session::run on seeded random inputs.\n\n%s",
                options_help(specs).c_str());
    return 0;
  }
  KILN_CHECK(parsed.positional.size() == 1, invalid_argument, "kiln bench expects one MODEL path, got ",
             parsed.positional.size());
  apply_setting_options(parsed);
  const int batch = parsed.int_value("batch", 1, 1, 1 << 20);
  const int warmup = parsed.int_value("warmup", 5, 0, 1 << 20);
  const int iters = parsed.int_value("iters", 20, 1, 1 << 20);
  const int callers = parsed.int_value("callers", 1, 1, 256);
  const bool profiling = parsed.has("profile");
  KILN_CHECK(profiling || !parsed.has("trace"), invalid_argument, "kiln bench: --trace needs --profile");
  if (parsed.has("thread-budget")) set_thread_budget(parsed.int_value("thread-budget", 0, 0, kMaxThreads));

  // Load = import + plan (shape inference, folding, kernel selection, weight prepacking, primitive
  // creation); the first run also creates the run context (arena, bound kernels).
  const auto import_start = std::chrono::steady_clock::now();
  Session session(parsed.positional[0]);
  const double import_ms = elapsed_ms(import_start);
  size_t weight_bytes = 0;  // counted now: planning may release initializers it copied
  for (const auto& entry : session.model().graph.initializers) weight_bytes += entry.second.nbytes();
  const RandomInputs random = random_inputs(session.inputs(), batch);
  const TensorMap& inputs = random.by_name;
  const std::vector<Tensor>& ordered = random.ordered;
  const auto plan_start = std::chrono::steady_clock::now();
  const std::shared_ptr<const Plan> plan = session.plan_for(ordered);
  const double plan_ms = elapsed_ms(plan_start);
  const auto first_run_start = std::chrono::steady_clock::now();
  session.run(inputs);
  const double first_run_ms = elapsed_ms(first_run_start);
  const double load_ms = import_ms + plan_ms;
  const double peak_rss_after_load_mb = process_memory_mb("VmHWM");

  // Runs planned for fewer threads than the count: given fewer by the thread budget, or at the
  // default count while other processes kept cores busy (adapt_to_load).
  struct FewerThreadsCounter final : Observer {
    explicit FewerThreadsCounter(int threads) : threads(threads) {}
    void on_run_begin(const Plan& plan) override {
      if (counting.load(std::memory_order_relaxed) && plan.threads() < threads) fewer.fetch_add(1);
    }
    const int threads;
    std::atomic<bool> counting{false};
    std::atomic<int> fewer{0};
  } fewer_threads(get_num_threads());
  session.add_observer(&fewer_threads);

  // Each caller warms up, then all start their timed runs together.
  std::vector<std::vector<double>> caller_times(static_cast<size_t>(callers));
  std::atomic<int> warmed_up{0};
  std::atomic<bool> timing{false};  // set by the last caller to warm up, after the clock and the counter
  profiler::Profile profile({.record_shapes = true, .profile_memory = true});
  std::chrono::steady_clock::time_point timed_start;
  const bool show_progress = !parsed.has("json") && isatty(fileno(stderr)) && callers == 1;
  const auto call = [&](int caller) {
    for (int i = 0; i < warmup; ++i) session.run(inputs);
    if (warmed_up.fetch_add(1) + 1 == callers) {
      if (profiling) profile.start();
      timed_start = std::chrono::steady_clock::now();
      fewer_threads.counting = true;
      timing = true;
    }
    while (!timing.load()) std::this_thread::yield();
    for (int i = 0; i < iters; ++i) {
      const auto start = std::chrono::steady_clock::now();
      session.run(inputs);
      caller_times[caller].push_back(elapsed_ms(start));
      if (show_progress) print_progress(i + 1, iters);
    }
  };
  std::vector<std::thread> threads;
  for (int caller = 1; caller < callers; ++caller) threads.emplace_back(call, caller);
  call(0);
  for (std::thread& thread : threads) thread.join();
  const double wall_ms = elapsed_ms(timed_start);
  const profiler::Trace trace = profiling ? profile.stop() : profiler::Trace{};
  if (parsed.has("trace")) profiler::export_chrome_trace(trace, parsed.value("trace"));
  session.remove_observer(&fewer_threads);
  const int fewer = fewer_threads.fewer.load();
  if (show_progress) std::fprintf(stderr, "\r%60s\r", "");
  // Runs per second over the timed phase: with several callers, what they got through together.
  const double throughput = 1000.0 * batch * callers * iters / wall_ms;
  std::vector<double> times_ms;
  for (const std::vector<double>& times : caller_times)
    times_ms.insert(times_ms.end(), times.begin(), times.end());
  std::sort(times_ms.begin(), times_ms.end());
  const double median = percentile(times_ms, 0.5);
  const int64_t flops = plan_flops(*plan);
  const double gflops = static_cast<double>(flops) * 1e-6 / median;
  const double weights_mb = static_cast<double>(weight_bytes) / (1 << 20);
  const double arena_mb = static_cast<double>(plan->memory_plan().arena_bytes) / (1 << 20);
  const double steady_rss_mb = process_memory_mb("VmRSS");
  const double peak_rss_mb = process_memory_mb("VmHWM");
  if (parsed.has("json")) {
    std::printf(
        "{\"runtime\": \"kiln\", \"version\": \"%s\", \"model\": \"%s\", \"batch\": %d, \"threads\": %d, "
        "\"backends\": \"%s\", \"warmup\": %d, \"iters\": %d, \"median_ms\": %.4f, \"p10_ms\": %.4f, "
        "\"p90_ms\": %.4f, \"min_ms\": %.4f, \"throughput_per_s\": %.3f, \"flops_per_run\": %lld, "
        "\"gflops\": %.2f, \"load_ms\": %.2f, \"import_ms\": %.2f, \"plan_ms\": %.2f, \"first_run_ms\": "
        "%.2f, "
        "\"weights_mb\": %.2f, \"arena_mb\": %.2f, \"peak_rss_after_load_mb\": %.1f, "
        "\"steady_rss_mb\": %.1f, \"peak_rss_mb\": %.1f, \"callers\": %d, \"thread_budget\": %d, "
        "\"runs_with_fewer_threads\": %d, \"profiled\": %s",
        std::string(kiln_version()).c_str(), json_escape(parsed.positional[0]).c_str(), batch,
        get_num_threads(), settings_summary().c_str(), warmup, iters, median, percentile(times_ms, 0.1),
        percentile(times_ms, 0.9), times_ms.front(), throughput, static_cast<long long>(flops), gflops,
        load_ms, import_ms, plan_ms, first_run_ms, weights_mb, arena_mb, peak_rss_after_load_mb,
        steady_rss_mb, peak_rss_mb, callers, get_thread_budget(), fewer, profiling ? "true" : "false");
    if (profiling) std::printf(", \"profile\": %s", profiler::summary_json(trace).c_str());
    std::printf("}\n");
    return 0;
  }
  std::printf("model: %s\nbatch: %d  threads: %d  plan settings: %s  warmup: %d  iters: %d\n",
              parsed.positional[0].c_str(), batch, get_num_threads(), settings_summary().c_str(), warmup,
              iters);
  std::printf("load: %.1f ms (import %.1f, plan %.1f); first run %.1f ms\n", load_ms, import_ms, plan_ms,
              first_run_ms);
  std::printf("latency ms: median %.3f  p10 %.3f  p90 %.3f  min %.3f\n", median, percentile(times_ms, 0.1),
              percentile(times_ms, 0.9), times_ms.front());
  if (callers > 1) {
    std::printf("callers: %d, thread budget %s\n", callers,
                get_thread_budget() == 0 ? "off" : str_cat(get_thread_budget(), " threads").c_str());
  }
  if (fewer > 0) {
    std::printf(
        "fewer threads: %d of %d timed runs ran on fewer than %d (thread budget, or cores busy "
        "elsewhere at the default count; --verbose 1 says which)\n",
        fewer, callers * iters, get_num_threads());
  }
  std::printf("throughput: %.2f samples/s\n", throughput);
  std::printf("compute: %.3f GFLOP per run, %.1f GFLOP/s at the median\n", static_cast<double>(flops) * 1e-9,
              gflops);
  std::printf(
      "memory: weights %.1f MB, arena %.1f MB; RSS peak after load %.1f MB, steady %.1f MB, peak %.1f MB\n",
      weights_mb, arena_mb, peak_rss_after_load_mb, steady_rss_mb, peak_rss_mb);
  if (profiling) {
    std::printf("\nprofile of the timed runs (shapes and memory recorded):\n%s",
                profiler::runs_text(trace).c_str());
    std::fputs(profiler::key_averages(trace).table("self_time", 15).c_str(), stdout);
    if (parsed.has("trace")) std::printf("trace: %s\n", parsed.value("trace").c_str());
  }
  return 0;
}

}  // namespace kiln
