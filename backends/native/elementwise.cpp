// Native elementwise kernels. Unary ops loop over contiguous data; binary, variadic and Where walk
// the output row by row (BroadcastLoop) with a fast inner loop per stride pattern.
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/native/broadcast_loop.h"
#include "backends/native/element_math.h"
#include "backends/native/kernel_util.h"
#include "backends/native/native_backend.h"
#include "core/error.h"
#include "ops/onnx_dtype.h"

namespace kiln::native {
namespace {

// Rough scalar-operation counts per element, for parallel_for's inline threshold.
constexpr int64_t kCheapCost = 1;
constexpr int64_t kTranscendentalCost = 20;

std::string kernel_name(const OpSpec& spec) {
  std::string name = "native:";
  for (char c : spec.op_type) name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

KernelOrReason unsupported_dtype(const OpSpec& spec, DType dtype) {
  return KernelOrReason::rejected(str_cat("native ", spec.op_type, " does not support ", dtype_name(dtype)));
}

// ---- unary -------------------------------------------------------------------------------------

template <typename T, typename F>
void unary_loop(const Tensor& src_tensor, Tensor& dst_tensor, int64_t cost, const F& f) {
  const T* src = src_tensor.data<T>();
  T* dst = dst_tensor.data<T>();
  parallel_for(0, src_tensor.numel(), cost, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = from_compute<T>(f(to_compute(src[i])));
  });
}

// A kernel applying f (a generic lambda over the compute type) to floating inputs.
template <typename F>
KernelOrReason float_unary(const OpSpec& spec, int64_t cost, F f) {
  const DType dtype = spec.input(0).dtype;
  return visit_floating(
      dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel(kernel_name(spec), [f, cost](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          unary_loop<T>(inputs[0], outputs[0], cost, f);
        });
      },
      [&] { return unsupported_dtype(spec, dtype); });
}

// Like float_unary, but also for integer inputs.
template <typename F>
KernelOrReason numeric_unary(const OpSpec& spec, F f) {
  const DType dtype = spec.input(0).dtype;
  if (dtype == DType::boolean) return unsupported_dtype(spec, dtype);
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

KernelOrReason make_relu(const OpSpec& spec, std::span<const TensorInfo>) {
  return numeric_unary(spec, [](auto x) { return x > decltype(x)(0) ? x : decltype(x)(0); });
}
KernelOrReason make_neg(const OpSpec& spec, std::span<const TensorInfo>) {
  return numeric_unary(spec, [](auto x) {
    using C = decltype(x);
    if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(-static_cast<std::make_unsigned_t<C>>(x));  // wraps like two's complement
    } else {
      return -x;
    }
  });
}
KernelOrReason make_abs(const OpSpec& spec, std::span<const TensorInfo>) {
  return numeric_unary(spec, [](auto x) {
    using C = decltype(x);
    if constexpr (std::is_unsigned_v<C>) {
      return x;
    } else {
      return x < C(0) ? static_cast<C>(-x) : x;
    }
  });
}
KernelOrReason make_sign(const OpSpec& spec, std::span<const TensorInfo>) {
  return numeric_unary(spec, [](auto x) {
    using C = decltype(x);
    return x > C(0) ? C(1) : (x < C(0) ? static_cast<C>(-1) : C(0));
  });
}

#define KILN_FLOAT_UNARY(factory, cost, expression)                              \
  KernelOrReason factory(const OpSpec& spec, std::span<const TensorInfo>) {      \
    return float_unary(spec, cost, [](auto x) -> decltype(x) { return expression; }); \
  }

KILN_FLOAT_UNARY(make_sigmoid, kTranscendentalCost, x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)))
KILN_FLOAT_UNARY(make_tanh, kTranscendentalCost, std::tanh(x))
KILN_FLOAT_UNARY(make_erf, kTranscendentalCost, std::erf(x))
KILN_FLOAT_UNARY(make_sqrt, kTranscendentalCost, std::sqrt(x))
KILN_FLOAT_UNARY(make_exp, kTranscendentalCost, std::exp(x))
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
KILN_FLOAT_UNARY(make_softplus, kTranscendentalCost, x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)))
KILN_FLOAT_UNARY(make_softsign, kCheapCost, x / (1 + std::fabs(x)))
KILN_FLOAT_UNARY(make_hard_swish, kCheapCost, x * std::max<decltype(x)>(0, std::min<decltype(x)>(1, x / 6 + 0.5)))

