// kiln's corrections of TorchTidy rules that are wrong for some traces (their caveats name these):
// separate patterns under their own names, so TorchTidy's own counts stay comparable.
#pragma once

#include <memory>
#include <vector>

#include "tidy/pattern.h"

namespace kiln::tidy {

// "FP32 MatMul On TF32 GPU Pattern": float32 products (aten::mm, addmm, bmm, baddbmm) that launched
// GPU work on a GPU with TF32 (sm_80 and newer, where the trace names its GPUs) while TF32 was off.
// Skipped, with the reason, on a trace with no GPU work (TorchTidy's rule fires on every aten::mm
// there). "Extra Host To Device Copy Pattern": TorchTidy's ExtraCUDACopyPattern chain whose copy_
// did copy to a GPU (a memory copy below it); skipped on a trace with no GPU work.
std::vector<std::unique_ptr<Pattern>> corrected_patterns();

}  // namespace kiln::tidy
