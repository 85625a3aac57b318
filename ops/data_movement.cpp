// Ops that move data without arithmetic: Concat, Split, Slice, Transpose, Gather, GatherElements,
// Tile, Pad, CenterCropPad, DepthToSpace, SpaceToDepth.
#include "ops/data_movement.h"

#include <algorithm>
#include <limits>
#include <set>

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

// Output dims computed from attribute or constant values (repeats, pads, block sizes) can be
// anything a file says; these fail instead of overflowing.
int64_t mul_dims(const OpSpec& spec, int64_t a, int64_t b) {
  int64_t result = 0;
  KILN_CHECK(!__builtin_mul_overflow(a, b, &result), invalid_argument, spec.op_type, " output dim ", a, " * ",
             b, " overflows int64");
  return result;
}

int64_t add_dims(const OpSpec& spec, int64_t a, int64_t b) {
  int64_t result = 0;
  KILN_CHECK(!__builtin_add_overflow(a, b, &result), invalid_argument, spec.op_type, " output dim ", a, " + ",
             b, " overflows int64");
  return result;
}

std::vector<TensorInfo> infer_concat(const OpSpec& spec) {
  expect_inputs(spec, 1, 1 << 16);
  const TensorInfo& first = spec.input(0);
  const int64_t rank = static_cast<int64_t>(first.shape.size());
  const int64_t axis = normalize_axis(spec.attrs().require_int("axis"), rank, "Concat axis");
  Shape shape = first.shape;
  shape[static_cast<size_t>(axis)] = 0;
  for (int i = 0; i < spec.num_inputs(); ++i) {
    const TensorInfo& input = spec.input(i);
    KILN_CHECK(input.dtype == first.dtype, type_mismatch, "Concat input ", i, " is ", dtype_name(input.dtype),
               ", input 0 is ", dtype_name(first.dtype));
    KILN_CHECK(static_cast<int64_t>(input.shape.size()) == rank, invalid_argument, "Concat input ", i,
               " has shape ", shape_to_string(input.shape), ", input 0 has ", shape_to_string(first.shape));
    for (int64_t d = 0; d < rank; ++d) {
      if (d == axis) continue;
      KILN_CHECK(input.shape[d] == first.shape[d], invalid_argument, "Concat input ", i, " has shape ",
                 shape_to_string(input.shape), ", incompatible with input 0's ", shape_to_string(first.shape),
                 " outside axis ", axis);
    }
    shape[static_cast<size_t>(axis)] += input.shape[static_cast<size_t>(axis)];
  }
  return {TensorInfo{first.dtype, shape, {}}};
}

std::vector<TensorInfo> infer_split(const OpSpec& spec) {
  expect_inputs(spec, 1, 2);
  const TensorInfo& input = spec.input(0);
  const int64_t axis =
      normalize_axis(spec.attrs().get_int("axis", 0), static_cast<int64_t>(input.shape.size()), "Split axis");
  const std::vector<int64_t> sizes = split_sizes(spec, axis, input.shape[static_cast<size_t>(axis)]);
  std::vector<TensorInfo> outputs;
  for (int64_t size : sizes) {
    Shape shape = input.shape;
    shape[static_cast<size_t>(axis)] = size;
    outputs.push_back(TensorInfo{input.dtype, shape, {}});
  }
  return outputs;
}

std::vector<TensorInfo> infer_slice(const OpSpec& spec) {
  expect_inputs(spec, 1, spec.opset < 10 ? 1 : 5);
  return {TensorInfo{spec.input(0).dtype, slice_params(spec).output, {}}};
}

std::vector<TensorInfo> infer_transpose(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  const std::vector<int64_t> perm = transpose_perm(spec);
  Shape shape;
  for (int64_t axis : perm) shape.push_back(spec.input(0).shape[static_cast<size_t>(axis)]);
  return {TensorInfo{spec.input(0).dtype, shape, {}}};
}