#undef KILN_FLOAT_UNARY

KernelOrReason make_leaky_relu(const OpSpec& spec, std::span<const TensorInfo>) {
  const double alpha = spec.attrs().get_float("alpha", 0.01f);
  return float_unary(spec, kCheapCost, [alpha](auto x) -> decltype(x) { return x >= 0 ? x : decltype(x)(alpha) * x; });
}
KernelOrReason make_elu(const OpSpec& spec, std::span<const TensorInfo>) {
  const double alpha = spec.attrs().get_float("alpha", 1.0f);
  return float_unary(spec, kTranscendentalCost,
                     [alpha](auto x) -> decltype(x) { return x >= 0 ? x : decltype(x)(alpha) * std::expm1(x); });
}
KernelOrReason make_selu(const OpSpec& spec, std::span<const TensorInfo>) {
  const double alpha = spec.attrs().get_float("alpha", 1.67326319217681884765625f);
  const double gamma = spec.attrs().get_float("gamma", 1.05070102214813232421875f);
  return float_unary(spec, kTranscendentalCost, [alpha, gamma](auto x) -> decltype(x) {
    using C = decltype(x);
    return C(gamma) * (x > 0 ? x : C(alpha) * std::expm1(x));
  });
}
KernelOrReason make_celu(const OpSpec& spec, std::span<const TensorInfo>) {
  const double alpha = spec.attrs().get_float("alpha", 1.0f);
  return float_unary(spec, kTranscendentalCost, [alpha](auto x) -> decltype(x) {
    using C = decltype(x);
    return std::max(C(0), x) + std::min(C(0), C(alpha) * std::expm1(x / C(alpha)));
  });
}
KernelOrReason make_hard_sigmoid(const OpSpec& spec, std::span<const TensorInfo>) {
  const double alpha = spec.attrs().get_float("alpha", 0.2f);
  const double beta = spec.attrs().get_float("beta", 0.5f);
  return float_unary(spec, kCheapCost, [alpha, beta](auto x) -> decltype(x) {
    using C = decltype(x);
    return std::max(C(0), std::min(C(1), C(alpha) * x + C(beta)));
  });
}
KernelOrReason make_thresholded_relu(const OpSpec& spec, std::span<const TensorInfo>) {
  const double alpha = spec.attrs().get_float("alpha", 1.0f);
  return float_unary(spec, kCheapCost, [alpha](auto x) -> decltype(x) { return x > decltype(x)(alpha) ? x : 0; });
}

KernelOrReason make_not(const OpSpec& spec, std::span<const TensorInfo>) {
  return make_kernel("native:not", [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
    const bool* src = inputs[0].data<bool>();
    bool* dst = outputs[0].data<bool>();
    parallel_for(0, inputs[0].numel(), kCheapCost, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dst[i] = !src[i];
    });
  });
}

// Clip's bounds are attributes before opset 11 and optional scalar inputs after; an absent bound is
// the type's lowest/highest value.
KernelOrReason make_clip(const OpSpec& spec, std::span<const TensorInfo>) {
  const DType dtype = spec.input(0).dtype;
  if (dtype == DType::boolean) return unsupported_dtype(spec, dtype);
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
      unary_loop<T>(inputs[0], outputs[0], kCheapCost, [low, high](C x) { return std::min(std::max(x, low), high); });
    });
    }
  });
}

// ---- binary ------------------------------------------------------------------------------------

