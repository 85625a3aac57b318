// Conv: N-d convolution with groups, dilations, strides, pads and auto_pad.
#include "ops/conv.h"

#include <algorithm>
#include <string>

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

std::vector<TensorInfo> infer_conv_transpose(const OpSpec& spec) {
  const ConvTransposeParams params = conv_transpose_params(spec);
  Shape shape = {params.batch, params.out_channels};
  shape.insert(shape.end(), params.output.begin(), params.output.end());
  checked_numel(shape);
  return {TensorInfo{spec.input(0).dtype, shape, {}}};
}

std::vector<int64_t> per_dim_attribute(const OpSpec& spec, const char* name, size_t rank, int64_t fallback,
                                       int64_t minimum) {
  std::vector<int64_t> values = spec.attrs().get_ints(name, std::vector<int64_t>(rank, fallback));
  KILN_CHECK(values.size() == rank, invalid_model, spec.op_type, " attribute '", name, "' has ", values.size(),
             " values for ", rank, " spatial dims");
  for (int64_t value : values) {
    KILN_CHECK(value >= minimum, invalid_model, spec.op_type, " attribute '", name, "' must be >= ", minimum,
               ", got ", value);
  }
  return values;
}

std::vector<TensorInfo> infer_col2im(const OpSpec& spec) {
  const ConvTransposeParams params = col2im_params(spec);
  Shape shape = {params.batch, params.out_channels};
  shape.insert(shape.end(), params.output.begin(), params.output.end());
  checked_numel(shape);
  return {TensorInfo{spec.input(0).dtype, shape, {}}};
}

std::vector<int64_t> positive_dims(const OpSpec& spec, int input, const char* what) {
  const Tensor& value = spec.constant_input(input, what);
  KILN_CHECK(value.dtype() == DType::i64 && value.rank() == 1, invalid_model, "Col2Im ", what,
             " must be a 1-D int64 tensor, got ", dtype_name(value.dtype()), " ", shape_to_string(value.shape()));
  std::vector<int64_t> dims = value.to_int64_vector();
  for (int64_t dim : dims) KILN_CHECK(dim >= 1, invalid_argument, "Col2Im ", what, " must be >= 1, got ", dim);
  return dims;
}

constexpr OpSchema kSchemas[] = {
    {"Conv", infer_conv},
    {"ConvTranspose", infer_conv_transpose},
    {"Col2Im", infer_col2im, 18},
};

}  // namespace

double live_tap_share(const std::vector<int64_t>& input_spatial, const WindowParams& window) {
  // Separable: the live (tap, output) pairs of the whole window are the product of each dim's.
  double share = 1;
  for (size_t d = 0; d < window.kernel.size(); ++d) {
    int64_t live = 0;
    for (int64_t k = 0; k < window.kernel[d]; ++k) {
      for (int64_t o = 0; o < window.output[d]; ++o) {
        const int64_t at = o * window.strides[d] - window.pads_begin[d] + k * window.dilations[d];
        live += at >= 0 && at < input_spatial[d] ? 1 : 0;
      }
    }
    const int64_t pairs = window.kernel[d] * window.output[d];
    share *= pairs > 0 ? static_cast<double>(live) / static_cast<double>(pairs) : 1.0;
  }
  return share;
}

ConvParams conv_geometry(const OpSpec& spec, int x_input, int w_input) {
  const TensorInfo& x = spec.input(x_input);
  const TensorInfo& w = spec.input(w_input);
  KILN_CHECK(x.shape.size() >= 3, invalid_argument, spec.op_type,
             " input X must have rank >= 3 (N, C, spatial...), got shape ", shape_to_string(x.shape));
  KILN_CHECK(w.shape.size() == x.shape.size(), invalid_argument, spec.op_type, " weights W ",
             shape_to_string(w.shape), " must have the same rank as X ", shape_to_string(x.shape));
  ConvParams params;
  params.batch = x.shape[0];
  params.in_channels = x.shape[1];
  params.out_channels = w.shape[0];
  params.group = spec.attrs().get_int("group", 1);
  KILN_CHECK(
      params.group >= 1 && params.in_channels % params.group == 0 && params.out_channels % params.group == 0,
      invalid_model, spec.op_type, " group ", params.group, " must divide input channels ",
      params.in_channels, " and output channels ", params.out_channels);
  KILN_CHECK(w.shape[1] * params.group == params.in_channels, invalid_argument, spec.op_type, " weights ",
             shape_to_string(w.shape), " expect ", w.shape[1] * params.group, " input channels with group ",
             params.group, ", X ", shape_to_string(x.shape), " has ", params.in_channels);
  params.input_spatial.assign(x.shape.begin() + 2, x.shape.end());
  std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
  if (spec.attrs().has("kernel_shape")) {
    KILN_CHECK(spec.attrs().get_ints("kernel_shape") == kernel, invalid_model, spec.op_type, " kernel_shape ",
               shape_to_string(spec.attrs().get_ints("kernel_shape")), " disagrees with weights ",
               shape_to_string(w.shape));
  }
  params.window = window_params(spec, params.input_spatial, kernel, false);
  return params;
}

