// ONNX's quantization arithmetic, in one place so every int8 kernel and the reference round alike:
// quantizing divides by the scale in float, rounds half to even and saturates to the type's range;
// requantizing an int32 accumulator multiplies it by x_scale * w_scale / y_scale (in float32),
// rounds half to even and saturates.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln {

// A value already rounded to an integer, saturated to T's range; NaN (0 / 0) becomes 0.
template <typename T>
T saturate_rounded(double value) {
  if (std::isnan(value)) return T{0};
  return static_cast<T>(std::clamp(value, static_cast<double>(std::numeric_limits<T>::min()),
                                   static_cast<double>(std::numeric_limits<T>::max())));
}

// QuantizeLinear's y = saturate(round(x / scale) + zero_point). A float x is divided in float, an
// int32 x in double (as numpy divides them); std::nearbyint rounds half to even in the default
// rounding mode, which kiln never changes. A NaN quotient lands on the zero point.
template <typename T>
T quantize_value(float x, float scale, int32_t zero_point) {
  const float rounded = std::nearbyint(x / scale);
  return saturate_rounded<T>(std::isnan(rounded) ? zero_point : static_cast<double>(rounded) + zero_point);
}
template <typename T>
T quantize_value(int32_t x, float scale, int32_t zero_point) {
  const double rounded = std::nearbyint(static_cast<double>(x) / scale);
  return saturate_rounded<T>(std::isnan(rounded) ? zero_point : rounded + zero_point);
}

inline float requantize_multiplier(float x_scale, float w_scale, float y_scale) {
  return x_scale * w_scale / y_scale;
}

// y = saturate(round((accumulator + bias) * multiplier + zero_point)), in float32 step by step as
// ONNX Runtime and oneDNN compute it: the accumulator and the bias converted to float and summed,
// scaled, the zero point added, rounded half to even. Every kiln kernel requantizes so, whichever
// CPU runs it. (ONNX's reference scales in float64; the two differ where float32 rounding meets a
// half: about one element in a million.)
template <typename T>
T requantize(int32_t accumulator, int32_t bias, float multiplier, int32_t zero_point) {
  const float sum = static_cast<float>(accumulator) + static_cast<float>(bias);
  const float scaled = sum * multiplier;
  const float shifted = scaled + static_cast<float>(zero_point);
  return saturate_rounded<T>(std::nearbyint(shifted));
}

}  // namespace kiln