// dst = f(a, b) with broadcasting; A, B and Out are storage types, f works on compute types.
template <typename A, typename B, typename Out, typename F>
void binary_loop(const Tensor& a_tensor, const Tensor& b_tensor, Tensor& dst_tensor, int64_t cost, const F& f) {
  const BroadcastLoop loop(dst_tensor.shape(), {a_tensor.shape(), b_tensor.shape()});
  const A* a = a_tensor.data<A>();
  const B* b = b_tensor.data<B>();
  Out* dst = dst_tensor.data<Out>();
  const int64_t n = loop.row_size();
  const int64_t a_step = loop.row_stride(0);
  const int64_t b_step = loop.row_stride(1);
  loop.for_each_row(cost, [&](int64_t row, const int64_t* offsets) {
    const A* pa = a + offsets[0];
    const B* pb = b + offsets[1];
    Out* pd = dst + row * n;
    if (a_step == 1 && b_step == 1) {
      for (int64_t i = 0; i < n; ++i) pd[i] = from_compute<Out>(f(to_compute(pa[i]), to_compute(pb[i])));
    } else if (a_step == 1) {
      const auto vb = to_compute(pb[0]);
      for (int64_t i = 0; i < n; ++i) pd[i] = from_compute<Out>(f(to_compute(pa[i]), vb));
    } else if (b_step == 1) {
      const auto va = to_compute(pa[0]);
      for (int64_t i = 0; i < n; ++i) pd[i] = from_compute<Out>(f(va, to_compute(pb[i])));
    } else {
      const Out value = from_compute<Out>(f(to_compute(pa[0]), to_compute(pb[0])));
      for (int64_t i = 0; i < n; ++i) pd[i] = value;
    }
  });
}

enum class Arithmetic { add, sub, mul, div, mod, fmod, max, min, prelu };

template <typename C>
C integer_divide(C x, C y) {
  if (y == 0) fail(ErrorKind::runtime, "integer division by zero");
  if constexpr (std::is_signed_v<C>) {
    if (y == C(-1)) return static_cast<C>(-static_cast<std::make_unsigned_t<C>>(x));  // avoids INT_MIN / -1 trap
  }
  return x / y;
}

template <typename C>
C integer_remainder(C x, C y, bool sign_of_divisor) {
  if (y == 0) fail(ErrorKind::runtime, "integer modulo by zero");
  if constexpr (std::is_signed_v<C>) {
    if (y == C(-1)) return 0;
    C r = x % y;
    if (sign_of_divisor && r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
  } else {
    return x % y;
  }
}

template <Arithmetic kOp>
struct ArithmeticFn {
  template <typename C>
  C operator()(C x, C y) const {
    if constexpr (kOp == Arithmetic::add) {
      if constexpr (std::is_integral_v<C>) return static_cast<C>(static_cast<std::make_unsigned_t<C>>(x) + y);
      else return x + y;
    } else if constexpr (kOp == Arithmetic::sub) {
      if constexpr (std::is_integral_v<C>) return static_cast<C>(static_cast<std::make_unsigned_t<C>>(x) - y);
      else return x - y;
    } else if constexpr (kOp == Arithmetic::mul) {
      if constexpr (std::is_integral_v<C>) {
        return static_cast<C>(static_cast<std::make_unsigned_t<C>>(x) * static_cast<std::make_unsigned_t<C>>(y));
      } else {
        return x * y;
      }
    } else if constexpr (kOp == Arithmetic::div) {
      if constexpr (std::is_integral_v<C>) return integer_divide(x, y);
      else return x / y;
    } else if constexpr (kOp == Arithmetic::mod || kOp == Arithmetic::fmod) {
      if constexpr (std::is_integral_v<C>) {
        return integer_remainder(x, y, kOp == Arithmetic::mod);
      } else {
        C r = std::fmod(x, y);
        if (kOp == Arithmetic::mod && r != 0 && ((r < 0) != (y < 0))) r += y;
        return r;
      }
    } else if constexpr (kOp == Arithmetic::max) {
      return (std::isnan(static_cast<double>(x)) || x > y) ? x : y;
    } else if constexpr (kOp == Arithmetic::min) {
      return (std::isnan(static_cast<double>(x)) || x < y) ? x : y;
    } else {
      return x < C(0) ? x * y : x;  // prelu
    }
  }
};

template <Arithmetic kOp>
KernelOrReason arithmetic_kernel(const OpSpec& spec, DType dtype) {
  if (dtype == DType::boolean) return unsupported_dtype(spec, dtype);
  return visit_dtype(dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return unsupported_dtype(spec, dtype);
    } else {
      return make_kernel(kernel_name(spec), [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
        binary_loop<T, T, T>(inputs[0], inputs[1], outputs[0], kCheapCost, ArithmeticFn<kOp>{});
      });
    }
  });
}