ConvParams conv_params(const OpSpec& spec) {
  expect_inputs(spec, 2, 3);
  expect_floating(spec, 0);
  expect_dtype(spec, 1, spec.input(0).dtype);
  ConvParams params = conv_geometry(spec, 0, 1);
  params.has_bias = spec.has_input(2);
  if (params.has_bias) {
    expect_dtype(spec, 2, spec.input(0).dtype);
    KILN_CHECK(spec.input(2).shape == Shape{params.out_channels}, invalid_argument, "Conv bias must have shape [",
               params.out_channels, "], got ", shape_to_string(spec.input(2).shape));
  }
  return params;
}

ConvTransposeParams conv_transpose_params(const OpSpec& spec) {
  expect_inputs(spec, 2, 3);
  expect_floating(spec, 0);
  const TensorInfo& x = spec.input(0);
  const TensorInfo& w = spec.input(1);
  KILN_CHECK(x.shape.size() >= 3, invalid_argument,
             "ConvTranspose input X must have rank >= 3 (N, C, spatial...), got shape ", shape_to_string(x.shape));
  KILN_CHECK(w.shape.size() == x.shape.size(), invalid_argument, "ConvTranspose weights W ",
             shape_to_string(w.shape), " must have the same rank as X ", shape_to_string(x.shape));
  expect_dtype(spec, 1, x.dtype);
  ConvTransposeParams params;
  params.batch = x.shape[0];
  params.in_channels = x.shape[1];
  params.group = spec.attrs().get_int("group", 1);
  KILN_CHECK(params.group >= 1 && params.in_channels % params.group == 0, invalid_model, "ConvTranspose group ",
             params.group, " must divide input channels ", params.in_channels);
  KILN_CHECK(w.shape[0] == params.in_channels, invalid_argument, "ConvTranspose weights ", shape_to_string(w.shape),
             " must have X's ", params.in_channels, " input channels in dim 0");
  params.out_channels = w.shape[1] * params.group;
  const size_t rank = x.shape.size() - 2;
  params.input_spatial.assign(x.shape.begin() + 2, x.shape.end());
  params.kernel.assign(w.shape.begin() + 2, w.shape.end());
  if (spec.attrs().has("kernel_shape")) {
    KILN_CHECK(spec.attrs().get_ints("kernel_shape") == params.kernel, invalid_model, "ConvTranspose kernel_shape ",
               shape_to_string(spec.attrs().get_ints("kernel_shape")), " disagrees with weights ",
               shape_to_string(w.shape));
  }
  params.strides = per_dim_attribute(spec, "strides", rank, 1, 1);
  params.dilations = per_dim_attribute(spec, "dilations", rank, 1, 1);
  params.output_padding = per_dim_attribute(spec, "output_padding", rank, 0, 0);
  for (size_t d = 0; d < rank; ++d) {
    KILN_CHECK(params.output_padding[d] < std::max(params.strides[d], params.dilations[d]), invalid_model,
               "ConvTranspose output_padding ", params.output_padding[d], " in dim ", d,
               " must be smaller than the stride or the dilation");
  }
  const std::string auto_pad = spec.attrs().get_string("auto_pad", "NOTSET");
  KILN_CHECK(auto_pad == "NOTSET" || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER" || auto_pad == "VALID",
             invalid_model, "ConvTranspose auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '",
             auto_pad, "'");
  std::vector<int64_t> pads = per_dim_attribute(spec, "pads", 2 * rank, 0, 0);
  const bool explicit_pads = spec.attrs().has("pads");
  // The output without any cropping: every input pixel's patch, plus output_padding.
  std::vector<int64_t> full(rank);
  for (size_t d = 0; d < rank; ++d) {
    full[d] = params.strides[d] * (params.input_spatial[d] - 1) + params.output_padding[d] +
              (params.kernel[d] - 1) * params.dilations[d] + 1;
  }
  std::vector<int64_t> wanted = spec.attrs().get_ints("output_shape");
  if (wanted.size() == rank + 2) wanted.erase(wanted.begin(), wanted.begin() + 2);  // N and C given too
  KILN_CHECK(wanted.empty() || wanted.size() == rank, invalid_model, "ConvTranspose output_shape has ",
             wanted.size(), " values for ", rank, " spatial dims");
  if (wanted.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")) {
    for (size_t d = 0; d < rank; ++d) wanted.push_back(params.input_spatial[d] * params.strides[d]);
  }
  params.pads_begin.assign(rank, 0);
  params.pads_end.assign(rank, 0);
  params.output.assign(rank, 0);
  for (size_t d = 0; d < rank; ++d) {
    if (wanted.empty()) {
      if (auto_pad == "NOTSET") {
        params.pads_begin[d] = pads[d];
        params.pads_end[d] = pads[d + rank];
      }
      params.output[d] = full[d] - params.pads_begin[d] - params.pads_end[d];
      KILN_CHECK(params.output[d] >= 1, invalid_argument, "ConvTranspose pads ", params.pads_begin[d], "+",
                 params.pads_end[d], " crop all ", full[d], " outputs of spatial dim ", d);
      continue;
    }
    // output_shape decides the pads: the difference from the full output is cropped (negative:
    // extended, where only the bias reaches), the odd one at the end except under SAME_LOWER.
    KILN_CHECK(wanted[d] >= 1, invalid_argument, "ConvTranspose output_shape ", wanted[d], " in spatial dim ", d,
               " must be >= 1");
    const int64_t total = full[d] - wanted[d];
    params.pads_begin[d] = auto_pad == "SAME_LOWER" ? total - total / 2 : total / 2;
    params.pads_end[d] = total - params.pads_begin[d];
    if (explicit_pads && auto_pad == "NOTSET") {
      KILN_CHECK(pads[d] + pads[d + rank] == total, invalid_argument, "ConvTranspose output_shape ", wanted[d],
                 " in spatial dim ", d, " contradicts pads ", pads[d], "+", pads[d + rank], " (they give ",
                 full[d] - pads[d] - pads[d + rank], ")");
      params.pads_begin[d] = pads[d];
      params.pads_end[d] = pads[d + rank];
    }
    params.output[d] = wanted[d];
  }
  params.has_bias = spec.has_input(2);
  if (params.has_bias) {
    expect_dtype(spec, 2, x.dtype);
    KILN_CHECK(spec.input(2).shape == Shape{params.out_channels}, invalid_argument,
               "ConvTranspose bias must have shape [", params.out_channels, "], got ",
               shape_to_string(spec.input(2).shape));
  }
  return params;
}

