#include <algorithm>
#include <chrono>

#include "backends/selection.h"
#include "graph/passes/passes.h"
#include "runtime/run_control.h"

namespace kiln {
namespace {

// A node whose inputs are all constants is folded unless its outputs would be larger than both of
// these: a fixed allowance, and a multiple of its constant inputs. Casts of half-stored weights (2x)
// and dequantized int8 weights (4x) fold at any size; a Pad, Expand, Tile or Resize that blows a
// small constant up to gigabytes runs as a step instead, so planning does not allocate it.
constexpr double kFoldAllowanceBytes = 64.0 * 1024 * 1024;
constexpr double kFoldMaxGrowth = 4.0;

double bytes_of(const TensorInfo& info) {
  double elements = 1;
  for (int64_t dim : info.shape) elements *= static_cast<double>(dim);
  return elements * static_cast<double>(dtype_size(info.dtype));
}

bool worth_folding(const OpSpec& spec, const std::vector<TensorInfo>& outputs) {
  double output_bytes = 0;
  for (const TensorInfo& info : outputs) output_bytes += bytes_of(info);
  double input_bytes = 0;
  for (const TensorInfo& info : spec.inputs) {
    if (info.present()) input_bytes += bytes_of(info);
  }
  return output_bytes <= kFoldAllowanceBytes || output_bytes <= kFoldMaxGrowth * input_bytes;
}

// Folding a node may take at most this long: a Loop of many iterations over constants (or an If
// whose branch is a large computation) runs as a step instead of holding planning up. The subgraph
// runs check it between steps and Loop between iterations (runtime/run_control.h).
constexpr std::chrono::milliseconds kFoldTimeBudget{1000};

// Runs a node whose inputs are all constants with the native reference kernel, at plan time; false
// when it ran out of kFoldTimeBudget.
bool fold(const OpSpec& spec, std::vector<TensorInfo>& outputs) {
  KernelRequest request;
  request.op = spec;
  KernelOrReason offer = native_backend().create_kernel(request, outputs);
  KILN_CHECK(offer.kernel != nullptr, not_implemented, "cannot fold ", spec.op_type, ": ",
             offer.refusal.detail);
  std::vector<Tensor> inputs;
  for (const TensorInfo& info : spec.inputs) inputs.push_back(info.value);
  std::vector<Tensor> values(outputs.size());
  if (!offer.kernel->is_view() && !offer.kernel->sizes_outputs()) {
    for (size_t i = 0; i < outputs.size(); ++i) values[i] = Tensor::empty(outputs[i].dtype, outputs[i].shape);
  }
  RunControl budget;
  budget.set_timeout(kFoldTimeBudget);
  try {
    const ScopedRunControl scope(&budget);
    offer.kernel->run(inputs, values);
  } catch (const Error& error) {
    if (error.kind() == ErrorKind::deadline_exceeded) return false;
    throw;
  }
  // A data-dependent output's inferred shape was a bound; folded, its value has the real one.
  for (size_t i = 0; i < outputs.size(); ++i) {
    outputs[i].value = values[i];
    if (!values[i].defined()) continue;
    // A sequence's element shape, or a control-flow output's, is known once it is computed.
    const TensorInfo computed = info_of(values[i]);
    outputs[i].shape = computed.shape;
    outputs[i].shape_known = computed.shape_known;
  }
  return true;
}

}  // namespace

bool remove_pass_through(PlanState& state, const Node& node) {
  if (!is_default_domain(node.domain)) return false;
  // Dropout in inference forwards its input; its optional mask output must be unused.
  const bool forwards = node.op_type == "Identity" ||
                        (node.op_type == "Dropout" && (node.outputs.size() < 2 || node.outputs[1].empty()));
  if (!forwards) return false;
  state.slot_by_name[node.outputs[0]] = state.slot_of(node.inputs.at(0));
  ++state.removed_nodes;
  return true;
}

bool fold_constants(PlanState& state, const Node& node, const OpSpec& spec, const OpSchema& schema,
                    std::vector<TensorInfo>& outputs) {
  const bool all_inputs_constant =
      std::all_of(spec.inputs.begin(), spec.inputs.end(),
                  [](const TensorInfo& info) { return !info.present() || info.is_constant(); });
  const bool values_known =
      std::all_of(outputs.begin(), outputs.end(), [](const TensorInfo& info) { return info.is_constant(); });
  if (!values_known && !(schema.foldable && all_inputs_constant && worth_folding(spec, outputs)))
    return false;
  if (!values_known && !fold(spec, outputs)) return false;
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (!node.outputs[i].empty()) state.add_slot(node.outputs[i], outputs[i], SlotOrigin::constant);
  }
  ++state.folded_nodes;
  return true;
}

}  // namespace kiln
