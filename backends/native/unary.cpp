// Native unary elementwise kernels: one contiguous loop per op, split across threads. float (and
// the 16-bit floats, computed in float) use branch-free exp/sigmoid/tanh/erf that GCC vectorizes;
// the float32 loops of the floating ops are compiled per ISA tier (isa_variant.h), so they run 16 or 8
// lanes wide where the CPU allows; double uses the C library.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/elementwise.h"
#include "backends/native/isa_variant.h"
#include "runtime/parallel.h"

namespace kiln::native::elementwise {
namespace {

// Clamps with NaN passing through (a NaN x fails both comparisons).
template <typename C>
C clamp_keep_nan(C x, C low, C high) {
  const C raised = x < low ? low : x;
  return raised > high ? high : raised;
}

// float goes to the fast versions above, double to the C library.
template <typename C>
C exp_of(C x) {
  if constexpr (std::is_same_v<C, float>) return fast_exp(x);
  else return std::exp(x);
}
template <typename C>
C sigmoid_of(C x) {
  if constexpr (std::is_same_v<C, float>) {
    return fast_sigmoid(x);
  } else {
    const C e = std::exp(-std::fabs(x));  // never overflows
    return x >= 0 ? 1 / (1 + e) : e / (1 + e);
  }
}
template <typename C>
C tanh_of(C x) {
  if constexpr (std::is_same_v<C, float>) return fast_tanh(x);
  else return std::tanh(x);
}
template <typename C>
C erf_of(C x) {
  if constexpr (std::is_same_v<C, float>) return fast_erf(x);
  else return std::erf(x);
}

// ---- loops and factories -----------------------------------------------------------------------

// dst[i] = f(src[i]); T and Out are storage types, f works on T's compute type.
template <typename T, typename Out = T, typename F>
void unary_loop(const Tensor& src_tensor, Tensor& dst_tensor, int64_t cost, const F& f) {
  const T* src = src_tensor.data<T>();
  Out* dst = dst_tensor.data<Out>();
  parallel_for(0, src_tensor.numel(), cost, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = from_compute<Out>(f(to_compute(src[i])));
  });
}

// dst[i] = F()(src[i]) over float32, one copy per ISA tier (F: a captureless lambda type; the ops
// whose lambdas capture attributes are cheap ones the generic loop serves). `flatten` inlines the
// lambda and the *_of helpers into the loop: GCC inlines neither on its own into a wider-ISA caller,
// and a call per element does not vectorize (Erf over 262144 floats on one thread took 4.2 ms, now 0.11).
using FloatLoop = void (*)(const float* src, float* dst, int64_t count);
template <typename F>
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma"), flatten)) void float_loop_avx512(
    const float* src, float* dst, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = F()(src[i]);
}
template <typename F>
__attribute__((target("avx2,fma"), flatten)) void float_loop_avx2(const float* src, float* dst,
                                                                  int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = F()(src[i]);
}
template <typename F>
__attribute__((flatten)) void float_loop_baseline(const float* src, float* dst, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = F()(src[i]);
}

// A kernel applying f (a generic lambda over the compute type) to floating inputs.
template <typename F>
KernelOrReason float_unary(const OpSpec& spec, int64_t cost, F f) {
  const DType dtype = spec.input(0).dtype;
  return visit_floating(
      dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, float> && std::is_default_constructible_v<F>) {
          const FloatLoop loop =
              pick_isa_variant<FloatLoop>(float_loop_avx512<F>, float_loop_avx2<F>, float_loop_baseline<F>)
                  .fn;
          return make_kernel(kernel_name(spec),
                             [loop, cost](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
                               const float* src = inputs[0].data<float>();
                               float* dst = outputs[0].data<float>();
                               parallel_for(0, inputs[0].numel(), cost, [&](int64_t begin, int64_t end) {
                                 loop(src + begin, dst + begin, end - begin);
                               });
                             });
        } else {
          return make_kernel(kernel_name(spec),
                             [f, cost](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
                               unary_loop<T>(inputs[0], outputs[0], cost, f);
                             });
        }
      },
      [&] { return unsupported_dtype(spec, dtype); });
}