ConvTransposeParams col2im_params(const OpSpec& spec) {
  expect_inputs(spec, 3, 3);
  expect_floating(spec, 0);
  const Shape& x = spec.input(0).shape;
  KILN_CHECK(x.size() == 3, invalid_argument, "Col2Im input must have shape [N, C * prod(block_shape), L], got ",
             shape_to_string(x));
  ConvTransposeParams params;
  params.output = positive_dims(spec, 1, "image_shape");
  params.kernel = positive_dims(spec, 2, "block_shape");
  const size_t rank = params.output.size();
  KILN_CHECK(params.kernel.size() == rank, invalid_argument, "Col2Im block_shape has ", params.kernel.size(),
             " dims, image_shape ", rank);
  params.strides = per_dim_attribute(spec, "strides", rank, 1, 1);
  params.dilations = per_dim_attribute(spec, "dilations", rank, 1, 1);
  const std::vector<int64_t> pads = per_dim_attribute(spec, "pads", 2 * rank, 0, 0);
  params.pads_begin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(rank));
  params.pads_end.assign(pads.begin() + static_cast<std::ptrdiff_t>(rank), pads.end());
  params.output_padding.assign(rank, 0);
  int64_t windows = 1;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t extent = (params.kernel[d] - 1) * params.dilations[d] + 1;
    const int64_t padded = params.output[d] + params.pads_begin[d] + params.pads_end[d];
    KILN_CHECK(padded >= extent, invalid_argument, "Col2Im block of extent ", extent, " does not fit image dim ", d,
               " of size ", params.output[d], " with pads");
    params.input_spatial.push_back((padded - extent) / params.strides[d] + 1);
    windows *= params.input_spatial.back();
  }
  const int64_t block = checked_numel(params.kernel);
  KILN_CHECK(x[1] % block == 0 && x[2] == windows, invalid_argument, "Col2Im input ", shape_to_string(x),
             " must be [N, C * ", block, ", ", windows, "] for image_shape ", shape_to_string(params.output),
             " and block_shape ", shape_to_string(params.kernel));
  params.batch = x[0];
  params.out_channels = x[1] / block;
  params.in_channels = params.out_channels;
  return params;
}

std::span<const OpSchema> conv_schemas() { return kSchemas; }

}  // namespace kiln
