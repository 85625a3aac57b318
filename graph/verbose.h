// Runtime verbose: with a verbose level of 1 a run reports each executed step and each library
// call a kernel makes (BLAS), with 2 planning also reports each planned step, on the settings'
// sink (standard output by default). Formats, comma-separated (a field holding a comma or a quote
// is quoted as CSV does):
//   kiln_verbose,info,kiln <version>,threads=<n>,isa=<tier>,backends=<name version;...>
//   kiln_verbose,run,threads:<n>,asked:<n>,budget:<n>,held by other runs:<n>,waited:<0|1>
//     (only when the thread budget gave a run fewer threads than it asked for, or made it wait)
//   kiln_verbose,exec,<backend>,<op>,<node>,<kernel>,<dtypes>,<layouts>,<shapes>,<fused ops>,<ms>
//   kiln_verbose,plan,<backend>,<op>,<node>,<kernel>,<dtypes>,<layouts>,<shapes>,<fused ops>,<creation ms>
//   kiln_verbose,call,blas,cblas_sgemm,float32,trans:<NN|NT|TN|TT>,m:<m> n:<n>
//   k:<k>,ld:<a>;<b>;<c>,threads:<n>,<ms>
// Dtypes read "in:float32;int64 out:float32", layouts "in:nhwc;plain out:nhwc", shapes
// "in:1x3x8x8;4x3x3x3 out:1x4x8x8", fused ops "Relu 'relu1';Add 'add1'" ("-" when none). A step's
// call lines come before its exec line. The info line comes once per sink, before its first line.
#pragma once

#include <string>
#include <string_view>

#include "backends/settings.h"
#include "runtime/call_log.h"

namespace kiln {

class Plan;
struct PlanStep;

// Writes `line` to the settings' sink, after the sink's info line if it is the first.
void write_verbose_line(const Settings& settings, std::string_view line);

// The exec line of `step` taking `milliseconds`.
void report_executed_step(const Settings& settings, const PlanStep& step, double milliseconds);
// One plan line per step of `plan` whose backend's level is 2 or more.
void report_planned_steps(const Settings& settings, const Plan& plan);

// `field` as one CSV field: quoted, with quotes doubled, when it holds a comma, quote or newline.
std::string csv_field(std::string_view field);

// The call log of a run with `settings`: kernels of backends at verbose level 1 or more log
// their library calls to the settings' sink.
class VerboseCallLog final : public CallLog {
 public:
  explicit VerboseCallLog(const Settings& settings) : settings_(settings) {}
  bool wants(std::string_view backend) const override;
  void write(std::string_view line) const override { write_verbose_line(settings_, line); }

 private:
  const Settings& settings_;
};

}  // namespace kiln