// Like float_unary, but for integer inputs too.
template <typename F>
KernelOrReason numeric_unary(const OpSpec& spec, F f) {
  const DType dtype = spec.input(0).dtype;
  return visit_dtype(dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return unsupported_dtype(spec, dtype);
    } else {
      return make_kernel(kernel_name(spec), [f](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
        unary_loop<T>(inputs[0], outputs[0], kCheapCost, f);
      });
    }
  });
}

// Floating inputs, bool output.
template <typename F>
KernelOrReason float_predicate(const OpSpec& spec, F f) {
  const DType dtype = spec.input(0).dtype;
  return visit_floating(
      dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel(kernel_name(spec), [f](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          unary_loop<T, bool>(inputs[0], outputs[0], kCheapCost, f);
        });
      },
      [&] { return unsupported_dtype(spec, dtype); });
}

}  // namespace

KernelOrReason make_relu(const OpSpec& spec, Outputs) {
  // x < 0 rather than x > 0 so that NaN passes through, as in numpy and PyTorch.
  return numeric_unary(spec, [](auto x) { return x < decltype(x)(0) ? decltype(x)(0) : x; });
}

KernelOrReason make_neg(const OpSpec& spec, Outputs) {
  return numeric_unary(spec, [](auto x) {
    using C = decltype(x);
    if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(-static_cast<std::make_unsigned_t<C>>(x));  // wraps like two's complement
    } else {
      return -x;
    }
  });
}

KernelOrReason make_abs(const OpSpec& spec, Outputs) {
  return numeric_unary(spec, [](auto x) {
    using C = decltype(x);
    if constexpr (std::is_floating_point_v<C>) {
      return std::fabs(x);  // clears the sign bit: |-0| is +0
    } else if constexpr (std::is_unsigned_v<C>) {
      return x;
    } else {
      return x < C(0) ? static_cast<C>(-static_cast<std::make_unsigned_t<C>>(x)) : x;
    }
  });
}

KernelOrReason make_sign(const OpSpec& spec, Outputs) {
  // Zero and NaN map to themselves.
  return numeric_unary(spec, [](auto x) {
    using C = decltype(x);
    return x > C(0) ? C(1) : (x < C(0) ? static_cast<C>(-1) : x);
  });
}

KernelOrReason make_sigmoid(const OpSpec& spec, Outputs) {
  return float_unary(spec, kTranscendentalCost, [](auto x) { return sigmoid_of(x); });
}
KernelOrReason make_tanh(const OpSpec& spec, Outputs) {
  return float_unary(spec, kTranscendentalCost, [](auto x) { return tanh_of(x); });
}
KernelOrReason make_erf(const OpSpec& spec, Outputs) {
  return float_unary(spec, kTranscendentalCost, [](auto x) { return erf_of(x); });
}
// Gelu (opset 20): exact through erf, or PyTorch's tanh approximation.
KernelOrReason make_gelu(const OpSpec& spec, Outputs) {
  if (spec.attrs().get_string("approximate", "none") == "tanh") {
    return float_unary(spec, kTranscendentalCost, [](auto x) {
      using C = decltype(x);
      const C sqrt_2_over_pi = C(0.7978845608028654);
      return C(0.5) * x * (C(1) + tanh_of(sqrt_2_over_pi * (x + C(0.044715) * x * x * x)));
    });
  }
  return float_unary(spec, kTranscendentalCost, [](auto x) {
    using C = decltype(x);
    return C(0.5) * x * (C(1) + erf_of(x * C(0.7071067811865476)));
  });
}

KernelOrReason make_bitwise_not(const OpSpec& spec, Outputs) {
  if (spec.input(0).dtype == DType::boolean || !is_integer(spec.input(0).dtype))
    return unsupported_dtype(spec, spec.input(0).dtype);
  return numeric_unary(spec, [](auto x) {
    if constexpr (std::is_integral_v<decltype(x)>) {
      return static_cast<decltype(x)>(~x);
    } else {
      return x;  // not reached: integers only (checked above)
    }
  });
}

KernelOrReason make_exp(const OpSpec& spec, Outputs) {
  return float_unary(spec, kTranscendentalCost, [](auto x) { return exp_of(x); });
}

