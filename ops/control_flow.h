// Parameters of the control-flow ops (If, Loop, Scan, SequenceMap) that kernels share with shape
// inference. A control-flow node's inputs past its own are the values its subgraphs read from
// enclosing graphs (the planner appends them: graph/passes/captures.cpp).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ops/op_spec.h"
#include "ops/subgraph.h"

namespace kiln {

// How many of a control-flow node's inputs are the op's own (the rest are captured values), given
// how many inputs its body takes (If: none).
int own_input_count(std::string_view op_type, int64_t opset, size_t body_inputs);
int own_input_count(const OpSpec& spec);

// Loop's limit: a trip count past this is refused when the run reaches it, and a loop whose
// condition never turns false stops there (no model iterates 16 million times; a corrupt or hostile
// count must not run for hours). A run's deadline (runtime/run_control.h) also stops it between
// iterations, and scan outputs are bounded by the machine's memory.
constexpr int64_t kMaxLoopIterations = int64_t{1} << 24;

struct ScanParams {
  int64_t num_states = 0;  // N: loop-carried state values
  int64_t num_scan_inputs = 0;
  int64_t num_scan_outputs = 0;
  bool batched = false;             // opset 8: a leading batch axis, an optional sequence_lens input first
  std::vector<int64_t> input_axes;  // per scan input, normalized
  std::vector<bool> input_reverse;
  std::vector<int64_t> output_axes;  // per scan output, normalized for the stacked rank
  std::vector<bool> output_reverse;
  int64_t trip_count = 0;  // iterations (the scan axis' length)
  int64_t batch = 1;       // opset 8's batch size
};

// Validates Scan's attributes against its inputs and the body's outputs (as `body_outputs`, or
// empty to skip the output checks).
ScanParams scan_params(const OpSpec& spec, const std::vector<TensorInfo>& body_outputs);

}  // namespace kiln
