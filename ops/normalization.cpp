// BatchNormalization (inference), LayerNormalization, InstanceNormalization, GroupNormalization, LRN,
// LpNormalization, MeanVarianceNormalization.
#include "ops/normalization.h"

#include <string>

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

// A per-channel parameter: shape [channels], floating point.
void expect_channel_vector(const OpSpec& spec, int input, int64_t channels, const char* what) {
  expect_floating(spec, input);
  KILN_CHECK(spec.input(input).shape == Shape{channels}, invalid_argument, spec.op_type, " ", what,
             " must have shape [", channels, "], got ", shape_to_string(spec.input(input).shape));
}

std::vector<TensorInfo> infer_batch_norm(const OpSpec& spec) {
  expect_inputs(spec, 5, 5);
  expect_floating(spec, 0);
  const Shape& x = spec.input(0).shape;
  KILN_CHECK(x.size() >= 2, invalid_argument, "BatchNormalization input X must have rank >= 2, got ",
             shape_to_string(x));
  // Training mode (opset 14's attribute; before it, requesting the running-statistics outputs)
  // updates statistics from the batch: out of scope for an inference runtime.
  if (spec.opset >= 14) {
    KILN_CHECK(spec.attrs().get_int("training_mode", 0) == 0, not_implemented,
               "BatchNormalization with training_mode=1 is not supported (kiln runs inference)");
  }
  KILN_CHECK(spec.num_outputs == 1, not_implemented, "BatchNormalization declares ", spec.num_outputs,
             " outputs; the running-statistics outputs exist only in training mode, which kiln does not run");
  // Opset 7 and 8 have `spatial`: 0 gives every element of a channel's plane its own statistics,
  // so the parameters have the shape of X without its batch dim.
  const bool spatial = spec.opset >= 9 || spec.attrs().get_int("spatial", 1) != 0;
  const Shape per_activation(x.begin() + 1, x.end());
  const char* names[] = {"scale", "B", "mean", "var"};
  for (int i = 1; i < 5; ++i) {
    if (spatial) {
      expect_channel_vector(spec, i, x[1], names[i - 1]);
    } else {
      expect_floating(spec, i);
      KILN_CHECK(spec.input(i).shape == per_activation, invalid_argument, "BatchNormalization ", names[i - 1],
                 " must have shape ", shape_to_string(per_activation), " with spatial=0, got ",
                 shape_to_string(spec.input(i).shape));
    }
  }
  return {TensorInfo{spec.input(0).dtype, x, {}}};
}

std::vector<TensorInfo> infer_layer_norm(const OpSpec& spec) {
  expect_inputs(spec, 2, 3);
  expect_floating(spec, 0);
  const Shape& x = spec.input(0).shape;
  const int64_t rank = static_cast<int64_t>(x.size());
  KILN_CHECK(rank >= 1, invalid_argument, "LayerNormalization input X must have rank >= 1, got a scalar");
  const int64_t axis = normalize_axis(spec.attrs().get_int("axis", -1), rank, "LayerNormalization axis");
  // stash_type is the type the statistics are computed and returned in; kiln computes them in double
  // and returns float, which is what the default (1, float) asks for.
  const int64_t stash_type = spec.attrs().get_int("stash_type", 1);
  KILN_CHECK(stash_type == 1, not_implemented, "LayerNormalization stash_type ", stash_type,
             " is not supported (only 1, float)");
  const Shape normalized(x.begin() + axis, x.end());
  for (int i = 1; i < spec.num_inputs(); ++i) {
    if (!spec.has_input(i)) continue;
    expect_dtype(spec, i, spec.input(0).dtype);
    KILN_CHECK(checked_numel(spec.input(i).shape) == checked_numel(normalized), invalid_argument,
               "LayerNormalization ", i == 1 ? "Scale" : "B", " of shape ", shape_to_string(spec.input(i).shape),
               " does not match the normalized dims ", shape_to_string(normalized));
  }
  std::vector<TensorInfo> outputs = {TensorInfo{spec.input(0).dtype, x, {}}};
  // Mean and InvStdDev keep X's leading dims and have 1 for each normalized dim.
  Shape stats(x.begin(), x.begin() + axis);
  stats.resize(x.size(), 1);
  for (int i = 1; i < spec.num_outputs; ++i) outputs.push_back(TensorInfo{DType::f32, stats, {}});
  return outputs;
}