template <Arithmetic kOp>
KernelOrReason make_arithmetic(const OpSpec& spec, std::span<const TensorInfo>) {
  return arithmetic_kernel<kOp>(spec, spec.input(0).dtype);
}

KernelOrReason make_mod(const OpSpec& spec, std::span<const TensorInfo>) {
  const bool fmod = spec.attrs().get_int("fmod", 0) != 0;
  return fmod ? arithmetic_kernel<Arithmetic::fmod>(spec, spec.input(0).dtype)
              : arithmetic_kernel<Arithmetic::mod>(spec, spec.input(0).dtype);
}

KernelOrReason make_pow(const OpSpec& spec, std::span<const TensorInfo>) {
  const DType base = spec.input(0).dtype;
  const DType exponent = spec.input(1).dtype;
  if (base == DType::boolean || exponent == DType::boolean) return unsupported_dtype(spec, DType::boolean);
  return visit_dtype(base, [&](auto base_tag) -> KernelOrReason {
    using B = decltype(base_tag);
    return visit_dtype(exponent, [&](auto exponent_tag) -> KernelOrReason {
      using E = decltype(exponent_tag);
      return make_kernel("native:pow", [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
        binary_loop<B, E, B>(inputs[0], inputs[1], outputs[0], kTranscendentalCost, [](auto x, auto y) {
          return std::pow(static_cast<double>(x), static_cast<double>(y));
        });
      });
    });
  });
}

enum class Comparison { equal, less, greater, less_equal, greater_equal };

template <Comparison kOp>
KernelOrReason make_comparison(const OpSpec& spec, std::span<const TensorInfo>) {
  return visit_dtype(spec.input(0).dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    return make_kernel(kernel_name(spec), [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
      binary_loop<T, T, bool>(inputs[0], inputs[1], outputs[0], kCheapCost, [](auto x, auto y) {
        if constexpr (kOp == Comparison::equal) return x == y;
        else if constexpr (kOp == Comparison::less) return x < y;
        else if constexpr (kOp == Comparison::greater) return x > y;
        else if constexpr (kOp == Comparison::less_equal) return x <= y;
        else return x >= y;
      });
    });
  });
}

enum class Logic { and_op, or_op, xor_op };

template <Logic kOp>
KernelOrReason make_logical(const OpSpec& spec, std::span<const TensorInfo>) {
  return make_kernel(kernel_name(spec), [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
    binary_loop<bool, bool, bool>(inputs[0], inputs[1], outputs[0], kCheapCost, [](bool x, bool y) {
      if constexpr (kOp == Logic::and_op) return x && y;
      else if constexpr (kOp == Logic::or_op) return x || y;
      else return x != y;
    });
  });
}

KernelOrReason make_bitshift(const OpSpec& spec, std::span<const TensorInfo>) {
  const bool left = spec.attrs().get_string("direction", "") == "LEFT";
  return visit_dtype(spec.input(0).dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    if constexpr (std::is_unsigned_v<T> && !std::is_same_v<T, bool>) {
      return make_kernel("native:bitshift", [left](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
        binary_loop<T, T, T>(inputs[0], inputs[1], outputs[0], kCheapCost, [left](T x, T y) -> T {
          if (y >= sizeof(T) * 8) return 0;  // shifting by the width is undefined in C++
          return left ? static_cast<T>(x << y) : static_cast<T>(x >> y);
        });
      });
    } else {
      return unsupported_dtype(spec, spec.input(0).dtype);
    }
  });
}

