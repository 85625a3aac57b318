// Softmax's arithmetic for float rows, shared by the Softmax kernels (softmax.cpp) and attention
// (attention.cpp): e^x for x <= 0 in scalar and vector form, row maxima, sums of exps. The vector
// helpers are always inlined into functions compiled for a matching target (see simd.h).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/native/elementwise.h"
#include "backends/native/simd.h"

namespace kiln::native::softmax_math {

using elementwise::choose;

// Float partial sums move into a double accumulator after this many elements.
constexpr int64_t kFlushElements = 1024;

// ---- e^x for x <= 0 ----------------------------------------------------------------------------
// The arguments are x - max(row), so never positive (or NaN, which stays NaN). The range reduction
// is unary.cpp's fast_exp: x = n ln2 + r with |r| <= ln2/2, e^r = 1 + r + r^2 G(r), within about
// 1 ulp. Below kMinExponent the result (< 1.7e-38, subnormal) is flushed to 0, which keeps 2^n a
// normal float and changes no softmax output by more than that.
constexpr float kMinExponent = -87.0f;
constexpr float kLog2e = 1.44269504f;
constexpr float kLn2High = 0.693359375f;  // few mantissa bits: n * kLn2High is exact
constexpr float kLn2Low = -2.12194440e-4f;
constexpr float kRoundShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low bits
constexpr float kExpCoefficients[] = {1.38146104e-3f, 8.36871006e-3f, 4.16683890e-2f, 1.66665211e-1f,
                                      4.99999940e-1f};
constexpr uint32_t kExponentBias = 127;
constexpr int kMantissaBits = 23;

inline float exp_nonpositive(float x) {
  const float shifted = x * kLog2e + kRoundShift;
  const uint32_t n_bits = std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kRoundShift);
  const float n = shifted - kRoundShift;
  const float r = (x - n * kLn2High) - n * kLn2Low;
  float g = kExpCoefficients[0];
  for (int k = 1; k < 5; ++k) g = g * r + kExpCoefficients[k];
  const float result =
      (1.0f + (r + r * r * g)) * std::bit_cast<float>((n_bits + kExponentBias) << kMantissaBits);
  return choose(x < kMinExponent, 0.0f, result);
}

template <typename C>
inline C exp_of(C x) {
  if constexpr (std::is_same_v<C, float>) {
    return exp_nonpositive(x);
  } else {
    return std::exp(x);
  }
}

// Larger of the two. A row's maximum may skip a NaN: the NaN still turns its exp, the row's sum and
// so every output of the row into NaN, as numpy does.
template <typename C>
inline C max_of(C a, C b) {
  return choose(b > a, b, a);
}

// ---- float rows with GCC vectors ---------------------------------------------------------------

template <typename S>
[[gnu::always_inline]] inline typename S::F splat(float value) {
  return typename S::F{} + value;
}

template <typename S>
[[gnu::always_inline]] inline typename S::F vector_max(typename S::F a, typename S::F b) {
  return b > a ? b : a;
}

template <typename S>
[[gnu::always_inline]] inline typename S::F vector_exp_nonpositive(typename S::F x) {
  using F = typename S::F;
  using U = typename S::U;
  const F shifted = x * kLog2e + kRoundShift;
  const U n_bits = reinterpret_cast<U>(shifted) - std::bit_cast<uint32_t>(kRoundShift);
  const F n = shifted - kRoundShift;
  const F r = (x - n * kLn2High) - n * kLn2Low;
  F g = splat<S>(kExpCoefficients[0]);
  for (int k = 1; k < 5; ++k) g = g * r + kExpCoefficients[k];
  const F result = (1.0f + (r + r * r * g)) * reinterpret_cast<F>((n_bits + kExponentBias) << kMantissaBits);
  return x < kMinExponent ? F{} : result;
}

template <typename S>
[[gnu::always_inline]] inline float horizontal_max(typename S::F v) {
  float result = v[0];
  for (size_t j = 1; j < sizeof(v) / sizeof(float); ++j) result = max_of(result, v[j]);
  return result;
}

template <typename S>
[[gnu::always_inline]] inline double horizontal_sum(typename S::F v) {
  double result = 0;
  for (size_t j = 0; j < sizeof(v) / sizeof(float); ++j) result += v[j];
  return result;
}

template <typename S>
[[gnu::always_inline]] inline float row_max_simd(const float* src, int64_t n) {
  constexpr int64_t kWidth = sizeof(typename S::F) / sizeof(float);
  typename S::F m0 = splat<S>(-std::numeric_limits<float>::infinity());
  typename S::F m1 = m0;
  int64_t i = 0;
  for (; i + 2 * kWidth <= n; i += 2 * kWidth) {
    m0 = vector_max<S>(m0, load<S>(src + i));
    m1 = vector_max<S>(m1, load<S>(src + i + kWidth));
  }
  for (; i + kWidth <= n; i += kWidth) m0 = vector_max<S>(m0, load<S>(src + i));
  float result = horizontal_max<S>(vector_max<S>(m0, m1));
  for (; i < n; ++i) result = max_of(result, src[i]);
  return result;
}

// Sum of e^(src[i] - shift), also stored to dst when kStore.
template <typename S, bool kStore>
[[gnu::always_inline]] inline double exp_sum_simd(const float* src, float* dst, int64_t n, float shift) {
  using F = typename S::F;
  constexpr int64_t kWidth = sizeof(F) / sizeof(float);
  const F shift_vector = splat<S>(shift);
  double sum = 0;
  int64_t i = 0;
  while (i + kWidth <= n) {
    F s0{}, s1{};
    const int64_t flush = std::min(n, i + kFlushElements);
    for (; i + 2 * kWidth <= flush; i += 2 * kWidth) {
      const F e0 = vector_exp_nonpositive<S>(load<S>(src + i) - shift_vector);
      const F e1 = vector_exp_nonpositive<S>(load<S>(src + i + kWidth) - shift_vector);
      if constexpr (kStore) {
        store<S>(dst + i, e0);
        store<S>(dst + i + kWidth, e1);
      }
      s0 += e0;
      s1 += e1;
    }
    for (; i + kWidth <= flush; i += kWidth) {
      const F e = vector_exp_nonpositive<S>(load<S>(src + i) - shift_vector);
      if constexpr (kStore) store<S>(dst + i, e);
      s0 += e;
    }
    sum += horizontal_sum<S>(s0 + s1);
  }
  for (; i < n; ++i) {
    const float e = exp_nonpositive(src[i] - shift);
    if constexpr (kStore) dst[i] = e;
    sum += e;
  }
  return sum;
}

}  // namespace kiln::native::softmax_math