std::vector<TensorInfo> infer_instance_norm(const OpSpec& spec) {
  expect_inputs(spec, 3, 3);
  expect_floating(spec, 0);
  const Shape& x = spec.input(0).shape;
  KILN_CHECK(x.size() >= 3, invalid_argument, "InstanceNormalization input must have rank >= 3, got ",
             shape_to_string(x));
  expect_channel_vector(spec, 1, x[1], "scale");
  expect_channel_vector(spec, 2, x[1], "B");
  return {TensorInfo{spec.input(0).dtype, x, {}}};
}

std::vector<TensorInfo> infer_group_norm(const OpSpec& spec) {
  expect_inputs(spec, 3, 3);
  expect_floating(spec, 0);
  const Shape& x = spec.input(0).shape;
  KILN_CHECK(x.size() >= 2, invalid_argument, "GroupNormalization input must have rank >= 2, got ",
             shape_to_string(x));
  const int64_t groups = group_norm_groups(spec);
  // Opset 18 scales and shifts per group, opset 21 per channel.
  const int64_t parameters = spec.opset >= 21 ? x[1] : groups;
  expect_channel_vector(spec, 1, parameters, "scale");
  expect_channel_vector(spec, 2, parameters, "bias");
  return {TensorInfo{spec.input(0).dtype, x, {}}};
}

std::vector<TensorInfo> infer_lrn(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  expect_floating(spec, 0);
  KILN_CHECK(spec.input(0).shape.size() >= 3, invalid_argument, "LRN input must have rank >= 3 (N, C, spatial...), got ",
             shape_to_string(spec.input(0).shape));
  const int64_t size = spec.attrs().require_int("size");
  KILN_CHECK(size >= 1, invalid_model, "LRN size must be >= 1, got ", size);
  return {TensorInfo{spec.input(0).dtype, spec.input(0).shape, {}}};
}

std::vector<TensorInfo> infer_lp_norm(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  expect_floating(spec, 0);
  KILN_CHECK(!spec.input(0).shape.empty(), invalid_argument, "LpNormalization input must have rank >= 1");
  normalize_axis(spec.attrs().get_int("axis", -1), static_cast<int64_t>(spec.input(0).shape.size()),
                 "LpNormalization axis");
  const int64_t p = spec.attrs().get_int("p", 2);
  KILN_CHECK(p == 1 || p == 2, invalid_model, "LpNormalization p must be 1 or 2, got ", p);
  return {TensorInfo{spec.input(0).dtype, spec.input(0).shape, {}}};
}

std::vector<TensorInfo> infer_mean_variance_norm(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  expect_floating(spec, 0);
  mean_variance_axes(spec);
  return {TensorInfo{spec.input(0).dtype, spec.input(0).shape, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"BatchNormalization", infer_batch_norm},
    {"LayerNormalization", infer_layer_norm, 17},
    {"InstanceNormalization", infer_instance_norm},
    {"GroupNormalization", infer_group_norm, 18},
    {"LRN", infer_lrn},
    {"LpNormalization", infer_lp_norm},
    {"MeanVarianceNormalization", infer_mean_variance_norm, 9},
};

}  // namespace

int64_t group_norm_groups(const OpSpec& spec) {
  const int64_t channels = spec.input(0).shape[1];
  const int64_t groups = spec.attrs().require_int("num_groups");
  KILN_CHECK(groups >= 1 && channels % groups == 0, invalid_model, "GroupNormalization num_groups ", groups,
             " must divide the input's ", channels, " channels");
  return groups;
}

std::vector<bool> mean_variance_axes(const OpSpec& spec) {
  const auto rank = static_cast<int64_t>(spec.input(0).shape.size());
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t axis : spec.attrs().get_ints("axes", {0, 2, 3})) {
    reduced[static_cast<size_t>(normalize_axis(axis, rank, "MeanVarianceNormalization axis"))] = true;
  }
  return reduced;
}

std::span<const OpSchema> normalization_schemas() { return kSchemas; }

}  // namespace kiln
