// Conv: N-d convolution with groups, dilations, strides, pads and auto_pad.
#include "ops/conv.h"

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

std::vector<TensorInfo> infer_conv(const OpSpec& spec) {
  const ConvParams params = conv_params(spec);
  Shape shape = {params.batch, params.out_channels};
  shape.insert(shape.end(), params.window.output.begin(), params.window.output.end());
  return {TensorInfo{spec.input(0).dtype, shape, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"Conv", infer_conv},
};

}  // namespace

ConvParams conv_params(const OpSpec& spec) {
  expect_inputs(spec, 2, 3);
  expect_floating(spec, 0);
  const TensorInfo& x = spec.input(0);
  const TensorInfo& w = spec.input(1);
  KILN_CHECK(x.shape.size() >= 3, invalid_argument, "Conv input X must have rank >= 3 (N, C, spatial...), got shape ",
             shape_to_string(x.shape));
  KILN_CHECK(w.shape.size() == x.shape.size(), invalid_argument, "Conv weights W ", shape_to_string(w.shape),
             " must have the same rank as X ", shape_to_string(x.shape));
  expect_dtype(spec, 1, x.dtype);
  ConvParams params;
  params.batch = x.shape[0];
  params.in_channels = x.shape[1];
  params.out_channels = w.shape[0];
  params.group = spec.attrs().get_int("group", 1);
  KILN_CHECK(params.group >= 1 && params.in_channels % params.group == 0 && params.out_channels % params.group == 0,
             invalid_model, "Conv group ", params.group, " must divide input channels ", params.in_channels,
             " and output channels ", params.out_channels);
  KILN_CHECK(w.shape[1] * params.group == params.in_channels, invalid_argument, "Conv weights ",
             shape_to_string(w.shape), " expect ", w.shape[1] * params.group, " input channels with group ",
             params.group, ", X ", shape_to_string(x.shape), " has ", params.in_channels);
  params.input_spatial.assign(x.shape.begin() + 2, x.shape.end());
  std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
  if (spec.attrs().has("kernel_shape")) {
    KILN_CHECK(spec.attrs().get_ints("kernel_shape") == kernel, invalid_model, "Conv kernel_shape ",
               shape_to_string(spec.attrs().get_ints("kernel_shape")), " disagrees with weights ",
               shape_to_string(w.shape));
  }
  params.window = window_params(spec, params.input_spatial, kernel, false);
  params.has_bias = spec.has_input(2);
  if (params.has_bias) {
    expect_dtype(spec, 2, x.dtype);
    KILN_CHECK(spec.input(2).shape == Shape{params.out_channels}, invalid_argument, "Conv bias must have shape [",
               params.out_channels, "], got ", shape_to_string(spec.input(2).shape));
  }
  return params;
}

std::span<const OpSchema> conv_schemas() { return kSchemas; }

}  // namespace kiln
