// GatherND, ScatterND, ScatterElements, Scatter, OneHot, TopK, CumSum, Trilu, ReverseSequence.
#include "ops/indexing.h"

#include <span>

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

void expect_index_dtype(const OpSpec& spec, int input, bool int32_allowed) {
  const DType dtype = spec.input(input).dtype;
  KILN_CHECK(dtype == DType::i64 || (int32_allowed && dtype == DType::i32), type_mismatch, spec.op_type,
             " indices must be ", int32_allowed ? "int32 or int64" : "int64", ", got ", dtype_name(dtype));
}

// A scalar-like input (shape [] or [1]) known at plan time, as an integer.
int64_t scalar_input(const OpSpec& spec, int index, const char* what) {
  const Tensor& value = spec.constant_input(index, what);
  KILN_CHECK(value.numel() == 1 && value.rank() <= 1, invalid_argument, spec.op_type, " ", what,
             " must hold one value, got shape ", shape_to_string(value.shape()));
  KILN_CHECK(is_integer(value.dtype()) || is_floating(value.dtype()), type_mismatch, spec.op_type, " ", what,
             " must be numeric, got ", dtype_name(value.dtype()));
  return is_integer(value.dtype()) ? value.int_at(0) : static_cast<int64_t>(value.double_at(0));
}

std::vector<TensorInfo> infer_gather_nd(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  const GatherNdParams params = gather_nd_params(spec);
  const Shape& data = spec.input(0).shape;
  const Shape& indices = spec.input(1).shape;
  Shape shape(indices.begin(), indices.end() - 1);
  shape.insert(shape.end(), data.begin() + params.batch_dims + params.index_depth, data.end());
  return {TensorInfo{spec.input(0).dtype, shape, {}}};
}

std::vector<TensorInfo> infer_scatter_nd(const OpSpec& spec) {
  expect_inputs(spec, 3, 3);
  scatter_reduction(spec);
  expect_index_dtype(spec, 1, false);
  const TensorInfo& data = spec.input(0);
  const Shape& indices = spec.input(1).shape;
  expect_dtype(spec, 2, data.dtype);
  KILN_CHECK(!data.shape.empty() && !indices.empty(), invalid_argument,
             "ScatterND data and indices must have rank >= 1");
  const int64_t depth = indices.back();
  KILN_CHECK(depth >= 1 && depth <= static_cast<int64_t>(data.shape.size()), invalid_argument,
             "ScatterND indices' last dim ", depth, " must be in [1, ", data.shape.size(), "] (data ",
             shape_to_string(data.shape), ")");
  Shape expected(indices.begin(), indices.end() - 1);
  expected.insert(expected.end(), data.shape.begin() + depth, data.shape.end());
  KILN_CHECK(spec.input(2).shape == expected, invalid_argument, "ScatterND updates have shape ",
             shape_to_string(spec.input(2).shape), ", expected ", shape_to_string(expected), " (indices ",
             shape_to_string(indices), ", data ", shape_to_string(data.shape), ")");
  return {TensorInfo{data.dtype, data.shape, {}}};
}

std::vector<TensorInfo> infer_scatter_elements(const OpSpec& spec) {
  expect_inputs(spec, 3, 3);
  scatter_reduction(spec);
  expect_index_dtype(spec, 1, true);
  const TensorInfo& data = spec.input(0);
  expect_dtype(spec, 2, data.dtype);
  const Shape& indices = spec.input(1).shape;
  KILN_CHECK(spec.input(2).shape == indices, invalid_argument, spec.op_type, " updates have shape ",
             shape_to_string(spec.input(2).shape), ", indices ", shape_to_string(indices),
             ": they must match");
  KILN_CHECK(indices.size() == data.shape.size(), invalid_argument, spec.op_type, " indices ",
             shape_to_string(indices), " and data ", shape_to_string(data.shape), " must have the same rank");
  const auto axis = static_cast<size_t>(indexing_axis(spec));
  for (size_t d = 0; d < indices.size(); ++d) {
    KILN_CHECK(d == axis || indices[d] <= data.shape[d], invalid_argument, spec.op_type, " indices ",
               shape_to_string(indices), " exceed data ", shape_to_string(data.shape), " in dim ", d);
  }
  return {TensorInfo{data.dtype, data.shape, {}}};
}

