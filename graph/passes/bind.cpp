#include <algorithm>
#include <unordered_map>

#include "graph/passes/passes.h"

namespace kiln {

void bind_constants(PlanState& state) {
  for (const auto& [name, tensor] : state.graph.initializers)
    state.add_slot(name, TensorInfo{tensor.dtype(), tensor.shape(), tensor}, SlotOrigin::constant);
}

void bind_inputs(PlanState& state) {
  const Graph& graph = state.graph;
  KILN_CHECK(state.input_shapes.size() == graph.inputs.size(), invalid_argument, "the model has ",
             graph.inputs.size(), " inputs, got shapes for ", state.input_shapes.size());
  std::unordered_map<std::string, int64_t> symbols;
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    const ValueInfo& declared = graph.inputs[i];
    const Shape& shape = state.input_shapes[i];
    KILN_CHECK(declared.dtype != DType::undefined, invalid_model, "graph input '", declared.name,
               "' has no element type");
    if (declared.kind != ValueKind::tensor) {
      // A sequence's element shape is planned on when declared in full; an optional's never (it may
      // be empty).
      TensorInfo info{declared.dtype, {}, {}};
      info.kind = declared.kind;
      info.shape_known = declared.kind == ValueKind::sequence && declared.has_shape &&
                         std::all_of(declared.shape.begin(), declared.shape.end(),
                                     [](const Dim& dim) { return dim.is_known(); });
      for (const Dim& dim : declared.shape) {
        if (info.shape_known) info.shape.push_back(dim.value);
      }
      state.input_slots.push_back(
          state.add_slot(declared.name, info, SlotOrigin::graph_input, Layout::plain, {i}));
      continue;
    }
    if (declared.has_shape) {
      KILN_CHECK(shape.size() == declared.shape.size(), invalid_argument, "input '", declared.name,
                 "' must have rank ", declared.shape.size(), " (shape ", dims_to_string(declared.shape),
                 "), got shape ", shape_to_string(shape));
      for (size_t d = 0; d < shape.size(); ++d) {
        const Dim& dim = declared.shape[d];
        if (dim.is_known()) {
          KILN_CHECK(shape[d] == dim.value, invalid_argument, "input '", declared.name, "' must have shape ",
                     dims_to_string(declared.shape), ", got ", shape_to_string(shape), " (dim ", d, ")");
        } else if (!dim.symbol.empty()) {
          auto [it, inserted] = symbols.emplace(dim.symbol, shape[d]);
          KILN_CHECK(inserted || it->second == shape[d], invalid_argument, "input '", declared.name, "' dim ",
                     d, " ('", dim.symbol, "') is ", shape[d], " but another input set '", dim.symbol,
                     "' to ", it->second);
        }
      }
    }
    checked_numel(shape);
    const Tensor value = i < state.input_values.size() ? state.input_values[i] : Tensor{};
    state.input_slots.push_back(state.add_slot(declared.name, TensorInfo{declared.dtype, shape, value},
                                               SlotOrigin::graph_input, Layout::plain, {i}));
  }
}

void bind_outputs(PlanState& state) {
  for (const ValueInfo& output : state.graph.outputs) {
    const int slot = slot_in_layout(state, state.slot_of(output.name), Layout::plain);
    const TensorInfo& info = state.slots[static_cast<size_t>(slot)].info;
    KILN_CHECK(output.dtype == DType::undefined || output.dtype == info.dtype, invalid_model,
               "graph output '", output.name, "' is declared ", dtype_name(output.dtype), " but computes ",
               dtype_name(info.dtype));
    // An optional and a value of its kind pass for each other (a Loop carrying an optional sequence
    // returns the sequence it built); other kinds must agree.
    KILN_CHECK(output.dtype == DType::undefined || held_kind(output.kind) == held_kind(info.kind),
               invalid_model, "graph output '", output.name, "' is declared a ", value_kind_name(output.kind),
               " but computes a ", value_kind_name(info.kind));
    state.output_slots.push_back(slot);
  }
}

}  // namespace kiln
