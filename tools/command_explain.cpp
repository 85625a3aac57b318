// `kiln explain MODEL`: the plan kiln builds for a model, step by step: op and node, the backend and
// kernel chosen (as the library names its implementation), shapes with their storage layouts, the
// nodes fused into the step, and why each faster candidate refused it. `--profile N` runs the plan N
// times and adds each step's median time and a ranking of the most expensive steps; `--json` prints
// the same as one JSON object, with the fields profiler/fields.h defines; `--schema` prints that table.
#include <cstdio>

#include "core/error.h"
#include "graph/random_input.h"
#include "graph/session.h"
#include "profiler/fields.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/explain_report.h"
#include "tools/setting_options.h"

namespace kiln {

int command_explain(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> specs = with_setting_options({
      {"batch", true, "B: size of symbolic input dims (default 1)"},
      {"profile", true, "N: run the plan N times and show each step's median time"},
      {"json", false, "print the plan as one JSON object instead of text (for scripts)"},
      {"schema", false, "print the table of every field a step or trace event has (Markdown) and exit"},
      {"help", false, "show this help"},
  });
  const ParsedArgs parsed = parse_args("explain", args, specs);
  if (parsed.has("help")) {
    std::printf(
        "usage: kiln explain MODEL [options]\n\nPrints the plan: per step the kernel, layouts, shapes, fused "
        "nodes and why other backends refused.\n\n%s",
        options_help(specs).c_str());
    return 0;
  }
  if (parsed.has("schema")) {
    std::fputs(profiler::fields_markdown().c_str(), stdout);
    return 0;
  }
  KILN_CHECK(parsed.positional.size() == 1, invalid_argument, "kiln explain expects one MODEL path, got ",
             parsed.positional.size());
  apply_setting_options(parsed);
  const int batch = parsed.int_value("batch", 1, 1, 1 << 20);
  const int profile_runs = parsed.int_value("profile", 0, 0, 1 << 20);

  Session session(parsed.positional[0]);
  const RandomInputs random = random_inputs(session.inputs(), batch);
  const std::shared_ptr<const Plan> plan = session.plan_for(random.ordered);
  const std::vector<double> step_ms = profile_steps(session, random.by_name, *plan, profile_runs);
  if (parsed.has("json")) {
    std::printf("%s\n", explain_json(*plan, parsed.positional[0], batch, step_ms, profile_runs).c_str());
    return 0;
  }
  const std::string title = str_cat("plan for ", parsed.positional[0], " (batch ", batch, ", plan settings ",
                                    settings_summary(), ")");
  std::fputs(explain_text(*plan, title, step_ms, profile_runs).c_str(), stdout);
  return 0;
}

}  // namespace kiln