std::vector<TensorInfo> infer_one_hot(const OpSpec& spec) {
  expect_inputs(spec, 3, 3);
  const TensorInfo& indices = spec.input(0);
  KILN_CHECK(is_integer(indices.dtype) || is_floating(indices.dtype), type_mismatch,
             "OneHot indices must be numeric, got ", dtype_name(indices.dtype));
  const TensorInfo& values = spec.input(2);
  KILN_CHECK(values.shape.size() == 1 && values.shape[0] == 2, invalid_argument,
             "OneHot values must have shape [2] (off, on), got ", shape_to_string(values.shape));
  const int64_t depth = one_hot_depth(spec);
  Shape shape = indices.shape;
  shape.insert(shape.begin() + indexing_axis(spec), depth);
  checked_numel(shape);
  return {TensorInfo{values.dtype, shape, {}}};
}

std::vector<TensorInfo> infer_topk(const OpSpec& spec) {
  expect_inputs(spec, spec.opset < 10 ? 1 : 2, spec.opset < 10 ? 1 : 2);
  const TensorInfo& x = spec.input(0);
  KILN_CHECK(is_integer(x.dtype) || is_floating(x.dtype), type_mismatch, "TopK input must be numeric, got ",
             dtype_name(x.dtype));
  Shape shape = x.shape;
  shape[static_cast<size_t>(indexing_axis(spec))] = topk_k(spec);
  return {TensorInfo{x.dtype, shape, {}}, TensorInfo{DType::i64, shape, {}}};
}

std::vector<TensorInfo> infer_cumsum(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  const TensorInfo& x = spec.input(0);
  KILN_CHECK(x.dtype == DType::f32 || x.dtype == DType::f64 || x.dtype == DType::f16 ||
                 x.dtype == DType::bf16 || x.dtype == DType::i32 || x.dtype == DType::i64 ||
                 x.dtype == DType::u32 || x.dtype == DType::u64,
             type_mismatch, "CumSum input must be a float or a 32/64-bit integer, got ", dtype_name(x.dtype));
  KILN_CHECK(!x.shape.empty(), invalid_argument, "CumSum input must have rank >= 1");
  indexing_axis(spec);
  return {TensorInfo{x.dtype, x.shape, {}}};
}

std::vector<TensorInfo> infer_trilu(const OpSpec& spec) {
  expect_inputs(spec, 1, 2);
  KILN_CHECK(spec.input(0).shape.size() >= 2, invalid_argument, "Trilu input must have rank >= 2, got ",
             shape_to_string(spec.input(0).shape));
  if (spec.has_input(1)) {
    expect_dtype(spec, 1, DType::i64);
    KILN_CHECK(spec.input(1).shape.size() <= 1 && checked_numel(spec.input(1).shape) == 1, invalid_argument,
               "Trilu k must hold one value, got shape ", shape_to_string(spec.input(1).shape));
  }
  return {TensorInfo{spec.input(0).dtype, spec.input(0).shape, {}}};
}

std::vector<TensorInfo> infer_reverse_sequence(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  const Shape& x = spec.input(0).shape;
  KILN_CHECK(x.size() >= 2, invalid_argument, "ReverseSequence input must have rank >= 2, got ",
             shape_to_string(x));
  const int64_t batch_axis = spec.attrs().get_int("batch_axis", 1);
  const int64_t time_axis = spec.attrs().get_int("time_axis", 0);
  KILN_CHECK(
      (batch_axis == 0 || batch_axis == 1) && (time_axis == 0 || time_axis == 1) && batch_axis != time_axis,
      invalid_model, "ReverseSequence batch_axis and time_axis must be 0 and 1 in some order, got ",
      batch_axis, " and ", time_axis);
  expect_dtype(spec, 1, DType::i64);
  const Shape& lens = spec.input(1).shape;
  KILN_CHECK(lens.size() == 1 && lens[0] == x[static_cast<size_t>(batch_axis)], invalid_argument,
             "ReverseSequence sequence_lens has shape ", shape_to_string(lens), ", expected [",
             x[static_cast<size_t>(batch_axis)], "] (the input's batch dim)");
  return {TensorInfo{spec.input(0).dtype, x, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"GatherND", infer_gather_nd, 11},
    {"ScatterND", infer_scatter_nd, 11},
    {"ScatterElements", infer_scatter_elements, 11},
    {"Scatter", infer_scatter_elements, 9},
    {"OneHot", infer_one_hot, 9},
    {"TopK", infer_topk, 1},
    {"CumSum", infer_cumsum, 11},
    {"Trilu", infer_trilu, 14},
    {"ReverseSequence", infer_reverse_sequence, 10},
};

}  // namespace

