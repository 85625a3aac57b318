// Signal ops (opset 17): DFT, STFT, HannWindow, HammingWindow, BlackmanWindow and MelWeightMatrix.
// Lengths that shape an output (dft_length, frame_step, frame_length, a window's size, num_mel_bins
// and dft_length of MelWeightMatrix) must be plan-time constants; the values these ops compute are
// the native kernels' (backends/native/signal.cpp).
#include "ops/signal.h"

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/onnx_dtype.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

constexpr int64_t kOnnxFloat = 1;  // TensorProto.FLOAT, the default output_datatype

// A plan-time constant holding one integer (a scalar or a one-element tensor).
int64_t constant_int(const OpSpec& spec, int input, const char* what) {
  const TensorInfo& info = spec.input(input);
  KILN_CHECK(info.dtype == DType::i32 || info.dtype == DType::i64, type_mismatch, spec.op_type, " input ",
             input, " (", what, ") must be int32 or int64, got ", dtype_name(info.dtype));
  const Tensor& value = spec.constant_input(input, what);
  KILN_CHECK(value.numel() == 1 && value.rank() <= 1, invalid_argument, spec.op_type, " input ", input, " (",
             what, ") must be a scalar, got shape ", shape_to_string(value.shape()));
  return value.int_at(0);
}

// A 0/1 attribute.
bool flag(const OpSpec& spec, const char* name, int64_t fallback) {
  const int64_t value = spec.attrs().get_int(name, fallback);
  KILN_CHECK(value == 0 || value == 1, invalid_model, spec.op_type, " attribute '", name,
             "' must be 0 or 1, got ", value);
  return value == 1;
}

// The complex-number dim of a signal: its last, 1 (real) or 2 (real, imaginary).
bool is_complex_signal(const OpSpec& spec, const char* what) {
  const TensorInfo& input = spec.input(0);
  const int64_t components = input.shape.back();
  KILN_CHECK(components == 1 || components == 2, invalid_argument, spec.op_type, " input 0 (", what,
             ") must end in a dim of 1 (real) or 2 (real, imaginary), got shape ",
             shape_to_string(input.shape));
  return components == 2;
}

std::vector<TensorInfo> infer_dft(const OpSpec& spec) {
  const DftParams params = dft_params(spec);
  Shape shape = spec.input(0).shape;
  shape[params.axis] = params.output_length;
  shape.back() = 2;
  return {TensorInfo{spec.input(0).dtype, std::move(shape), {}}};
}

std::vector<TensorInfo> infer_stft(const OpSpec& spec) {
  const StftParams params = stft_params(spec);
  const Shape& signal = spec.input(0).shape;
  return {TensorInfo{spec.input(0).dtype, {signal[0], params.frames, params.bins, 2}, {}}};
}

std::vector<TensorInfo> infer_window(const OpSpec& spec) {
  const WindowFunctionParams params = window_function_params(spec);
  return {TensorInfo{params.dtype, {params.size}, {}}};
}

std::vector<TensorInfo> infer_mel_weight_matrix(const OpSpec& spec) {
  const MelParams params = mel_params(spec);
  return {TensorInfo{params.dtype, {params.dft_length / 2 + 1, params.num_mel_bins}, {}}};
}

// output_datatype of the windows and MelWeightMatrix: any number type, float32 by default.
DType output_datatype(const OpSpec& spec) {
  const int64_t code = spec.attrs().get_int("output_datatype", kOnnxFloat);
  const DType dtype = dtype_from_onnx(code);
  KILN_CHECK(dtype != DType::undefined && dtype != DType::boolean, invalid_model, spec.op_type,
             " attribute 'output_datatype' must name a number type (e.g. 1 for FLOAT, 11 for DOUBLE), got ",
             onnx_dtype_name(code), " (", code, ")");
  return dtype;
}

constexpr OpSchema kSchemas[] = {
    {"DFT", infer_dft, 17},
    {"STFT", infer_stft, 17},
    {"HannWindow", infer_window, 17},
    {"HammingWindow", infer_window, 17},
    {"BlackmanWindow", infer_window, 17},
    {"MelWeightMatrix", infer_mel_weight_matrix, 17},
};

}  // namespace

