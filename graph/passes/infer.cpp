#include "core/memory_limit.h"
#include "graph/passes/passes.h"

namespace kiln {

const OpSchema& node_schema(const Node& node, const OpSpec& spec) {
  const OpSchema* schema = find_op_schema(node.op_type, node.domain);
  if (schema == nullptr) {
    // ONNX Runtime's quantized operators (QOperator format) have a standard form kiln runs.
    const bool contrib_quantized = node.domain == kMicrosoftDomain && node.op_type.starts_with("Q");
    fail(ErrorKind::not_implemented, "unknown op '", node.op_type, "'",
         is_default_domain(node.domain) ? "" : str_cat(" in domain '", node.domain, "'"), " at opset ",
         spec.opset, ": kiln does not implement it",
         contrib_quantized ? " (an ONNX Runtime contrib op: quantize the model in the QDQ format, whose "
                             "QuantizeLinear/DequantizeLinear chains kiln runs as integer steps)"
                           : "");
  }
  KILN_CHECK(spec.opset >= schema->since_opset, invalid_model, node.op_type, " needs opset ",
             schema->since_opset, " or later, the model imports opset ", spec.opset);
  return *schema;
}

namespace {

// A value larger than the machine's memory can never be allocated: refuse it here, before folding
// allocates it or a kernel builds plan-time tables sized by it.
void expect_allocatable(const Node& node, const std::vector<TensorInfo>& outputs) {
  const uint64_t memory = planning_memory_limit_bytes();
  if (memory == 0) return;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].present()) continue;
    uint64_t bytes = 0;
    const bool overflows = __builtin_mul_overflow(static_cast<uint64_t>(checked_numel(outputs[i].shape)),
                                                  static_cast<uint64_t>(dtype_size(outputs[i].dtype)), &bytes);
    KILN_CHECK(!overflows && bytes <= memory, invalid_argument, node.op_type, " output ", i, " of shape ",
               shape_to_string(outputs[i].shape), " needs more memory than this machine has (",
               memory >> 20, " MiB)");
  }
}

}  // namespace

std::vector<TensorInfo> infer_outputs(const PlanState& state, const Node& node, const OpSpec& spec,
                                      const OpSchema& schema) {
  std::vector<TensorInfo> outputs;
  try {
    outputs = schema.infer(spec);
  } catch (const MissingConstantInput& missing) {
    // A shape-defining value computed from caller inputs: ask for one of those inputs' values to be
    // bound into the plan (the session retries until the value folds).
    const int slot = state.slot_of(node.inputs.at(static_cast<size_t>(missing.input())));
    for (size_t input : state.input_dependencies[static_cast<size_t>(slot)]) {
      if (input >= state.input_values.size() || !state.input_values[input].defined()) {
        throw NeedsInputValue(input, missing.message());
      }
    }
    throw;
  }
  KILN_CHECK(outputs.size() >= node.outputs.size(), invalid_model, node.op_type, " declares ",
             node.outputs.size(), " outputs but produces at most ", outputs.size());
  outputs.resize(node.outputs.size());
  expect_allocatable(node, outputs);
  return outputs;
}

}  // namespace kiln