ScatterReduction scatter_reduction(const OpSpec& spec) {
  if (spec.op_type == "Scatter" || spec.opset < 16) return ScatterReduction::none;
  const std::string name = spec.attrs().get_string("reduction", "none");
  if (name == "none") return ScatterReduction::none;
  if (name == "add") return ScatterReduction::add;
  if (name == "mul") return ScatterReduction::mul;
  if (spec.opset >= 18 && name == "max") return ScatterReduction::max;
  if (spec.opset >= 18 && name == "min") return ScatterReduction::min;
  fail(ErrorKind::invalid_model, spec.op_type, " reduction '", name, "' is not one of none, add, mul",
       spec.opset >= 18 ? ", max, min" : "", " (opset ", spec.opset, ")");
}

GatherNdParams gather_nd_params(const OpSpec& spec) {
  expect_index_dtype(spec, 1, false);
  const Shape& data = spec.input(0).shape;
  const Shape& indices = spec.input(1).shape;
  const auto r = static_cast<int64_t>(data.size());
  const auto q = static_cast<int64_t>(indices.size());
  KILN_CHECK(r >= 1 && q >= 1, invalid_argument, "GatherND data and indices must have rank >= 1, got ",
             shape_to_string(data), " and ", shape_to_string(indices));
  GatherNdParams params;
  params.batch_dims = spec.opset >= 12 ? spec.attrs().get_int("batch_dims", 0) : 0;
  KILN_CHECK(params.batch_dims >= 0 && params.batch_dims < std::min(r, q), invalid_model,
             "GatherND batch_dims ", params.batch_dims, " must be in [0, ", std::min(r, q), ")");
  for (int64_t d = 0; d < params.batch_dims; ++d) {
    KILN_CHECK(data[d] == indices[d], invalid_argument, "GatherND data ", shape_to_string(data),
               " and indices ", shape_to_string(indices), " differ in batch dim ", d);
  }
  params.index_depth = indices.back();
  KILN_CHECK(params.index_depth >= 1 && params.index_depth <= r - params.batch_dims, invalid_argument,
             "GatherND indices' last dim ", params.index_depth, " must be in [1, ", r - params.batch_dims,
             "] (data ", shape_to_string(data), ", batch_dims ", params.batch_dims, ")");
  return params;
}

int64_t indexing_axis(const OpSpec& spec) {
  const auto rank = static_cast<int64_t>(spec.input(0).shape.size());
  if (spec.op_type == "CumSum") return normalize_axis(scalar_input(spec, 1, "axis"), rank, "CumSum axis");
  if (spec.op_type == "OneHot")
    return normalize_axis(spec.attrs().get_int("axis", -1), rank + 1, "OneHot axis");
  if (spec.op_type == "TopK") return normalize_axis(spec.attrs().get_int("axis", -1), rank, "TopK axis");
  return normalize_axis(spec.attrs().get_int("axis", 0), rank, (spec.op_type + " axis").c_str());
}

int64_t topk_k(const OpSpec& spec) {
  const int64_t k = spec.opset < 10 ? spec.attrs().require_int("k") : scalar_input(spec, 1, "K");
  const int64_t dim = spec.input(0).shape[static_cast<size_t>(indexing_axis(spec))];
  KILN_CHECK(k >= 0 && k <= dim, invalid_argument, "TopK k = ", k, " is outside [0, ", dim,
             "], the size of axis ", indexing_axis(spec), " of input ", shape_to_string(spec.input(0).shape));
  return k;
}

int64_t one_hot_depth(const OpSpec& spec) {
  const int64_t depth = scalar_input(spec, 1, "depth");
  KILN_CHECK(depth >= 1, invalid_argument, "OneHot depth must be >= 1, got ", depth);
  return depth;
}

std::span<const OpSchema> indexing_schemas() {
  return kSchemas;
}

}  // namespace kiln