DftParams dft_params(const OpSpec& spec) {
  // DFT-20 moved axis from an attribute to input 2 (default -2, the last signal dim).
  const bool axis_is_input = spec.opset >= 20;
  expect_inputs(spec, 1, axis_is_input ? 3 : 2);
  expect_floating(spec, 0);
  const TensorInfo& input = spec.input(0);
  const auto rank = static_cast<int64_t>(input.shape.size());
  KILN_CHECK(rank >= 2, invalid_argument,
             "DFT input must have rank >= 2 ([batch, signal dims..., 1 or 2]), got shape ",
             shape_to_string(input.shape));
  DftParams params;
  params.complex_input = is_complex_signal(spec, "input");
  int64_t axis = 1;
  if (axis_is_input) {
    axis = spec.has_input(2) ? constant_int(spec, 2, "axis") : -2;
  } else {
    axis = spec.attrs().get_int("axis", 1);
  }
  // The last dim holds the components and is never transformed: axes lie in [-rank, -2] or [0, rank - 2].
  KILN_CHECK(axis >= -rank && axis <= rank - 2 && axis != -1, invalid_model, "DFT axis ", axis,
             " is out of range for an input of rank ", rank, " (expected [", -rank, ", -2] or [0, ", rank - 2,
             "]: the last dim holds the real and imaginary parts)");
  params.axis = axis < 0 ? axis + rank : axis;
  params.inverse = flag(spec, "inverse", 0);
  params.onesided = flag(spec, "onesided", 0);
  KILN_CHECK(!(params.onesided && params.complex_input), invalid_model,
             "DFT onesided=1 needs a real input (last dim 1): a complex input's transform has no redundant "
             "half; got shape ",
             shape_to_string(input.shape));
  if (spec.has_input(1)) {
    params.length = constant_int(spec, 1, "dft_length");
    KILN_CHECK(params.length >= 1, invalid_argument, "DFT dft_length must be >= 1, got ", params.length);
  } else {
    params.length = input.shape[params.axis];
    KILN_CHECK(params.length >= 1, invalid_argument, "DFT axis ", params.axis, " is empty (shape ",
               shape_to_string(input.shape), ") and no dft_length is given");
  }
  params.output_length = params.onesided ? params.length / 2 + 1 : params.length;
  return params;
}

StftParams stft_params(const OpSpec& spec) {
  expect_inputs(spec, 2, 4);
  expect_floating(spec, 0);
  const TensorInfo& signal = spec.input(0);
  KILN_CHECK(signal.shape.size() == 3, invalid_argument,
             "STFT signal must have rank 3 ([batch, length, 1 or 2]), got shape ",
             shape_to_string(signal.shape));
  StftParams params;
  params.complex_input = is_complex_signal(spec, "signal");
  params.frame_step = constant_int(spec, 1, "frame_step");
  KILN_CHECK(params.frame_step >= 1, invalid_argument, "STFT frame_step must be >= 1, got ",
             params.frame_step);
  const int64_t length = signal.shape[1];
  params.frame_length = length;
  if (spec.has_input(2)) {
    params.has_window = true;
    const TensorInfo& window = spec.input(2);
    KILN_CHECK(window.dtype == signal.dtype, type_mismatch, "STFT window must have the signal's dtype ",
               dtype_name(signal.dtype), ", got ", dtype_name(window.dtype));
    KILN_CHECK(window.shape.size() == 1, invalid_argument, "STFT window must have rank 1, got shape ",
               shape_to_string(window.shape));
    params.frame_length = window.shape[0];
  }
  if (spec.has_input(3)) {
    const int64_t frame_length = constant_int(spec, 3, "frame_length");
    KILN_CHECK(!params.has_window || frame_length == params.frame_length, invalid_argument,
               "STFT frame_length ", frame_length, " differs from the window's length ", params.frame_length,
               "; they must be equal");
    params.frame_length = frame_length;
  }
  KILN_CHECK(params.frame_length >= 1, invalid_argument, "STFT frame length must be >= 1, got ",
             params.frame_length);
  KILN_CHECK(params.frame_length <= length, invalid_argument, "STFT frame length ", params.frame_length,
             " is longer than the signal (", length, " samples)");
  params.frames = 1 + (length - params.frame_length) / params.frame_step;
  params.onesided = flag(spec, "onesided", 1);
  KILN_CHECK(!(params.onesided && params.complex_input), invalid_model,
             "STFT onesided=1 (the default) needs a real signal (last dim 1); set onesided=0 for a complex "
             "signal of shape ",
             shape_to_string(signal.shape));
  params.bins = params.onesided ? params.frame_length / 2 + 1 : params.frame_length;
  return params;
}

