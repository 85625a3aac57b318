// Reductions: ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceLogSum, ReduceLogSumExp, ReduceSumSquare, ArgMax, ArgMin.
#include "ops/reduce.h"

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

bool is_arg_reduction(const OpSpec& spec) { return spec.op_type == "ArgMax" || spec.op_type == "ArgMin"; }

std::vector<TensorInfo> infer_reduce(const OpSpec& spec) {
  const ReduceParams params = reduce_params(spec);
  const DType dtype = is_arg_reduction(spec) ? DType::i64 : spec.input(0).dtype;
  return {TensorInfo{dtype, params.output, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"ReduceMean", infer_reduce},      {"ReduceSum", infer_reduce},       {"ReduceMax", infer_reduce},
    {"ReduceMin", infer_reduce},       {"ReduceProd", infer_reduce},      {"ReduceL1", infer_reduce},
    {"ReduceL2", infer_reduce},        {"ReduceLogSum", infer_reduce},    {"ReduceLogSumExp", infer_reduce},
    {"ReduceSumSquare", infer_reduce}, {"ArgMax", infer_reduce},          {"ArgMin", infer_reduce},
};

}  // namespace

ReduceParams reduce_params(const OpSpec& spec) {
  const bool arg = is_arg_reduction(spec);
  expect_inputs(spec, 1, arg ? 1 : 2);
  const DType dtype = spec.input(0).dtype;
  KILN_CHECK(dtype != DType::boolean, type_mismatch, spec.op_type, " input must be numeric, got bool");
  const Shape& input = spec.input(0).shape;
  const int64_t rank = static_cast<int64_t>(input.size());
  ReduceParams params;
  params.keepdims = spec.attrs().get_int("keepdims", 1) != 0;
  params.reduced.assign(input.size(), false);
  std::vector<int64_t> axes;
  bool reduce_all = false;
  if (arg) {
    axes = {spec.attrs().get_int("axis", 0)};
  } else if ((spec.op_type == "ReduceSum" && spec.opset >= 13) || spec.opset >= 18) {
    // From opset 13 ReduceSum takes axes as an optional input; the other Reduce ops follow at 18.
    if (spec.has_input(1)) {
      expect_dtype(spec, 1, DType::i64);
      KILN_CHECK(spec.input(1).shape.size() <= 1, invalid_argument, spec.op_type,
                 " axes must be a 1-D tensor, got shape ", shape_to_string(spec.input(1).shape));
      axes = spec.constant_input(1, "axes").to_int64_vector();
    }
    if (axes.empty()) {
      if (spec.attrs().get_int("noop_with_empty_axes", 0) != 0) {
        params.output = input;
        return params;
      }
      reduce_all = true;
    }
  } else {
    KILN_CHECK(spec.num_inputs() == 1, invalid_model, spec.op_type, " at opset ", spec.opset,
               " takes axes as an attribute, not an input");
    axes = spec.attrs().get_ints("axes");
    reduce_all = axes.empty();
  }
  for (int64_t axis : axes) {
    const auto d = static_cast<size_t>(normalize_axis(axis, rank, (spec.op_type + " axis").c_str()));
    KILN_CHECK(!params.reduced[d] || arg, invalid_model, spec.op_type, " axes name dim ", d, " twice");
    params.reduced[d] = true;
  }
  if (reduce_all) params.reduced.assign(input.size(), true);
  for (size_t d = 0; d < input.size(); ++d) {
    if (!params.reduced[d]) {
      params.output.push_back(input[d]);
    } else {
      KILN_CHECK(input[d] > 0 || !arg, invalid_argument, spec.op_type, " cannot reduce an empty dim");
      if (params.keepdims) params.output.push_back(1);
    }
  }
  return params;
}

std::span<const OpSchema> reduce_schemas() { return kSchemas; }

}  // namespace kiln