std::vector<TensorInfo> infer_gather(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  const TensorInfo& data = spec.input(0);
  const TensorInfo& indices = spec.input(1);
  KILN_CHECK(indices.dtype == DType::i64 || indices.dtype == DType::i32, type_mismatch,
             "Gather indices must be int32 or int64, got ", dtype_name(indices.dtype));
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  KILN_CHECK(rank >= 1, invalid_argument, "Gather data must have rank >= 1");
  const int64_t axis = normalize_axis(spec.attrs().get_int("axis", 0), rank, "Gather axis");
  Shape shape(data.shape.begin(), data.shape.begin() + axis);
  shape.insert(shape.end(), indices.shape.begin(), indices.shape.end());
  shape.insert(shape.end(), data.shape.begin() + axis + 1, data.shape.end());
  return {TensorInfo{data.dtype, shape, {}}};
}

std::vector<TensorInfo> infer_gather_elements(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  const TensorInfo& data = spec.input(0);
  const TensorInfo& indices = spec.input(1);
  KILN_CHECK(indices.dtype == DType::i64 || indices.dtype == DType::i32, type_mismatch,
             "GatherElements indices must be int32 or int64, got ", dtype_name(indices.dtype));
  KILN_CHECK(!data.shape.empty(), invalid_argument, "GatherElements data must have rank >= 1");
  KILN_CHECK(data.shape.size() == indices.shape.size(), invalid_argument, "GatherElements data ",
             shape_to_string(data.shape), " and indices ", shape_to_string(indices.shape),
             " must have the same rank");
  const size_t axis = static_cast<size_t>(normalize_axis(
      spec.attrs().get_int("axis", 0), static_cast<int64_t>(data.shape.size()), "GatherElements axis"));
  for (size_t d = 0; d < data.shape.size(); ++d) {
    // Outside the axis an index dim addresses the data dim directly, so it must not be larger.
    KILN_CHECK(d == axis || indices.shape[d] <= data.shape[d], invalid_argument, "GatherElements indices ",
               shape_to_string(indices.shape), " exceed data ", shape_to_string(data.shape), " in dim ", d);
  }
  return {TensorInfo{data.dtype, indices.shape, {}}};
}

std::vector<TensorInfo> infer_tile(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  const Shape& input = spec.input(0).shape;
  const Tensor& repeats_tensor = spec.constant_input(1, "repeats");
  KILN_CHECK(repeats_tensor.rank() == 1 && is_integer(repeats_tensor.dtype()), invalid_model,
             "Tile repeats must be a 1-D integer tensor, got ", dtype_name(repeats_tensor.dtype()), " ",
             shape_to_string(repeats_tensor.shape()));
  const std::vector<int64_t> repeats = repeats_tensor.to_int64_vector();
  KILN_CHECK(repeats.size() == input.size(), invalid_argument, "Tile repeats has ", repeats.size(),
             " entries for an input of rank ", input.size());
  Shape shape;
  for (size_t d = 0; d < input.size(); ++d) {
    KILN_CHECK(repeats[d] >= 0, invalid_argument, "Tile repeats must be >= 0, got ", repeats[d]);
    shape.push_back(mul_dims(spec, input[d], repeats[d]));
  }
  checked_numel(shape);
  return {TensorInfo{spec.input(0).dtype, shape, {}}};
}

std::vector<TensorInfo> infer_pad(const OpSpec& spec) {
  expect_inputs(spec, 1, spec.opset < 11 ? 1 : (spec.opset < 18 ? 3 : 4));
  const Shape& input = spec.input(0).shape;
  const PadParams params = pad_params(spec);
  if (spec.opset >= 11 && spec.has_input(2)) expect_dtype(spec, 2, spec.input(0).dtype);
  const size_t rank = input.size();
  Shape shape;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t size = add_dims(spec, add_dims(spec, input[d], params.pads[d]), params.pads[d + rank]);
    KILN_CHECK(size >= 0, invalid_argument, "Pad makes dim ", d, " negative");
    if (params.mode != "constant" && (params.pads[d] > 0 || params.pads[d + rank] > 0)) {
      KILN_CHECK(input[d] > 0, invalid_argument, "Pad mode '", params.mode, "' cannot pad an empty dim");
    }
    shape.push_back(size);
  }
  return {TensorInfo{spec.input(0).dtype, shape, {}}};
}

