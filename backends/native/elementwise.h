// Native elementwise kernels, one file per kind: unary.cpp (unary math, Clip, Not, IsNaN, IsInf),
// binary.cpp (broadcasting binary and variadic ops, comparisons, logic, Where) and cast.cpp (Cast,
// CastLike). elementwise.cpp holds the family's one op table; this header connects them.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>

#include "backends/base/kernel.h"
#include "backends/native/fast_math.h"
#include "ops/op_spec.h"

namespace kiln::native::elementwise {

// Rough scalar-operation counts per element, for parallel_for's inline threshold.
inline constexpr int64_t kCheapCost = 1;
inline constexpr int64_t kTranscendentalCost = 20;

// "native:" and the op type in lower case.
std::string kernel_name(const OpSpec& spec);
KernelOrReason unsupported_dtype(const OpSpec& spec, DType dtype);

// select() for float, the plain conditional for other types.
template <typename C>
C choose(bool condition, C if_true, C if_false) {
  if constexpr (std::is_same_v<C, float>) {
    return select(condition, if_true, if_false);
  } else {
    return condition ? if_true : if_false;
  }
}

// double to an integer type, saturating at the type's range and mapping NaN to 0 (a plain cast is
// undefined behaviour there).
template <typename Int>
Int saturate_cast(double value) {
  if (std::isnan(value)) return 0;
  if (value <= static_cast<double>(std::numeric_limits<Int>::lowest())) return std::numeric_limits<Int>::lowest();
  if (value >= static_cast<double>(std::numeric_limits<Int>::max())) return std::numeric_limits<Int>::max();
  return static_cast<Int>(value);
}

using Outputs = std::span<const TensorInfo>;

// unary.cpp
KernelOrReason make_relu(const OpSpec& spec, Outputs outputs);
KernelOrReason make_neg(const OpSpec& spec, Outputs outputs);
KernelOrReason make_abs(const OpSpec& spec, Outputs outputs);
KernelOrReason make_sign(const OpSpec& spec, Outputs outputs);
KernelOrReason make_sigmoid(const OpSpec& spec, Outputs outputs);
KernelOrReason make_tanh(const OpSpec& spec, Outputs outputs);
KernelOrReason make_erf(const OpSpec& spec, Outputs outputs);
KernelOrReason make_sqrt(const OpSpec& spec, Outputs outputs);
KernelOrReason make_exp(const OpSpec& spec, Outputs outputs);
KernelOrReason make_log(const OpSpec& spec, Outputs outputs);
KernelOrReason make_reciprocal(const OpSpec& spec, Outputs outputs);
KernelOrReason make_floor(const OpSpec& spec, Outputs outputs);
KernelOrReason make_ceil(const OpSpec& spec, Outputs outputs);
KernelOrReason make_round(const OpSpec& spec, Outputs outputs);
KernelOrReason make_sin(const OpSpec& spec, Outputs outputs);
KernelOrReason make_cos(const OpSpec& spec, Outputs outputs);
KernelOrReason make_tan(const OpSpec& spec, Outputs outputs);
KernelOrReason make_asin(const OpSpec& spec, Outputs outputs);
KernelOrReason make_acos(const OpSpec& spec, Outputs outputs);
KernelOrReason make_atan(const OpSpec& spec, Outputs outputs);
KernelOrReason make_sinh(const OpSpec& spec, Outputs outputs);
KernelOrReason make_cosh(const OpSpec& spec, Outputs outputs);
KernelOrReason make_asinh(const OpSpec& spec, Outputs outputs);
KernelOrReason make_acosh(const OpSpec& spec, Outputs outputs);
KernelOrReason make_atanh(const OpSpec& spec, Outputs outputs);
KernelOrReason make_softplus(const OpSpec& spec, Outputs outputs);
KernelOrReason make_softsign(const OpSpec& spec, Outputs outputs);
KernelOrReason make_leaky_relu(const OpSpec& spec, Outputs outputs);
KernelOrReason make_elu(const OpSpec& spec, Outputs outputs);
KernelOrReason make_selu(const OpSpec& spec, Outputs outputs);
KernelOrReason make_celu(const OpSpec& spec, Outputs outputs);
KernelOrReason make_hard_sigmoid(const OpSpec& spec, Outputs outputs);
KernelOrReason make_hard_swish(const OpSpec& spec, Outputs outputs);
KernelOrReason make_thresholded_relu(const OpSpec& spec, Outputs outputs);
KernelOrReason make_shrink(const OpSpec& spec, Outputs outputs);
KernelOrReason make_not(const OpSpec& spec, Outputs outputs);
KernelOrReason make_is_nan(const OpSpec& spec, Outputs outputs);
KernelOrReason make_is_inf(const OpSpec& spec, Outputs outputs);
KernelOrReason make_clip(const OpSpec& spec, Outputs outputs);

// binary.cpp
KernelOrReason make_add(const OpSpec& spec, Outputs outputs);
KernelOrReason make_sub(const OpSpec& spec, Outputs outputs);
KernelOrReason make_mul(const OpSpec& spec, Outputs outputs);
KernelOrReason make_div(const OpSpec& spec, Outputs outputs);
KernelOrReason make_mod(const OpSpec& spec, Outputs outputs);
KernelOrReason make_pow(const OpSpec& spec, Outputs outputs);
KernelOrReason make_prelu(const OpSpec& spec, Outputs outputs);
KernelOrReason make_max(const OpSpec& spec, Outputs outputs);
KernelOrReason make_min(const OpSpec& spec, Outputs outputs);
KernelOrReason make_sum(const OpSpec& spec, Outputs outputs);
KernelOrReason make_mean(const OpSpec& spec, Outputs outputs);
KernelOrReason make_equal(const OpSpec& spec, Outputs outputs);
KernelOrReason make_less(const OpSpec& spec, Outputs outputs);
KernelOrReason make_greater(const OpSpec& spec, Outputs outputs);
KernelOrReason make_less_or_equal(const OpSpec& spec, Outputs outputs);
KernelOrReason make_greater_or_equal(const OpSpec& spec, Outputs outputs);
KernelOrReason make_and(const OpSpec& spec, Outputs outputs);
KernelOrReason make_or(const OpSpec& spec, Outputs outputs);
KernelOrReason make_xor(const OpSpec& spec, Outputs outputs);
KernelOrReason make_bitshift(const OpSpec& spec, Outputs outputs);
KernelOrReason make_bitwise_and(const OpSpec& spec, Outputs outputs);
KernelOrReason make_bitwise_or(const OpSpec& spec, Outputs outputs);
KernelOrReason make_bitwise_xor(const OpSpec& spec, Outputs outputs);
KernelOrReason make_bitwise_not(const OpSpec& spec, Outputs outputs);
KernelOrReason make_gelu(const OpSpec& spec, Outputs outputs);
KernelOrReason make_where(const OpSpec& spec, Outputs outputs);

// cast.cpp (Cast and CastLike: the output dtype is whatever shape inference decided)
KernelOrReason make_cast(const OpSpec& spec, Outputs outputs);

}  // namespace kiln::native::elementwise