// Max, Min, Sum, Mean: fold the inputs pairwise into the output.
template <Arithmetic kOp>
KernelOrReason make_variadic(const OpSpec& spec, std::span<const TensorInfo>) {
  const DType dtype = spec.input(0).dtype;
  if (dtype == DType::boolean) return unsupported_dtype(spec, dtype);
  const bool mean = spec.op_type == "Mean";
  return visit_dtype(dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return unsupported_dtype(spec, dtype);
    } else {
    return make_kernel(kernel_name(spec), [mean](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
      Tensor& dst = outputs[0];
      // Start from input 0 broadcast to the output shape.
      binary_loop<T, T, T>(inputs[0], dst, dst, kCheapCost, [](auto x, auto) { return x; });
      for (size_t i = 1; i < inputs.size(); ++i) {
        binary_loop<T, T, T>(dst, inputs[i], dst, kCheapCost, ArithmeticFn<kOp>{});
      }
      if (mean) {
        const auto count = static_cast<compute_t<T>>(inputs.size());
        T* data = dst.data<T>();
        for (int64_t i = 0; i < dst.numel(); ++i) data[i] = from_compute<T>(to_compute(data[i]) / count);
      }
    });
    }
  });
}

// ---- Where, Cast -------------------------------------------------------------------------------

template <typename T>
void where_loop(const Tensor& condition, const Tensor& x, const Tensor& y, Tensor& dst_tensor) {
  const BroadcastLoop loop(dst_tensor.shape(), {condition.shape(), x.shape(), y.shape()});
  const bool* c = condition.data<bool>();
  const T* px = x.data<T>();
  const T* py = y.data<T>();
  T* dst = dst_tensor.data<T>();
  const int64_t n = loop.row_size();
  const int64_t sc = loop.row_stride(0), sx = loop.row_stride(1), sy = loop.row_stride(2);
  loop.for_each_row(kCheapCost, [&](int64_t row, const int64_t* offsets) {
    const bool* rc = c + offsets[0];
    const T* rx = px + offsets[1];
    const T* ry = py + offsets[2];
    T* rd = dst + row * n;
    for (int64_t i = 0; i < n; ++i) rd[i] = rc[i * sc] ? rx[i * sx] : ry[i * sy];
  });
}

KernelOrReason make_where(const OpSpec& spec, std::span<const TensorInfo>) {
  // Where only moves elements, so it dispatches on element size, not type.
  switch (dtype_size(spec.input(1).dtype)) {
    case 1: return make_kernel("native:where", [](auto inputs, auto outputs) { where_loop<uint8_t>(inputs[0], inputs[1], inputs[2], outputs[0]); });
    case 2: return make_kernel("native:where", [](auto inputs, auto outputs) { where_loop<uint16_t>(inputs[0], inputs[1], inputs[2], outputs[0]); });
    case 4: return make_kernel("native:where", [](auto inputs, auto outputs) { where_loop<uint32_t>(inputs[0], inputs[1], inputs[2], outputs[0]); });
    case 8: return make_kernel("native:where", [](auto inputs, auto outputs) { where_loop<uint64_t>(inputs[0], inputs[1], inputs[2], outputs[0]); });
    default: return unsupported_dtype(spec, spec.input(1).dtype);
  }
}

template <typename Src, typename Dst>
Dst convert_element(Src value) {
  if constexpr (std::is_same_v<Src, Dst>) {
    return value;
  } else if constexpr (std::is_same_v<Dst, bool>) {
    return to_compute(value) != 0;
  } else if constexpr (is_half_v<Dst>) {
    return from_compute<Dst>(static_cast<float>(to_compute(value)));
  } else if constexpr (std::is_integral_v<Dst> && !std::is_integral_v<compute_t<Src>>) {
    // Float to integer: out-of-range and NaN values are undefined in C++; saturate instead.
    const double x = static_cast<double>(to_compute(value));
    if (std::isnan(x)) return 0;
    if (x <= static_cast<double>(std::numeric_limits<Dst>::lowest())) return std::numeric_limits<Dst>::lowest();
    if (x >= static_cast<double>(std::numeric_limits<Dst>::max())) return std::numeric_limits<Dst>::max();
    return static_cast<Dst>(x);
  } else {
    return static_cast<Dst>(to_compute(value));
  }
}

