#include <algorithm>
#include <chrono>

#include "core/mapped_file.h"
#include "graph/passes/passes.h"
#include "graph/subgraph_runner.h"
#include "ops/attention.h"
#include "runtime/cpu_info.h"

namespace kiln {
namespace {

// bf16 runs only where the ISA tier in effect has bf16 dot products (AVX512_BF16 or AMX); a library
// would emulate it elsewhere, slower than float32. There the plan is exactly the float32 plan (the
// same kernels on every backend), and each affected step carries this note.
bool bf16_in_effect() {
  return isa_in_effect() >= Isa::avx512_bf16;
}

std::string bf16_fallback_note() {
  const IsaChoice& isa = isa_choice();
  return str_cat("precision bf16 requested, float32 used: the ISA in effect (", isa_name(isa.isa), ", from ",
                 isa.source, ") has no bf16 dot products (AVX512_BF16 or AMX)");
}

// How a step's output of logical `info` in `layout` is stored: shape and dtype of the tensor it writes.
TensorInfo stored_info(const TensorInfo& info, Layout layout) {
  TensorInfo stored{stored_dtype(info.dtype, layout), stored_shape(info.shape, layout), {}};
  stored.kind = info.kind;
  stored.shape_known = info.shape_known;
  return stored;
}

// The precision setting of the op families that have one (kiln's attention op runs products).
std::string_view precision_setting(std::string_view op_type) {
  if (op_type == "Conv") return "conv_precision";
  if (op_type == "MatMul" || op_type == "Gemm" || op_type == kAttentionOp) return "matmul_precision";
  return {};
}

// The settings a step's selection consulted besides the candidate list: its precision setting and
// the options for its op of every backend asked, as "conv_algorithm=auto".
std::vector<std::string> consulted_settings(const Settings& settings, const OpSpec& op,
                                            const StepRecord& record) {
  std::vector<std::string> consulted;
  const std::string_view precision = precision_setting(op.op_type);
  if (!precision.empty() && (is_default_domain(op.domain) || op.op_type == kAttentionOp)) {
    const SettingSlot& slot = find_setting(precision);
    consulted.push_back(str_cat(slot.name, "=", setting_value_text(slot, settings.value(slot.slot))));
  }
  std::vector<std::string_view> asked = {record.backend};
  for (const std::vector<Refusal>* refusals : {&record.decision.refusals, &record.fused_form_refusals}) {
    for (const Refusal& refusal : *refusals) asked.push_back(refusal.backend);
  }
  for (std::string& option : consulted_options(settings, op.op_type, asked))
    consulted.push_back(std::move(option));
  return consulted;
}

// Whether `a` can run in `b`'s place in a built plan: the same layouts, in-place input and way of
// producing outputs, and no input `b` copied at plan time (the plan does not feed it) that `a`
// reads when it runs.
bool interchangeable(const Kernel& a, const Kernel& b, size_t inputs, size_t outputs) {
  if (a.in_place_input() != b.in_place_input() || a.is_view() != b.is_view() ||
      a.sizes_outputs() != b.sizes_outputs())
    return false;
  for (size_t i = 0; i < inputs; ++i) {
    if (a.input_layout(i) != b.input_layout(i)) return false;
    if (b.copied_at_plan_time(i) && !a.copied_at_plan_time(i)) return false;
  }
  for (size_t o = 0; o < outputs; ++o) {
    if (a.output_layout(o) != b.output_layout(o)) return false;
  }
  return true;
}

}  // namespace

Precision planned_precision(const Settings& settings, std::string_view op_type, std::string& note) {
  const std::string_view setting = precision_setting(op_type);
  if (setting.empty()) return Precision::fp32;
  const auto requested = static_cast<Precision>(settings.value(find_setting(setting).slot));
  if (requested == Precision::bf16 && !bf16_in_effect()) {
    note = bf16_fallback_note();
    return Precision::fp32;
  }
  return requested;
}

NodeForm unfused_form(const PlanState& state, const Node& node, const OpSpec& spec,
                      std::vector<TensorInfo> outputs) {
  NodeForm form;
  form.op_type = node.op_type;
  form.request.op = spec;
  form.request.precision = is_default_domain(node.domain)
                               ? planned_precision(state.settings, node.op_type, form.note)
                               : Precision::fp32;
  form.request.options = state.backend_options;
  for (const std::string& input : node.inputs) {
    const int slot = input.empty() ? -1 : state.slot_of(input);
    form.input_slots.push_back(slot);
    form.request.input_layouts.push_back(slot < 0 ? Layout::plain
                                                  : state.slots[static_cast<size_t>(slot)].layout);
  }
  form.output_names = node.outputs;
  form.outputs = std::move(outputs);
  return form;
}

void add_step(PlanState& state, NodeForm form, KernelSelection selection, double selection_ms) {
  PlanStep step;
  StepRecord& record = step.record;
  record.node_name = form.request.op.node_name;
  record.op_type = form.op_type;
  record.backend = std::string(kBackendRows[static_cast<size_t>(selection.decision.backend)].name);
  step.backend_index = selection.decision.backend;
  record.kernel = std::string(selection.kernel->name());
  if (state.weigh_factor > 0) {
    ApproximateKernel approximate = approximate_kernel(form.request, form.outputs, state.settings,
                                                       selection.decision.backend, state.weigh_factor);
    if (approximate.kernel && interchangeable(*approximate.kernel, *selection.kernel,
                                              form.request.op.inputs.size(), form.outputs.size())) {
      step.approximate_forms = std::move(approximate.forms);
      step.approximate_kernel = std::move(approximate.kernel);
    }
  }
  record.decision = std::move(selection.decision);
  record.unfused = std::move(form.unfused);
  record.fused_form_refusals = std::move(form.fused_form_refusals);
  if (const auto refused = state.refused_forms.find(record.node_name); refused != state.refused_forms.end()) {
    record.unfused.insert(record.unfused.end(), refused->second.nodes.begin(), refused->second.nodes.end());
    record.fused_form_refusals.insert(record.fused_form_refusals.end(), refused->second.refusals.begin(),
                                      refused->second.refusals.end());
    state.refused_forms.erase(refused);
  }
  for (std::string* note : {&form.note, &selection.note}) {
    if (!note->empty()) record.notes.push_back(std::move(*note));
  }
  if (const auto rewrite = state.node_notes.find(record.node_name); rewrite != state.node_notes.end())
    record.notes.push_back(rewrite->second);
  // What each subgraph's plans hold (the steps the profiler shows under this one).
  for (const auto& [name, subgraph] : form.request.op.subgraphs) {
    if (const auto* planned = dynamic_cast<const PlannedSubgraph*>(subgraph.get()))
      record.notes.push_back(str_cat("subgraph '", name, "': ", planned->summary()));
  }
  if (selection.kernel->sizes_outputs()) {
    const bool bounded = std::any_of(form.outputs.begin(), form.outputs.end(),
                                     [](const TensorInfo& output) { return output.is_static_tensor(); });
    record.notes.push_back(
        bounded ? "output sized at run time: its size depends on the input values (the planned "
                  "shape is a bound)"
                : "outputs made when it runs: their shapes, or the sequences they are, are the run's");
  }
  record.settings = consulted_settings(state.settings, form.request.op, record);
  record.quantization = quantization_summary(form.request.op);
  record.creation_ms = selection_ms;
  for (const Node* follower : form.fused) record.fused.push_back({follower->op_type, follower->name});

  const Kernel& kernel = *selection.kernel;
  const std::vector<TensorInfo>& inputs = form.request.op.inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    int slot = i < form.input_slots.size() ? form.input_slots[i] : -1;
    // A constant the kernel copied (reordered weights) is not needed at run time: nor are its pages
    // when it lies in a mapped model file, so the file's weights and their packed copies are not
    // all resident at once while the plan is built.
    if (slot >= 0 && kernel.copied_at_plan_time(i) &&
        state.slots[static_cast<size_t>(slot)].origin == SlotOrigin::constant) {
      slot = -1;
      if (inputs[i].value.defined())
        release_mapped_pages(inputs[i].value.raw_data(), inputs[i].value.nbytes());
    }
    // A constant the form made (folded weights) gets a slot when the kernel reads it at run time.
    if (slot < 0 && inputs[i].is_constant() && !kernel.copied_at_plan_time(i)) {
      slot = state.add_slot({}, inputs[i], SlotOrigin::constant);
      state.slots[static_cast<size_t>(slot)].name = str_cat(record.node_name, ":input", i);
    }
    if (slot >= 0) slot = slot_in_layout(state, slot, kernel.input_layout(i));
    step.inputs.push_back(slot);
    record.input_shapes.push_back(inputs[i].shape);
    record.input_dtypes.push_back(inputs[i].dtype);
    record.input_layouts.push_back(slot >= 0 ? state.slots[static_cast<size_t>(slot)].layout : Layout::plain);
  }
  const std::vector<size_t> dependencies = state.dependencies_of(step.inputs);
  for (size_t i = 0; i < form.output_names.size(); ++i) {
    const Layout layout = kernel.output_layout(i);
    TensorInfo info = form.outputs[i];
    info.value = {};
    record.output_shapes.push_back(info.shape);
    record.output_dtypes.push_back(info.dtype);
    record.output_layouts.push_back(layout);
    step.output_infos.push_back(stored_info(info, layout));
    if (form.output_names[i].empty()) {
      step.outputs.push_back(-1);
      continue;
    }
    // A view shares its first input's storage, so it inherits that input's origin.
    const SlotOrigin origin = kernel.is_view() && step.inputs.at(0) >= 0
                                  ? state.slots[static_cast<size_t>(step.inputs[0])].origin
                                  : SlotOrigin::computed;
    step.outputs.push_back(state.add_slot(form.output_names[i], info, origin, layout, dependencies));
    // A sizing kernel's tensor output planned with a bound for a shape (NonZero's); sequences and
    // unknown shapes say so in their info.
    if (kernel.sizes_outputs() && info.is_static_tensor()) {
      state.run_time_sized[form.output_names[i]] =
          str_cat("node '", record.node_name, "' (", record.op_type, ")");
    }
  }
  // The values inside a fused chain vanish; readers of the chain's last value find the step's output.
  for (const Node* follower : form.fused) state.slot_by_name[follower->outputs[0]] = step.outputs[0];
  state.fused_nodes += static_cast<int>(form.fused.size());
  for (const Node* follower : form.fused) state.fused.insert(follower);
  step.kernel = std::move(selection.kernel);
  state.steps.push_back(std::move(step));
}

void refuse_form(PlanState& state, const std::string& head, const std::vector<const Node*>& nodes,
                 std::vector<Refusal> refusals) {
  PlanState::RefusedForm& refused = state.refused_forms[head];
  for (const Node* node : nodes) refused.nodes.push_back({node->op_type, node->name});
  refused.refusals.insert(refused.refusals.end(), refusals.begin(), refusals.end());
}

bool add_step_if_taken(PlanState& state, NodeForm form) {
  const auto start = std::chrono::steady_clock::now();
  KernelSelection selection = find_kernel(form.request, form.outputs, state.settings);
  if (selection.kernel == nullptr) {
    refuse_form(state, form.request.op.node_name, form.fused, std::move(selection.decision.refusals));
    return false;
  }
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  add_step(state, std::move(form), std::move(selection), elapsed_ms);
  return true;
}

}  // namespace kiln