// The rest use the C library.
#define KILN_FLOAT_UNARY(factory, cost, expression)                                   \
  KernelOrReason factory(const OpSpec& spec, Outputs) {                               \
    return float_unary(spec, cost, [](auto x) -> decltype(x) { return expression; }); \
  }

KILN_FLOAT_UNARY(make_sqrt, kTranscendentalCost, std::sqrt(x))
KILN_FLOAT_UNARY(make_log, kTranscendentalCost, std::log(x))
KILN_FLOAT_UNARY(make_reciprocal, kCheapCost, 1 / x)
KILN_FLOAT_UNARY(make_floor, kCheapCost, std::floor(x))
KILN_FLOAT_UNARY(make_ceil, kCheapCost, std::ceil(x))
KILN_FLOAT_UNARY(make_round, kCheapCost, std::nearbyint(x))  // default rounding mode: half to even
KILN_FLOAT_UNARY(make_sin, kTranscendentalCost, std::sin(x))
KILN_FLOAT_UNARY(make_cos, kTranscendentalCost, std::cos(x))
KILN_FLOAT_UNARY(make_tan, kTranscendentalCost, std::tan(x))
KILN_FLOAT_UNARY(make_asin, kTranscendentalCost, std::asin(x))
KILN_FLOAT_UNARY(make_acos, kTranscendentalCost, std::acos(x))
KILN_FLOAT_UNARY(make_atan, kTranscendentalCost, std::atan(x))
KILN_FLOAT_UNARY(make_sinh, kTranscendentalCost, std::sinh(x))
KILN_FLOAT_UNARY(make_cosh, kTranscendentalCost, std::cosh(x))
KILN_FLOAT_UNARY(make_asinh, kTranscendentalCost, std::asinh(x))
KILN_FLOAT_UNARY(make_acosh, kTranscendentalCost, std::acosh(x))
KILN_FLOAT_UNARY(make_atanh, kTranscendentalCost, std::atanh(x))
KILN_FLOAT_UNARY(make_softplus, kTranscendentalCost,
                 x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)))  // never overflows
KILN_FLOAT_UNARY(make_softsign, kCheapCost, x / (1 + std::fabs(x)))

#undef KILN_FLOAT_UNARY

KernelOrReason make_hard_swish(const OpSpec& spec, Outputs) {
  return float_unary(spec, kCheapCost, [](auto x) -> decltype(x) {
    using C = decltype(x);
    return x * clamp_keep_nan<C>(x / C(6) + C(0.5), C(0), C(1));
  });
}

KernelOrReason make_hard_sigmoid(const OpSpec& spec, Outputs) {
  const double alpha = spec.attrs().get_float("alpha", 0.2f);
  const double beta = spec.attrs().get_float("beta", 0.5f);
  return float_unary(spec, kCheapCost, [alpha, beta](auto x) -> decltype(x) {
    using C = decltype(x);
    return clamp_keep_nan<C>(C(alpha) * x + C(beta), C(0), C(1));
  });
}

KernelOrReason make_leaky_relu(const OpSpec& spec, Outputs) {
  const double alpha = spec.attrs().get_float("alpha", 0.01f);
  return float_unary(spec, kCheapCost, [alpha](auto x) -> decltype(x) {
    using C = decltype(x);
    return choose(x < C(0), C(alpha) * x, x);
  });
}

KernelOrReason make_thresholded_relu(const OpSpec& spec, Outputs) {
  const double alpha = spec.attrs().get_float("alpha", 1.0f);
  return float_unary(spec, kCheapCost, [alpha](auto x) -> decltype(x) { return x > decltype(x)(alpha) ? x : 0; });
}

// expm1 keeps Elu, Selu and Celu accurate for small negative x, where e^x - 1 would cancel.
KernelOrReason make_elu(const OpSpec& spec, Outputs) {
  const double alpha = spec.attrs().get_float("alpha", 1.0f);
  return float_unary(spec, kTranscendentalCost,
                     [alpha](auto x) -> decltype(x) { return x >= 0 ? x : decltype(x)(alpha) * std::expm1(x); });
}

