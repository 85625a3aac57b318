// What fixing TorchTidy's anti-patterns in a PyTorch trace would save, measured with PyTorch itself
// on this CPU: kiln runs its embedded copy of tidy_runner/torch_benchmark.py (torch.utils.benchmark) in a
// Python that has torch, once per distinct operator call, and only where the trace names this CPU.
// TorchTidy benchmarks its fixes on CUDA only; on a CPU the fixes are their CPU forms (bf16 autocast
// for FP32MatMulPattern, the copy removed for ExtraCUDACopyPattern, dimensions padded to a multiple
// of 8 for MatMulDimInFP16Pattern).
#pragma once

#include <string>

#include "profiler/trace.h"
#include "tidy/report.h"

namespace kiln::tidy {

// The Python that runs the benchmark: KILN_TORCH_PYTHON, else Debian's /usr/bin/python3.
std::string torch_python();

// Fills report.estimates for the PyTorch patterns that matched (not estimated, with the reason,
// where the trace was recorded on another CPU or does not say which, the Python cannot run torch,
// or the fix does not apply here).
void estimate_torch_savings(TidyReport& report, const profiler::Trace& trace, const std::string& python);

}  // namespace kiln::tidy