WindowFunctionParams window_function_params(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  WindowFunctionParams params;
  params.kind = spec.op_type == "HammingWindow"    ? WindowKind::hamming
                : spec.op_type == "BlackmanWindow" ? WindowKind::blackman
                                                   : WindowKind::hann;
  params.size = constant_int(spec, 0, "size");
  KILN_CHECK(params.size >= 0, invalid_argument, spec.op_type, " size must be >= 0, got ", params.size);
  params.periodic = flag(spec, "periodic", 1);
  params.dtype = output_datatype(spec);
  return params;
}

MelParams mel_params(const OpSpec& spec) {
  expect_inputs(spec, 5, 5);
  MelParams params;
  params.num_mel_bins = constant_int(spec, 0, "num_mel_bins");
  KILN_CHECK(params.num_mel_bins >= 1, invalid_argument, "MelWeightMatrix num_mel_bins must be >= 1, got ",
             params.num_mel_bins);
  params.dft_length = constant_int(spec, 1, "dft_length");
  KILN_CHECK(params.dft_length >= 1, invalid_argument, "MelWeightMatrix dft_length must be >= 1, got ",
             params.dft_length);
  const TensorInfo& sample_rate = spec.input(2);
  KILN_CHECK(is_integer(sample_rate.dtype), type_mismatch,
             "MelWeightMatrix input 2 (sample_rate) must be int32 or int64, got ",
             dtype_name(sample_rate.dtype));
  const char* const edge_names[] = {"lower_edge_hertz", "upper_edge_hertz"};
  for (int i = 3; i < 5; ++i) {
    KILN_CHECK(is_floating(spec.input(i).dtype), type_mismatch, "MelWeightMatrix input ", i, " (",
               edge_names[i - 3], ") must be floating point, got ", dtype_name(spec.input(i).dtype));
  }
  for (int i = 2; i < 5; ++i) {
    KILN_CHECK(checked_numel(spec.input(i).shape) == 1, invalid_argument, "MelWeightMatrix input ", i,
               " must be a scalar, got shape ", shape_to_string(spec.input(i).shape));
  }
  // The range is checked here when it is known at plan time, else by the kernel when it runs.
  if (spec.input(2).is_constant() && spec.input(3).is_constant() && spec.input(4).is_constant()) {
    check_mel_range(spec.input(2).value.double_at(0), spec.input(3).value.double_at(0),
                    spec.input(4).value.double_at(0));
  }
  params.dtype = output_datatype(spec);
  return params;
}

void check_mel_range(double sample_rate, double lower_edge_hertz, double upper_edge_hertz) {
  KILN_CHECK(sample_rate > 0, invalid_argument, "MelWeightMatrix sample_rate must be > 0, got ", sample_rate);
  KILN_CHECK(
      lower_edge_hertz >= 0 && lower_edge_hertz < upper_edge_hertz && upper_edge_hertz <= sample_rate / 2,
      invalid_argument, "MelWeightMatrix needs 0 <= lower_edge_hertz < upper_edge_hertz <= sample_rate / 2 (",
      sample_rate / 2, " Hz), got lower_edge_hertz ", lower_edge_hertz, " and upper_edge_hertz ",
      upper_edge_hertz);
}

std::span<const OpSchema> signal_schemas() {
  return kSchemas;
}

}  // namespace kiln
