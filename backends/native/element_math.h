// Helpers for elementwise kernels: 16-bit floats are computed in float and stored back.
#pragma once

#include <type_traits>

#include "core/dtype.h"

namespace kiln::native {

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

// The type arithmetic on T happens in: float for 16-bit floats, T otherwise.
template <typename T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

template <typename T>
inline compute_t<T> to_compute(T value) {
  if constexpr (std::is_same_v<T, Float16>) {
    return float16_to_float(value);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return bfloat16_to_float(value);
  } else {
    return value;
  }
}

template <typename T, typename C>
inline T from_compute(C value) {
  if constexpr (std::is_same_v<T, Float16>) {
    return float_to_float16(static_cast<float>(value));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return float_to_bfloat16(static_cast<float>(value));
  } else {
    return static_cast<T>(value);
  }
}

// Calls fn(T{}) for floating dtypes and returns fallback() for others.
template <typename Fn, typename Fallback>
decltype(auto) visit_floating(DType dtype, Fn&& fn, Fallback&& fallback) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    case DType::f16: return fn(Float16{});
    case DType::bf16: return fn(BFloat16{});
    default: return fallback();
  }
}

}  // namespace kiln::native