std::vector<TensorInfo> infer_center_crop_pad(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  return infer_pad(spec);
}

// CenterCropPad (opset 18) is a Pad: zeros around the input where `shape` is larger, a centred crop
// (negative pads) where it is smaller; an odd difference leaves the extra element at the end.
PadParams center_crop_pad_params(const OpSpec& spec) {
  const Shape& input = spec.input(0).shape;
  const auto rank = static_cast<int64_t>(input.size());
  const Tensor& shape = spec.constant_input(1, "shape");
  KILN_CHECK(is_integer(shape.dtype()) && shape.rank() == 1, invalid_model,
             "CenterCropPad shape must be a 1-D integer tensor, got ", dtype_name(shape.dtype()), " ",
             shape_to_string(shape.shape()));
  const std::vector<int64_t> sizes = shape.to_int64_vector();
  std::vector<int64_t> axes = spec.attrs().get_ints("axes");
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  KILN_CHECK(sizes.size() == axes.size(), invalid_argument, "CenterCropPad shape has ", sizes.size(),
             " entries for ", axes.size(), " axes");
  PadParams params;
  params.mode = "constant";
  params.pads.assign(static_cast<size_t>(2 * rank), 0);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const auto d = static_cast<size_t>(normalize_axis(axes[i], rank, "CenterCropPad axis"));
    KILN_CHECK(!seen[d], invalid_model, "CenterCropPad axes name dim ", d, " twice");
    seen[d] = true;
    KILN_CHECK(sizes[i] >= 0, invalid_argument, "CenterCropPad size ", sizes[i], " for dim ", d, " must be >= 0");
    const int64_t difference = sizes[i] - input[d];
    const int64_t begin = difference >= 0 ? difference / 2 : -((-difference) / 2);
    params.pads[d] = begin;
    params.pads[d + static_cast<size_t>(rank)] = difference - begin;
  }
  return params;
}

std::vector<TensorInfo> infer_depth_to_space(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  expect_rank(spec, 0, 4);
  const SpaceDepthParams params = space_depth_params(spec);
  const Shape& input = spec.input(0).shape;
  const int64_t block = params.block;
  const int64_t block_area = mul_dims(spec, block, block);
  KILN_CHECK(input[1] % block_area == 0, invalid_argument, "DepthToSpace channels ", input[1],
             " are not divisible by blocksize^2 = ", block_area, " (input ", shape_to_string(input), ")");
  return {TensorInfo{
      spec.input(0).dtype,
      {input[0], input[1] / block_area, mul_dims(spec, input[2], block), mul_dims(spec, input[3], block)},
      {}}};
}

std::vector<TensorInfo> infer_space_to_depth(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  expect_rank(spec, 0, 4);
  const SpaceDepthParams params = space_depth_params(spec);
  const Shape& input = spec.input(0).shape;
  const int64_t block = params.block;
  KILN_CHECK(input[2] % block == 0 && input[3] % block == 0, invalid_argument, "SpaceToDepth input ",
             shape_to_string(input), " has spatial dims not divisible by blocksize ", block);
  const int64_t depth = mul_dims(spec, input[1], mul_dims(spec, block, block));
  return {TensorInfo{spec.input(0).dtype, {input[0], depth, input[2] / block, input[3] / block}, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"Concat", infer_concat},
    {"Split", infer_split, 2},
    {"Slice", infer_slice},
    {"Transpose", infer_transpose},
    {"Gather", infer_gather},
    {"GatherElements", infer_gather_elements, 11},
    {"Tile", infer_tile, 6},
    {"Pad", infer_pad, 2},
    {"CenterCropPad", infer_center_crop_pad, 18},
    {"DepthToSpace", infer_depth_to_space},
    {"SpaceToDepth", infer_space_to_depth},
};

}  // namespace

