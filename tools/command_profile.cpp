// `kiln profile MODEL`: records runs with the profiler and prints where the time went, per op (or
// node, backend, kernel, shape), with self and total time, calls, GFLOP/s and memory; `--trace FILE`
// writes the event tree as a Chrome trace (Perfetto, chrome://tracing), `--json` prints the
// summary as JSON instead of the table. `kiln profile --load TRACE` reads a trace made elsewhere
// (PyTorch's Kineto JSON or legacy array, kiln's own) and prints the same table from it. `--tidy`
// adds kiln tidy's report of the recorded runs (with `--benchmark`, what each fix saves).
#include <cstdio>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "graph/random_input.h"
#include "graph/session.h"
#include "profiler/export.h"
#include "profiler/key_averages.h"
#include "profiler/profile.h"
#include "profiler/roofline.h"
#include "profiler/trace_load.h"
#include "tidy/report.h"
#include "tidy_runner/estimate.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/setting_options.h"
#include "tools/trace_args.h"

namespace kiln {
namespace {

// What a loaded trace is and what its source could not tell, before the table.
void print_loaded(const std::string& path, const profiler::Trace& trace) {
  std::printf("trace: %s (%s, %zu events on %zu threads)\n", path.c_str(), trace.source.c_str(),
              trace.events.size(), trace.threads.size());
  for (const std::string& missing : trace.unavailable) std::printf("not in the trace: %s\n", missing.c_str());
  for (const std::string& note : trace.notes) std::printf("read: %s\n", note.c_str());
}

}  // namespace

int command_profile(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> specs = with_setting_options({
      {"batch", true, "B: size of symbolic input dims (default 1)"},
      {"runs", true, "N: recorded runs (default 10)"},
      {"warmup", true, "W: unrecorded runs first (default 3)"},
      {"trace", true, "FILE: write the recorded events as a Chrome trace (Perfetto, chrome://tracing)"},
      {"group-by", true, "op|node|backend|kernel|shape: what the table's rows are (default op)"},
      {"sort-by", true,
       "KEY: self_time (default), total_time, avg_time, calls, gflops, self_memory, memory or name"},
      {"row-limit", true, "N: at most N rows (default 25; 0: all)"},
      {"no-shapes", false, "record no shapes, dtypes or layouts"},
      {"no-memory", false, "record no allocations (and no memory columns)"},
      {"no-roofline", false,
       "leave out each step's bound on this machine (measured once per CPU, see kiln info --roofline)"},
      {"json", false, "print the summary as one JSON object instead of the table"},
      {"tidy", false,
       "after the table, report kiln's runtime anti-patterns in the recorded runs (kiln tidy)"},
      {"benchmark", false,
       "with --tidy, measure what fixing each pattern saves on this machine (kiln tidy --benchmark)"},
      {"load", true,
       "TRACE: read a trace file instead of recording (PyTorch's Kineto JSON or legacy array, kiln's own or "
       "any Chrome trace)"},
      max_trace_bytes_option("with --load, "),
      {"help", false, "show this help"},
  });
  const ParsedArgs parsed = parse_args("profile", args, specs);
  if (parsed.has("help")) {
    std::printf(
        "usage: kiln profile MODEL [options]\n       kiln profile --load TRACE [options]\n\nRecords runs on "
        "seeded random inputs (or reads a trace) and prints the time per op (or node, backend, kernel, "
        "shape).\n\n%s",
        options_help(specs).c_str());
    return 0;
  }
  KILN_CHECK(parsed.has("load") || !parsed.has("max-trace-bytes"), invalid_argument,
             "--max-trace-bytes applies to --load");
  if (parsed.has("load")) {
    KILN_CHECK(parsed.positional.empty(), invalid_argument, "kiln profile --load TRACE takes no MODEL, got '",
               parsed.positional[0], "'");
    // Everything else is about recording runs: given with --load it would be silently ignored.
    for (const auto& [name, value] : parsed.options) {
      static const std::set<std::string> kLoadOptions = {"load",    "max-trace-bytes", "trace", "group-by",
                                                         "sort-by", "row-limit",       "json"};
      KILN_CHECK(kLoadOptions.count(name) != 0, invalid_argument, "kiln profile --load: --", name,
                 " applies to recording runs, not to reading a trace");
    }
    const std::string group_by = parsed.value("group-by", "op");
    const std::string sort_by = parsed.value("sort-by", "self_time");
    const profiler::GroupBy group = profiler::parse_group_by(group_by);
    const std::string path = parsed.value("load");
    const profiler::Trace trace = trace::load(path, {.max_bytes = max_trace_bytes(parsed)});
    if (parsed.has("trace")) profiler::export_chrome_trace(trace, parsed.value("trace"));
    if (parsed.has("json")) {
      std::printf("%s\n", profiler::summary_json(trace, group_by).c_str());
      return 0;
    }
    print_loaded(path, trace);
    std::fputs(profiler::key_averages(trace, group)
                   .table(sort_by, parsed.int_value("row-limit", 25, 0, 1 << 20))
                   .c_str(),
               stdout);
    return 0;
  }
  KILN_CHECK(parsed.positional.size() == 1, invalid_argument, "kiln profile expects one MODEL path, got ",
             parsed.positional.size());
  apply_setting_options(parsed);
  const int batch = parsed.int_value("batch", 1, 1, 1 << 20);
  const int runs = parsed.int_value("runs", 10, 1, 1 << 20);
  const int warmup = parsed.int_value("warmup", 3, 0, 1 << 20);
  const int row_limit = parsed.int_value("row-limit", 25, 0, 1 << 20);
  const std::string group_by = parsed.value("group-by", "op");
  const std::string sort_by = parsed.value("sort-by", "self_time");
  const profiler::GroupBy group = profiler::parse_group_by(group_by);
  KILN_CHECK(group != profiler::GroupBy::shape || !parsed.has("no-shapes"), invalid_argument,
             "--group-by shape needs shapes, which --no-shapes leaves out");
  profiler::KeyAverages({}, group, false).table(sort_by);  // an unknown key fails before any run

  KILN_CHECK(parsed.has("tidy") || !parsed.has("benchmark"), invalid_argument,
             "--benchmark applies to --tidy");
  KILN_CHECK(!parsed.has("tidy") || !parsed.has("json"), invalid_argument,
             "--tidy prints text; for JSON write --trace FILE and run kiln tidy FILE --json");
  Session session(parsed.positional[0]);
  const RandomInputs random = random_inputs(session.inputs(), batch);
  for (int i = 0; i < warmup; ++i) session.run(random.by_name);
  profiler::Profile profile(
      {.record_shapes = !parsed.has("no-shapes"), .profile_memory = !parsed.has("no-memory")});
  profile.start();
  for (int i = 0; i < runs; ++i) session.run(random.by_name);
  profiler::Trace trace = profile.stop();
  // So kiln tidy --benchmark finds the model the trace ran.
  trace.facts["model"] = std::filesystem::absolute(parsed.positional[0]).string();
  if (parsed.has("trace")) profiler::export_chrome_trace(trace, parsed.value("trace"));

  const Roofline* roofline =
      parsed.has("no-roofline") ? nullptr : &machine_roofline(profiler::trace_threads(trace));
  const Isa isa = isa_in_effect();
  if (parsed.has("json")) {
    std::printf("%s\n", profiler::summary_json(trace, group_by, roofline, isa).c_str());
    return 0;
  }
  std::printf("model: %s (batch %d, plan settings %s)\n", parsed.positional[0].c_str(), batch,
              settings_summary().c_str());
  std::fputs(profiler::runs_text(trace).c_str(), stdout);
  std::fputs(profiler::key_averages(trace, group, roofline, isa).table(sort_by, row_limit).c_str(), stdout);
  if (roofline != nullptr) {
    std::fputs(profiler::bound_totals_text(profiler::trace_bound_totals(trace, *roofline, isa), *roofline,
                                           isa, profiler::trace_threads(trace))
                   .c_str(),
               stdout);
  }
  if (parsed.has("trace")) {
    std::printf("trace: %s (%zu events; open it in https://ui.perfetto.dev or chrome://tracing)\n",
                parsed.value("trace").c_str(), trace.events.size());
  }
  if (parsed.has("tidy")) {
    tidy::TidyReport report = tidy::analyse(trace, parsed.positional[0]);
    if (parsed.has("benchmark")) tidy::estimate_savings(report, trace, {.model = parsed.positional[0]});
    std::fputs(report.text().c_str(), stdout);
  }
  return 0;
}

}  // namespace kiln
