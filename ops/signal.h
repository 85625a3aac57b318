// The signal ops' parameters as shape inference validated them, so kernels read them instead of
// parsing attributes again: DFT and STFT (opset 17; DFT-20 takes its axis as an input), the Hann,
// Hamming and Blackman windows, and MelWeightMatrix. Complex values are stored as a trailing dim
// of 2 (real, imaginary); a trailing dim of 1 holds a real signal.
#pragma once

#include <cstdint>

#include "ops/op_spec.h"

namespace kiln {

struct DftParams {
  int64_t axis = 1;            // the transformed dim of the input, in [0, rank - 2]
  int64_t length = 0;          // the transform's length n: dft_length, else the axis' size
  int64_t output_length = 0;   // n, or n / 2 + 1 when onesided
  bool inverse = false;        // e^{+2 pi i jk / n}, scaled by 1 / n
  bool onesided = false;       // only the first n / 2 + 1 bins (real input only)
  bool complex_input = false;  // the input's last dim is 2, not 1
};

// Validates a DFT node; the optional dft_length (and, from opset 20, axis) must be plan-time constants.
DftParams dft_params(const OpSpec& spec);

struct StftParams {
  int64_t frame_step = 0;    // samples between the starts of successive frames
  int64_t frame_length = 0;  // samples per frame, the DFT's length
  int64_t frames = 0;        // 1 + (signal length - frame_length) / frame_step
  int64_t bins = 0;          // frame_length, or frame_length / 2 + 1 when onesided
  bool onesided = true;
  bool complex_input = false;
  bool has_window = false;
};

StftParams stft_params(const OpSpec& spec);

enum class WindowKind { hann, hamming, blackman };

struct WindowFunctionParams {
  WindowKind kind = WindowKind::hann;
  int64_t size = 0;
  bool periodic = true;  // a window of size + 1 points without its last (for spectral analysis)
  DType dtype = DType::f32;
};

WindowFunctionParams window_function_params(const OpSpec& spec);

struct MelParams {
  int64_t num_mel_bins = 0;
  int64_t dft_length = 0;
  DType dtype = DType::f32;
};

MelParams mel_params(const OpSpec& spec);

// Throws invalid_argument unless 0 <= lower < upper <= sample_rate / 2 and sample_rate > 0: ONNX's
// reference indexes the matrix by these bins and fails (or wraps around) outside that range. The
// kernel checks values only known at run time with it too.
void check_mel_range(double sample_rate, double lower_edge_hertz, double upper_edge_hertz);

}  // namespace kiln