std::vector<int64_t> split_sizes(const OpSpec& spec, int64_t axis, int64_t dim) {
  std::vector<int64_t> sizes;
  if (spec.opset < 13) {
    sizes = spec.attrs().get_ints("split");
  } else if (spec.has_input(1)) {
    sizes = spec.constant_input(1, "split").to_int64_vector();
  }
  const int64_t parts = spec.num_outputs;
  if (sizes.empty() && spec.opset >= 18 && spec.attrs().has("num_outputs")) {
    // Opset 18: ceil-sized parts, the last one smaller when the dim does not divide evenly.
    const int64_t requested = spec.attrs().get_int("num_outputs", parts);
    KILN_CHECK(requested == parts && parts > 0, invalid_model, "Split num_outputs is ", requested,
               " but the node has ", parts, " outputs");
    const int64_t chunk = (dim + parts - 1) / parts;
    KILN_CHECK(chunk * (parts - 1) <= dim, invalid_argument, "Split cannot divide dim ", axis, " of size ",
               dim, " into ", parts, " parts");
    for (int64_t i = 0; i < parts; ++i) sizes.push_back(std::clamp<int64_t>(dim - i * chunk, 0, chunk));
    return sizes;
  }
  if (sizes.empty()) {
    KILN_CHECK(parts > 0 && dim % parts == 0, invalid_argument, "Split cannot divide dim ", axis, " of size ",
               dim, " into ", parts, " equal parts");
    return std::vector<int64_t>(static_cast<size_t>(parts), dim / parts);
  }
  KILN_CHECK(static_cast<int64_t>(sizes.size()) == parts, invalid_model, "Split has ", sizes.size(),
             " sizes for ", parts, " outputs");
  int64_t total = 0;
  for (int64_t size : sizes) {
    KILN_CHECK(size >= 0, invalid_model, "Split sizes must be >= 0");
    total += size;
  }
  KILN_CHECK(total == dim, invalid_argument, "Split sizes sum to ", total, " but dim ", axis, " has size ",
             dim);
  return sizes;
}

SliceParams slice_params(const OpSpec& spec) {
  const Shape& input = spec.input(0).shape;
  const int64_t rank = static_cast<int64_t>(input.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (spec.opset < 10) {
    starts = spec.attrs().get_ints("starts");
    ends = spec.attrs().get_ints("ends");
    axes = spec.attrs().get_ints("axes");
  } else {
    starts = spec.constant_input(1, "starts").to_int64_vector();
    ends = spec.constant_input(2, "ends").to_int64_vector();
    if (spec.has_input(3)) axes = spec.constant_input(3, "axes").to_int64_vector();
    if (spec.has_input(4)) steps = spec.constant_input(4, "steps").to_int64_vector();
  }
  KILN_CHECK(starts.size() == ends.size(), invalid_model, "Slice starts and ends differ in length");
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  KILN_CHECK(axes.size() == starts.size() && steps.size() == starts.size(), invalid_model,
             "Slice starts, ends, axes and steps must have the same length");
  SliceParams params;
  params.starts.assign(static_cast<size_t>(rank), 0);
  params.steps.assign(static_cast<size_t>(rank), 1);
  params.output = input;
  std::set<int64_t> seen;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = normalize_axis(axes[i], rank, "Slice axis");
    KILN_CHECK(seen.insert(axis).second, invalid_model, "Slice axis ", axis, " appears twice");
    const int64_t dim = input[static_cast<size_t>(axis)];
    const int64_t step = steps[i];
    KILN_CHECK(step != 0, invalid_model, "Slice step must not be 0");
    // ONNX's clamping: negative indices count from the end, then indices saturate to the dim.
    auto from_end = [dim](int64_t index) { return index < 0 ? index + dim : index; };
    int64_t start = 0;
    int64_t count = 0;
    if (dim == 0) {
      count = 0;
    } else if (step > 0) {
      start = std::clamp<int64_t>(from_end(starts[i]), 0, dim);
      const int64_t end = std::clamp<int64_t>(from_end(ends[i]), 0, dim);
      count = end > start ? (end - start - 1) / step + 1 : 0;
    } else {
      start = std::clamp<int64_t>(from_end(starts[i]), 0, dim - 1);
      const int64_t end = std::clamp<int64_t>(from_end(ends[i]), -1, dim - 1);
      const int64_t stride =
          step == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -step;
      count = start > end ? (start - end - 1) / stride + 1 : 0;
    }
    params.starts[static_cast<size_t>(axis)] = count > 0 ? start : 0;
    params.steps[static_cast<size_t>(axis)] = step;
    params.output[static_cast<size_t>(axis)] = count;
  }
  return params;
}