KernelOrReason make_selu(const OpSpec& spec, Outputs) {
  // ONNX's defaults, as float32 values.
  const double alpha = spec.attrs().get_float("alpha", 1.67326319217681884765625f);
  const double gamma = spec.attrs().get_float("gamma", 1.05070102214813232421875f);
  return float_unary(spec, kTranscendentalCost, [alpha, gamma](auto x) -> decltype(x) {
    using C = decltype(x);
    return C(gamma) * (x > 0 ? x : C(alpha) * std::expm1(x));
  });
}

KernelOrReason make_celu(const OpSpec& spec, Outputs) {
  const double alpha = spec.attrs().get_float("alpha", 1.0f);
  return float_unary(spec, kTranscendentalCost, [alpha](auto x) -> decltype(x) {
    using C = decltype(x);
    return std::max(C(0), x) + std::min(C(0), C(alpha) * std::expm1(x / C(alpha)));
  });
}

KernelOrReason make_shrink(const OpSpec& spec, Outputs) {
  const double bias = spec.attrs().get_float("bias", 0.0f);
  const double lambd = spec.attrs().get_float("lambd", 0.5f);
  return numeric_unary(spec, [bias, lambd](auto x) {
    using C = decltype(x);
    // Integers are shrunk in double: the attributes are floats.
    using Math = std::conditional_t<std::is_floating_point_v<C>, C, double>;
    const Math v = static_cast<Math>(x);
    const Math result = v < Math(-lambd) ? v + Math(bias) : (v > Math(lambd) ? v - Math(bias) : Math(0));
    return static_cast<C>(result);
  });
}

KernelOrReason make_not(const OpSpec& spec, Outputs) {
  if (spec.input(0).dtype != DType::boolean) return unsupported_dtype(spec, spec.input(0).dtype);
  return make_kernel("native:not", [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
    // Bytes rather than bool so GCC vectorizes; a bool tensor holds 0 or 1.
    const uint8_t* src = static_cast<const uint8_t*>(inputs[0].raw_data());
    uint8_t* dst = static_cast<uint8_t*>(outputs[0].raw_data());
    parallel_for(0, inputs[0].numel(), kCheapCost, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dst[i] = src[i] ^ 1u;
    });
  });
}

KernelOrReason make_is_nan(const OpSpec& spec, Outputs) {
  return float_predicate(spec, [](auto x) { return x != x; });
}

KernelOrReason make_is_inf(const OpSpec& spec, Outputs) {
  const bool negative = spec.attrs().get_int("detect_negative", 1) != 0;
  const bool positive = spec.attrs().get_int("detect_positive", 1) != 0;
  return float_predicate(spec, [negative, positive](auto x) {
    using C = decltype(x);
    return (positive && x == std::numeric_limits<C>::infinity()) ||
           (negative && x == -std::numeric_limits<C>::infinity());
  });
}

// Clip's bounds are attributes before opset 11 and optional scalar inputs from 11 on; an absent
// bound is the type's lowest/highest value. When min > max every element becomes max, as ONNX says.
KernelOrReason make_clip(const OpSpec& spec, Outputs) {
  const DType dtype = spec.input(0).dtype;
  const bool bounds_are_attributes = spec.opset < 11;
  const float min_attribute = spec.attrs().get_float("min", -std::numeric_limits<float>::infinity());
  const float max_attribute = spec.attrs().get_float("max", std::numeric_limits<float>::infinity());
  return visit_dtype(dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    using C = compute_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      return unsupported_dtype(spec, dtype);
    } else {
      return make_kernel("native:clip", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
        C low = std::numeric_limits<C>::lowest();
        C high = std::numeric_limits<C>::max();
        if (bounds_are_attributes) {
          low = static_cast<C>(std::max<double>(min_attribute, static_cast<double>(low)));
          high = static_cast<C>(std::min<double>(max_attribute, static_cast<double>(high)));
        } else {
          if (inputs.size() > 1 && inputs[1].defined()) low = to_compute(inputs[1].data<T>()[0]);
          if (inputs.size() > 2 && inputs[2].defined()) high = to_compute(inputs[2].data<T>()[0]);
        }
        unary_loop<T>(inputs[0], outputs[0], kCheapCost, [low, high](C x) { return clamp_keep_nan(x, low, high); });
      });
    }
  });
}

}  // namespace kiln::native::elementwise
