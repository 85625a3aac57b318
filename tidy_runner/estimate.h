// What fixing each of kiln's runtime patterns would save, measured on this machine with kiln's own
// kernels at the shapes the trace ran (`kiln tidy --benchmark`, `kiln profile --tidy --benchmark`):
// the model is planned again under the settings the trace ran with and under the fix's, and the
// matched steps are timed in both (or, where the fix is the absence of a step, the step itself).
// TorchTidy benchmarks its fixes the same way, but only on CUDA.
#pragma once

#include <string>

#include "profiler/trace.h"
#include "tidy/report.h"

namespace kiln::tidy {

struct EstimateOptions {
  std::string model;  // the ONNX file the trace ran (empty: nothing is estimated, and the report says so)
  // Timed runs per measurement (each after a warm-up run).
  int runs = static_cast<int>(tidy_option("runs").default_value);
};

// Fills report.estimates (one per kiln pattern that matched) and each estimated match's saving. A
// PyTorch trace's patterns are estimated with PyTorch itself instead (tidy_runner/torch_estimate.h).
// Measures under the calling thread's current settings, which must plan as the trace's runs did;
// where they do not, or the trace was recorded on another CPU, or a fix cannot apply here (bf16 on a
// CPU without it), or measuring fails, the pattern is "not estimated" with the reason. Fixes outside kiln (a
// native fallback whose refusal names no setting, IdleGapPattern's idle time) are not estimated either. While
// it measures it changes what is process-wide: the thread budget (set and restored around the
// oversubscription replay) and oneDNN's primitive cache (cleared before each timed planning). Throws
// invalid_argument if the report's matches are not events of `trace`.
void estimate_savings(TidyReport& report, const profiler::Trace& trace, const EstimateOptions& options);

}  // namespace kiln::tidy