KernelOrReason cast_kernel(DType from, DType to) {
  return visit_dtype(from, [&](auto src_tag) -> KernelOrReason {
    using Src = decltype(src_tag);
    return visit_dtype(to, [&](auto dst_tag) -> KernelOrReason {
      using Dst = decltype(dst_tag);
      return make_kernel(str_cat("native:cast_", dtype_name(from), "_to_", dtype_name(to)),
                         [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
                           const Src* src = inputs[0].data<Src>();
                           Dst* dst = outputs[0].data<Dst>();
                           parallel_for(0, inputs[0].numel(), kCheapCost, [&](int64_t begin, int64_t end) {
                             for (int64_t i = begin; i < end; ++i) dst[i] = convert_element<Src, Dst>(src[i]);
                           });
                         });
    });
  });
}

KernelOrReason make_cast(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  return cast_kernel(spec.input(0).dtype, outputs[0].dtype);
}

constexpr KernelEntry kKernels[] = {
    {"Relu", make_relu},
    {"Neg", make_neg},
    {"Abs", make_abs},
    {"Sign", make_sign},
    {"Sigmoid", make_sigmoid},
    {"Tanh", make_tanh},
    {"Erf", make_erf},
    {"Sqrt", make_sqrt},
    {"Exp", make_exp},
    {"Log", make_log},
    {"Reciprocal", make_reciprocal},
    {"Floor", make_floor},
    {"Ceil", make_ceil},
    {"Round", make_round},
    {"Sin", make_sin},
    {"Cos", make_cos},
    {"Tan", make_tan},
    {"Asin", make_asin},
    {"Acos", make_acos},
    {"Atan", make_atan},
    {"Sinh", make_sinh},
    {"Cosh", make_cosh},
    {"Asinh", make_asinh},
    {"Acosh", make_acosh},
    {"Atanh", make_atanh},
    {"Softplus", make_softplus},
    {"Softsign", make_softsign},
    {"LeakyRelu", make_leaky_relu},
    {"Elu", make_elu},
    {"Selu", make_selu},
    {"Celu", make_celu},
    {"HardSigmoid", make_hard_sigmoid},
    {"HardSwish", make_hard_swish},
    {"ThresholdedRelu", make_thresholded_relu},
    {"Not", make_not},
    {"Clip", make_clip},
    {"Add", make_arithmetic<Arithmetic::add>},
    {"Sub", make_arithmetic<Arithmetic::sub>},
    {"Mul", make_arithmetic<Arithmetic::mul>},
    {"Div", make_arithmetic<Arithmetic::div>},
    {"Mod", make_mod},
    {"Pow", make_pow},
    {"PRelu", make_arithmetic<Arithmetic::prelu>},
    {"Max", make_variadic<Arithmetic::max>},
    {"Min", make_variadic<Arithmetic::min>},
    {"Sum", make_variadic<Arithmetic::add>},
    {"Mean", make_variadic<Arithmetic::add>},
    {"Equal", make_comparison<Comparison::equal>},
    {"Less", make_comparison<Comparison::less>},
    {"Greater", make_comparison<Comparison::greater>},
    {"LessOrEqual", make_comparison<Comparison::less_equal>},
    {"GreaterOrEqual", make_comparison<Comparison::greater_equal>},
    {"And", make_logical<Logic::and_op>},
    {"Or", make_logical<Logic::or_op>},
    {"Xor", make_logical<Logic::xor_op>},
    {"BitShift", make_bitshift},
    {"Where", make_where},
    {"Cast", make_cast},
    {"CastLike", make_cast},
};

}  // namespace

std::span<const KernelEntry> elementwise_kernels() { return kKernels; }

}  // namespace kiln::native
