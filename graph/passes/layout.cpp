#include <chrono>

#include "graph/passes/passes.h"

namespace kiln {

int slot_in_layout(PlanState& state, int slot, Layout layout) {
  const Slot value = state.slots[static_cast<size_t>(slot)];
  if (value.layout == layout) return slot;
  const auto key = std::make_pair(slot, layout);
  if (auto it = state.reordered.find(key); it != state.reordered.end()) return it->second;

  const auto start = std::chrono::steady_clock::now();
  KernelSelection selection =
      select_reorder(value.info.shape, value.info.dtype, value.layout, layout, state.settings);
  KILN_CHECK(selection.kernel != nullptr, not_implemented, "value '", value.name, "' is stored ",
             layout_name(value.layout), " but a reader needs ", layout_name(layout),
             ", and no backend converts it (", selection.decision.refusals_text(), ")");
  PlanStep step;
  StepRecord& record = step.record;
  record.node_name = str_cat(value.name, ":to_", layout_name(layout));
  record.op_type = "Reorder";
  record.backend = std::string(kBackendRows[static_cast<size_t>(selection.decision.backend)].name);
  step.backend_index = selection.decision.backend;
  record.kernel = std::string(selection.kernel->name());
  record.decision = std::move(selection.decision);
  record.creation_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  record.input_shapes = {value.info.shape};
  record.output_shapes = {value.info.shape};
  record.input_dtypes = {value.info.dtype};
  record.output_dtypes = {value.info.dtype};
  record.input_layouts = {value.layout};
  record.output_layouts = {layout};
  step.output_infos = {
      TensorInfo{stored_dtype(value.info.dtype, layout), stored_shape(value.info.shape, layout), {}}};
  step.inputs = {slot};
  const SlotOrigin origin = selection.kernel->is_view() ? value.origin : SlotOrigin::computed;
  // Unnamed: readers find values by their graph names, and this slot is found through `reordered`.
  const int converted = state.add_slot({}, TensorInfo{value.info.dtype, value.info.shape, {}}, origin, layout,
                                       state.input_dependencies[static_cast<size_t>(slot)]);
  state.slots[static_cast<size_t>(converted)].name = record.node_name;
  step.outputs = {converted};
  step.kernel = std::move(selection.kernel);
  state.steps.push_back(std::move(step));
  ++state.reorder_steps;
  state.reordered[key] = converted;
  return converted;
}

}  // namespace kiln
