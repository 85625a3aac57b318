// If, Loop, Scan and SequenceMap: outputs inferred by planning their subgraphs (ops/subgraph.h)
// for the inputs each iteration or branch sees.
#include "ops/control_flow.h"

#include <algorithm>

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {

int own_input_count(std::string_view op_type, int64_t opset, size_t body_inputs) {
  if (op_type == "If") return 1;
  if (op_type == "Scan" && opset < 9) return static_cast<int>(body_inputs) + 1;  // sequence_lens first
  return static_cast<int>(body_inputs);
}

int own_input_count(const OpSpec& spec) {
  return own_input_count(spec.op_type, spec.opset,
                         spec.op_type == "If" ? 0 : spec.subgraph("body").num_inputs());
}

namespace {

TensorInfo without_value(TensorInfo info) {
  info.value = {};
  return info;
}

// The info both branches (or every iteration) agree on: kind and dtype must match; the shape is
// known when it is the same.
// An optional and a value of its kind merge into the optional.
TensorInfo merge(const TensorInfo& a, const TensorInfo& b, const std::string& what) {
  KILN_CHECK(held_kind(a.kind) == held_kind(b.kind) && a.dtype == b.dtype, type_mismatch, what, " is a ",
             value_kind_name(a.kind), " of ", dtype_name(a.dtype), " one way and a ", value_kind_name(b.kind),
             " of ", dtype_name(b.dtype), " the other");
  TensorInfo merged = without_value(is_optional(a.kind) ? a : b);
  merged.shape_known = a.shape_known && b.shape_known && a.shape == b.shape;
  if (!merged.shape_known) merged.shape.clear();
  return merged;
}

void expect_scalar_of(const OpSpec& spec, int index, DType dtype, const char* what) {
  const TensorInfo& info = spec.input(index);
  KILN_CHECK(info.kind == ValueKind::tensor && info.dtype == dtype, type_mismatch, spec.op_type, " ", what,
             " must be a ", dtype_name(dtype), " tensor, got a ", value_kind_name(info.kind), " of ",
             dtype_name(info.dtype));
  KILN_CHECK(!info.shape_known || checked_numel(info.shape) == 1, invalid_argument, spec.op_type, " ", what,
             " must hold one element, got shape ", shape_to_string(info.shape));
}

std::vector<TensorInfo> infer_if(const OpSpec& spec) {
  expect_scalar_of(spec, 0, DType::boolean, "condition");
  const Subgraph& then_branch = spec.subgraph("then_branch");
  const Subgraph& else_branch = spec.subgraph("else_branch");
  KILN_CHECK(then_branch.num_inputs() == 0 && else_branch.num_inputs() == 0, invalid_model,
             "If's branches take no inputs of their own, got ", then_branch.num_inputs(), " and ",
             else_branch.num_inputs());
  KILN_CHECK(then_branch.num_outputs() == else_branch.num_outputs() &&
                 then_branch.num_outputs() == static_cast<size_t>(spec.num_outputs),
             invalid_model, "If has ", spec.num_outputs, " outputs, its then_branch ",
             then_branch.num_outputs(), " and its else_branch ", else_branch.num_outputs());
  const TensorInfo& condition = spec.input(0);
  if (condition.is_constant()) {
    const Subgraph& taken = condition.value.data<bool>()[0] ? then_branch : else_branch;
    std::vector<TensorInfo> outputs = taken.infer({});
    std::transform(outputs.begin(), outputs.end(), outputs.begin(), without_value);
    return outputs;
  }
  const std::vector<TensorInfo> then_outputs = then_branch.infer({});
  const std::vector<TensorInfo> else_outputs = else_branch.infer({});
  std::vector<TensorInfo> outputs;
  for (size_t i = 0; i < then_outputs.size(); ++i)
    outputs.push_back(merge(then_outputs[i], else_outputs[i], str_cat("If output ", i)));
  return outputs;
}

std::vector<TensorInfo> infer_loop(const OpSpec& spec) {
  const Subgraph& body = spec.subgraph("body");
  KILN_CHECK(body.num_inputs() >= 2, invalid_model,
             "a Loop body takes the iteration number and the "
             "condition first, got ",
             body.num_inputs(), " inputs");
  const size_t carried = body.num_inputs() - 2;
  KILN_CHECK(spec.inputs.size() >= body.num_inputs(), invalid_model, "Loop's body takes ", carried,
             " loop-carried values, the node gives ", spec.inputs.size() < 2 ? 0 : spec.inputs.size() - 2);
  KILN_CHECK(body.num_outputs() >= 1 + carried, invalid_model, "a Loop body returns the condition and its ",
             carried, " loop-carried values, got ", body.num_outputs(), " outputs");
  const size_t scanned = body.num_outputs() - 1 - carried;
  KILN_CHECK(static_cast<size_t>(spec.num_outputs) <= carried + scanned, invalid_model, "Loop declares ",
             spec.num_outputs, " outputs, its body gives ", carried, " loop-carried values and ", scanned,
             " scan outputs");
  if (spec.has_input(0)) expect_scalar_of(spec, 0, DType::i64, "trip count M");
  if (spec.has_input(1)) expect_scalar_of(spec, 1, DType::boolean, "condition");
  std::vector<TensorInfo> body_inputs = {TensorInfo{DType::i64, {}, {}}, TensorInfo{DType::boolean, {}, {}}};
  for (size_t i = 0; i < carried; ++i) {
    KILN_CHECK(spec.has_input(static_cast<int>(2 + i)), invalid_model, "Loop's loop-carried input ", i,
               " is missing");
    body_inputs.push_back(without_value(spec.inputs[2 + i]));
  }
  const std::vector<TensorInfo> body_outputs = body.infer(body_inputs);
  std::vector<TensorInfo> outputs;
  const std::vector<bool>& appended = body.appended_outputs();
  for (size_t i = 0; i < carried; ++i) {
    TensorInfo merged =
        merge(body_inputs[2 + i], body_outputs[1 + i], str_cat("Loop's loop-carried value ", i));
    // The body returns the rows it appends: the value grows by them every iteration.
    if (1 + i < appended.size() && appended[1 + i]) {
      merged.shape_known = false;
      merged.shape.clear();
    }
    outputs.push_back(merged);
  }
  // Scan outputs stack one slice per iteration: their length is fixed at plan time only for a
  // constant trip count that no condition can cut short.
  const TensorInfo& body_condition = body_outputs[0];
  const bool runs_to_count =
      spec.has_input(0) && spec.inputs[0].is_constant() &&
      (!spec.has_input(1) || (body_condition.is_constant() && body_condition.value.data<bool>()[0] &&
                              spec.inputs[1].is_constant() && spec.inputs[1].value.data<bool>()[0]));
  const bool carried_fixed =
      std::all_of(outputs.begin(), outputs.end(), [](const TensorInfo& info) { return info.shape_known; });
  for (size_t k = 0; k < scanned; ++k) {
    const TensorInfo& slice = body_outputs[1 + carried + k];
    KILN_CHECK(slice.kind == ValueKind::tensor, not_implemented, "Loop scan output ", k, " is a ",
               value_kind_name(slice.kind), "; kiln stacks tensors only");
    TensorInfo stacked{slice.dtype, {}, {}};
    stacked.shape_known = runs_to_count && carried_fixed && slice.shape_known;
    if (stacked.shape_known) {
      stacked.shape = slice.shape;
      stacked.shape.insert(stacked.shape.begin(), std::max<int64_t>(0, spec.inputs[0].value.int_at(0)));
    }
    outputs.push_back(stacked);
  }
  outputs.resize(static_cast<size_t>(spec.num_outputs));
  return outputs;
}

std::vector<int64_t> axes_attribute(const OpSpec& spec, const char* name, int64_t count) {
  std::vector<int64_t> values = spec.attrs().get_ints(name);
  if (values.empty()) values.assign(static_cast<size_t>(count), 0);
  KILN_CHECK(static_cast<int64_t>(values.size()) == count, invalid_model, "Scan ", name, " has ",
             values.size(), " entries for ", count, " values");
  return values;
}

}  // namespace

ScanParams scan_params(const OpSpec& spec, const std::vector<TensorInfo>& body_outputs) {
  const Subgraph& body = spec.subgraph("body");
  ScanParams params;
  params.batched = spec.opset < 9;
  params.num_scan_inputs = spec.attrs().require_int("num_scan_inputs");
  const int64_t first = params.batched ? 1 : 0;  // opset 8's sequence_lens
  KILN_CHECK(params.num_scan_inputs >= 1 && params.num_scan_inputs <= static_cast<int64_t>(body.num_inputs()),
             invalid_model, "Scan num_scan_inputs ", params.num_scan_inputs, " must be in [1, ",
             body.num_inputs(), "] (the body's inputs)");
  params.num_states = static_cast<int64_t>(body.num_inputs()) - params.num_scan_inputs;
  KILN_CHECK(static_cast<int64_t>(body.num_outputs()) >= params.num_states, invalid_model,
             "Scan's body returns ", body.num_outputs(), " outputs, fewer than its ", params.num_states,
             " state values");
  params.num_scan_outputs = static_cast<int64_t>(body.num_outputs()) - params.num_states;
  KILN_CHECK(spec.num_outputs <= params.num_states + params.num_scan_outputs, invalid_model, "Scan declares ",
             spec.num_outputs, " outputs, its body gives ", body.num_outputs());
  if (params.batched) {
    KILN_CHECK(!spec.has_input(0), not_implemented,
               "Scan-8 with sequence_lens is not supported (every batch entry must scan the full length)");
    KILN_CHECK(!spec.attrs().has("axes"), not_implemented, "Scan-8 with 'axes' is not supported");
  }
  const int64_t extra = params.batched ? 1 : 0;  // the batch axis in front of every value
  params.input_reverse.assign(static_cast<size_t>(params.num_scan_inputs), false);
  const std::vector<int64_t> directions =
      params.batched ? spec.attrs().get_ints("directions") : spec.attrs().get_ints("scan_input_directions");
  for (size_t i = 0; i < directions.size() && i < params.input_reverse.size(); ++i)
    params.input_reverse[i] = directions[i] != 0;
  params.input_axes = params.batched ? std::vector<int64_t>(static_cast<size_t>(params.num_scan_inputs), 0)
                                     : axes_attribute(spec, "scan_input_axes", params.num_scan_inputs);
  params.trip_count = -1;
  for (int64_t i = 0; i < params.num_states + params.num_scan_inputs; ++i) {
    const int index = static_cast<int>(first + i);
    const TensorInfo& input = spec.input(index);
    KILN_CHECK(input.is_static_tensor(), not_implemented, "Scan input ", index,
               " must be a tensor of planned shape");
    const int64_t rank = static_cast<int64_t>(input.shape.size()) - extra;
    if (params.batched) {
      KILN_CHECK(rank >= 0, invalid_argument, "Scan-8 input ", index, " needs a batch axis");
      params.batch = input.shape[0];
    }
    if (i < params.num_states) continue;
    int64_t& axis = params.input_axes[static_cast<size_t>(i - params.num_states)];
    axis = normalize_axis(axis, rank, "Scan scan_input_axes") + extra;
    const int64_t length = input.shape[static_cast<size_t>(axis)];
    KILN_CHECK(params.trip_count < 0 || params.trip_count == length, invalid_argument, "Scan inputs scan ",
               params.trip_count, " and ", length, " slices: they must agree");
    params.trip_count = length;
  }
  params.output_reverse.assign(static_cast<size_t>(params.num_scan_outputs), false);
  const std::vector<int64_t> output_directions = spec.attrs().get_ints("scan_output_directions");
  for (size_t i = 0; i < output_directions.size() && i < params.output_reverse.size(); ++i)
    params.output_reverse[i] = output_directions[i] != 0;
  params.output_axes = params.batched ? std::vector<int64_t>(static_cast<size_t>(params.num_scan_outputs), 0)
                                      : axes_attribute(spec, "scan_output_axes", params.num_scan_outputs);
  for (size_t k = 0; k < body_outputs.size() - std::min<size_t>(body_outputs.size(), params.num_states) &&
                     k < params.output_axes.size();
       ++k) {
    const TensorInfo& slice = body_outputs[static_cast<size_t>(params.num_states) + k];
    params.output_axes[k] =
        normalize_axis(params.output_axes[k], static_cast<int64_t>(slice.shape.size()) + 1,
                       "Scan scan_output_axes") +
        extra;
  }
  return params;
}

namespace {

std::vector<TensorInfo> infer_scan(const OpSpec& spec) {
  ScanParams params = scan_params(spec, {});
  const int64_t first = params.batched ? 1 : 0;
  std::vector<TensorInfo> body_inputs;
  for (int64_t i = 0; i < params.num_states + params.num_scan_inputs; ++i) {
    TensorInfo slice = without_value(spec.inputs[static_cast<size_t>(first + i)]);
    if (params.batched) slice.shape.erase(slice.shape.begin());
    if (i >= params.num_states) {
      const int64_t axis =
          params.input_axes[static_cast<size_t>(i - params.num_states)] - (params.batched ? 1 : 0);
      slice.shape.erase(slice.shape.begin() + axis);
    }
    body_inputs.push_back(slice);
  }
  const std::vector<TensorInfo> body_outputs = spec.subgraph("body").infer(body_inputs);
  params = scan_params(spec, body_outputs);
  std::vector<TensorInfo> outputs;
  for (int64_t i = 0; i < params.num_states; ++i) {
    TensorInfo state = merge(body_inputs[static_cast<size_t>(i)], body_outputs[static_cast<size_t>(i)],
                             str_cat("Scan state ", i));
    KILN_CHECK(state.shape_known, invalid_argument, "Scan state ", i, " changes shape from ",
               shape_to_string(body_inputs[static_cast<size_t>(i)].shape), " to ",
               shape_to_string(body_outputs[static_cast<size_t>(i)].shape), " in one iteration");
    if (params.batched) state.shape.insert(state.shape.begin(), params.batch);
    outputs.push_back(state);
  }
  for (int64_t k = 0; k < params.num_scan_outputs; ++k) {
    const TensorInfo& slice = body_outputs[static_cast<size_t>(params.num_states + k)];
    KILN_CHECK(slice.is_static_tensor(), not_implemented, "Scan output ", k,
               " must be a tensor of the same shape in every iteration");
    TensorInfo stacked{slice.dtype, slice.shape, {}};
    const int64_t axis = params.output_axes[static_cast<size_t>(k)] - (params.batched ? 1 : 0);
    stacked.shape.insert(stacked.shape.begin() + axis, params.trip_count);
    if (params.batched) stacked.shape.insert(stacked.shape.begin(), params.batch);
    outputs.push_back(stacked);
  }
  outputs.resize(static_cast<size_t>(spec.num_outputs));
  return outputs;
}

std::vector<TensorInfo> infer_sequence_map(const OpSpec& spec) {
  const Subgraph& body = spec.subgraph("body");
  const int own = static_cast<int>(body.num_inputs());
  KILN_CHECK(own >= 1 && spec.num_inputs() >= own, invalid_model, "SequenceMap's body takes ", own,
             " inputs, the node gives ", spec.num_inputs());
  KILN_CHECK(spec.input(0).kind == ValueKind::sequence, type_mismatch,
             "SequenceMap input 0 must be a sequence, got a ", value_kind_name(spec.input(0).kind));
  KILN_CHECK(body.num_outputs() == static_cast<size_t>(spec.num_outputs), invalid_model,
             "SequenceMap declares ", spec.num_outputs, " outputs, its body gives ", body.num_outputs());
  std::vector<TensorInfo> body_inputs;
  for (int i = 0; i < own; ++i) {
    TensorInfo element = without_value(spec.input(i));
    KILN_CHECK(!is_optional(element.kind), type_mismatch, "SequenceMap input ", i,
               " must be a sequence or a tensor, got a ", value_kind_name(element.kind));
    element.kind = ValueKind::tensor;
    body_inputs.push_back(element);
  }
  std::vector<TensorInfo> outputs = body.infer(body_inputs);
  for (TensorInfo& output : outputs) {
    KILN_CHECK(output.kind == ValueKind::tensor, type_mismatch,
               "SequenceMap's body must return tensors, got a ", value_kind_name(output.kind));
    output = without_value(output);
    output.kind = ValueKind::sequence;
  }
  return outputs;
}

constexpr OpSchema kSchemas[] = {
    {"If", infer_if, 1, true, true},
    {"Loop", infer_loop, 1, true, true},
    {"Scan", infer_scan, 8, true, true},
    {"SequenceMap", infer_sequence_map, 17, true, true},
};

}  // namespace

std::span<const OpSchema> control_flow_schemas() {
  return kSchemas;
}

}  // namespace kiln