std::vector<int64_t> transpose_perm(const OpSpec& spec) {
  const int64_t rank = static_cast<int64_t>(spec.input(0).shape.size());
  std::vector<int64_t> perm = spec.attrs().get_ints("perm");
  if (perm.empty()) {
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  }
  KILN_CHECK(static_cast<int64_t>(perm.size()) == rank, invalid_model, "Transpose perm has ", perm.size(),
             " entries for rank ", rank);
  std::vector<bool> used(static_cast<size_t>(rank), false);
  for (int64_t& axis : perm) {
    axis = normalize_axis(axis, rank, "Transpose perm entry");
    KILN_CHECK(!used[static_cast<size_t>(axis)], invalid_model, "Transpose perm repeats axis ", axis);
    used[static_cast<size_t>(axis)] = true;
  }
  return perm;
}

PadParams pad_params(const OpSpec& spec) {
  if (spec.op_type == "CenterCropPad") return center_crop_pad_params(spec);
  PadParams params;
  params.mode = spec.attrs().get_string("mode", "constant");
  const bool known_mode = params.mode == "constant" || params.mode == "reflect" || params.mode == "edge" ||
                          (params.mode == "wrap" && spec.opset >= 19);
  KILN_CHECK(known_mode, invalid_model, "Pad mode must be constant, reflect, edge",
             spec.opset >= 19 ? " or wrap" : "", ", got '", params.mode, "'");
  const Shape& input = spec.input(0).shape;
  const size_t rank = input.size();
  const std::vector<int64_t> given =
      spec.opset < 11 ? spec.attrs().get_ints("pads") : spec.constant_input(1, "pads").to_int64_vector();
  // Opset 18's optional axes say which dims `given` pads (begins then ends); the rest get none.
  std::vector<int64_t> axes;
  if (spec.opset >= 18 && spec.has_input(3)) {
    for (int64_t axis : spec.constant_input(3, "axes").to_int64_vector()) {
      axes.push_back(normalize_axis(axis, static_cast<int64_t>(rank), "Pad axis"));
    }
  } else {
    for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
  }
  const size_t count = axes.size();
  KILN_CHECK(given.size() == 2 * count, invalid_model, "Pad has ", given.size(), " pads for ", count,
             " axes (expected ", 2 * count, ")");
  params.pads.assign(2 * rank, 0);
  for (size_t i = 0; i < count; ++i) {
    const size_t axis = static_cast<size_t>(axes[i]);
    params.pads[axis] = given[i];
    params.pads[axis + rank] = given[i + count];
  }
  if (params.mode == "reflect") {
    for (size_t d = 0; d < rank; ++d) {
      const int64_t dim = input[d];
      KILN_CHECK(params.pads[d] < dim && params.pads[d + rank] < dim, invalid_argument,
                 "Pad reflect needs pads smaller than the dim (dim ", d, " has size ", dim, ", pads ",
                 params.pads[d], " and ", params.pads[d + rank], ")");
    }
  }
  return params;
}

SpaceDepthParams space_depth_params(const OpSpec& spec) {
  SpaceDepthParams params;
  params.block = spec.attrs().require_int("blocksize");
  KILN_CHECK(params.block > 0, invalid_model, spec.op_type, " blocksize must be > 0, got ", params.block);
  params.column_row_depth = false;
  if (spec.op_type == "DepthToSpace") {
    const std::string mode = spec.attrs().get_string("mode", "DCR");
    KILN_CHECK(mode == "DCR" || mode == "CRD", invalid_model, "DepthToSpace mode must be DCR or CRD, got '",
               mode, "'");
    params.column_row_depth = mode == "CRD";
  }
  return params;
}

std::span<const OpSchema> data_movement_schemas() {
  return kSchemas;
}

}  // namespace kiln
