// Runtime verbose: with a verbose level of 1 a run reports each executed step, with 2 planning
// also reports each planned step, on the settings' sink (standard output by default). Formats:
//   kiln_verbose,info,kiln <version>,threads=<n>,isa=<best ISA>,backends=<name version;...>
//   kiln_verbose,exec,<backend>,<op>,<node>,<kernel>,<layouts>,<shapes>,<fused ops>,<ms>
//   kiln_verbose,plan,<backend>,<op>,<node>,<kernel>,<layouts>,<shapes>,<fused ops>,<creation ms>
// Layouts read "in:nhwc;plain out:nhwc", shapes "in:1x3x8x8;4x3x3x3 out:1x4x8x8", fused ops
// "Relu 'relu1';Add 'add1'" ("-" when none). The info line comes once per process, before the
// first other line.
#pragma once

#include <string_view>

#include "backends/settings.h"

namespace kiln {

class Plan;
struct PlanStep;

// Writes `line` to the settings' sink, after the process's info line if it is the first.
void write_verbose_line(const Settings& settings, std::string_view line);

// The exec line of `step` taking `milliseconds`.
void report_executed_step(const Settings& settings, const PlanStep& step, double milliseconds);
// One plan line per step of `plan` whose backend's level is 2 or more.
void report_planned_steps(const Settings& settings, const Plan& plan);

}  // namespace kiln
