// Fuzzes model loading and planning: any byte string must either plan or raise kiln::Error.
// Planning folds constants, so this also runs native kernels on whatever the bytes describe.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "core/memory_limit.h"
#include "graph/onnx_import.h"
#include "graph/plan.h"

namespace {

// Inputs larger than this are not planned: the fuzzer looks for crashes, not for big allocations.
constexpr int64_t kMaxInputElements = 1 << 20;
// Values and plan-time tables larger than this are refused as kiln errors, well under the 4 GB the
// fuzzer allows the whole process (scripts/fuzz.sh): one plan may hold several (at 1 GiB a
// 600-second run peaked at 3.3 GB).
constexpr uint64_t kPlanningMemoryLimit = uint64_t{256} << 20;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::set_planning_memory_limit(kPlanningMemoryLimit);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const kiln::Model model = kiln::parse_onnx_model(std::span<const uint8_t>(data, size), {});
    std::vector<kiln::Shape> shapes;
    for (const kiln::ValueInfo& input : model.graph.inputs) {
      kiln::Shape shape;
      for (const kiln::Dim& dim : input.shape) shape.push_back(dim.is_known() ? dim.value : 1);
      if (kiln::checked_numel(shape) > kMaxInputElements) return 0;
      shapes.push_back(shape);
    }
    kiln::Plan::build(model, shapes);
  } catch (const kiln::Error&) {
    // Rejecting bad input with an error is the expected outcome.
  }
  return 0;
}
