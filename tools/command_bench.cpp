// `kiln bench MODEL`: latency percentiles of Session::run on seeded random inputs. Loading and the
// first plan happen before timing; warm-up runs are not counted.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "graph/session.h"
#include "runtime/threads.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/random_input.h"

namespace kiln {
namespace {

double percentile(std::vector<double> sorted, double fraction) {
  const size_t index = static_cast<size_t>(fraction * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(index, sorted.size() - 1)];
}

}  // namespace

int command_bench(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> specs = {
      {"batch", true, "B: size of symbolic input dims (default 1)"},
      {"threads", true, "N: intra-op threads (overrides KILN_NUM_THREADS and OMP_NUM_THREADS)"},
      {"disable", true, "BACKEND: leave a backend out of kernel selection (repeatable)"},
      {"warmup", true, "W: untimed runs first (default 5)"},
      {"iters", true, "N: timed runs (default 20)"},
      {"help", false, "show this help"},
  };
  const ParsedArgs parsed = parse_args("bench", args, specs);
  if (parsed.has("help")) {
    std::printf("usage: kiln bench MODEL [options]\n\nTimes Session::run on seeded random inputs.\n\n%s",
                options_help(specs).c_str());
    return 0;
  }
  KILN_CHECK(parsed.positional.size() == 1, invalid_argument, "kiln bench expects one MODEL path, got ",
             parsed.positional.size());
  if (parsed.has("threads")) set_num_threads(parsed.int_value("threads", 1, 1, 4096));
  apply_backend_options(parsed);
  const int batch = parsed.int_value("batch", 1, 1, 1 << 20);
  const int warmup = parsed.int_value("warmup", 5, 0, 1 << 20);
  const int iters = parsed.int_value("iters", 20, 1, 1 << 20);

  const auto load_start = std::chrono::steady_clock::now();
  Session session(parsed.positional[0]);
  std::mt19937 rng(kRandomInputSeed);
  TensorMap inputs;
  for (const ValueInfo& input : session.inputs()) inputs[input.name] = random_input(input, batch, rng);
  session.run(inputs);  // plans for these shapes
  const double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_start).count();

  for (int i = 0; i < warmup; ++i) session.run(inputs);
  std::vector<double> times_ms;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    session.run(inputs);
    times_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times_ms.begin(), times_ms.end());
  const double median = percentile(times_ms, 0.5);
  std::printf("model: %s\nbatch: %d  threads: %d  warmup: %d  iters: %d\n", parsed.positional[0].c_str(), batch,
              get_num_threads(), warmup, iters);
  std::printf("load + first run: %.1f ms\n", load_ms);
  std::printf("latency ms: median %.3f  p10 %.3f  p90 %.3f  min %.3f\n", median, percentile(times_ms, 0.1),
              percentile(times_ms, 0.9), times_ms.front());
  std::printf("throughput: %.2f samples/s\n", 1000.0 * batch / median);
  return 0;
}

}  // namespace kiln
