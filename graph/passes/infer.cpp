#include "graph/passes/passes.h"

namespace kiln {

const OpSchema& node_schema(const Node& node, const OpSpec& spec) {
  const OpSchema* schema = find_op_schema(node.op_type, node.domain);
  if (schema == nullptr) {
    fail(ErrorKind::not_implemented, "unknown op '", node.op_type, "'",
         is_default_domain(node.domain) ? "" : str_cat(" in domain '", node.domain, "'"), " at opset ",
         spec.opset, ": kiln does not implement it");
  }
  KILN_CHECK(spec.opset >= schema->since_opset, invalid_model, node.op_type, " needs opset ",
             schema->since_opset, " or later, the model imports opset ", spec.opset);
  return *schema;
}

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
  return outputs;
}

}  // namespace kiln
