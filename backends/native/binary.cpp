// Native broadcasting kernels: binary arithmetic, Pow, PRelu, the variadic Max/Min/Sum/Mean,
// comparisons, logic, BitShift and Where. All walk the output through OperandWalk, which hands
// each row piece to an inner loop specialised for operands that move (step 1) or stay (step 0).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "backends/base/function_kernel.h"
#include "backends/native/broadcast_loop.h"
#include "backends/native/element_math.h"
#include "backends/native/elementwise.h"
#include "runtime/parallel.h"

namespace kiln::native::elementwise {
namespace {

// ---- walking a broadcast output ----------------------------------------------------------------

// Splits the output of a broadcasting op into equal parallel chunks of elements and walks each
// chunk row by row, where a row is BroadcastLoop's merged last dimension: the longest run along
// which every operand moves by one element or stays put. Built at plan time (shapes are fixed).
// Rows shorter than this are tiled (see OperandWalk::tile) when the operands allow it.
constexpr int64_t kMinRowLength = 64;
// The longest tiled row: kMinRowLength rounded up to a multiple of a shorter row.
constexpr int64_t kMaxTiledRowLength = 2 * kMinRowLength;

template <size_t N>
class OperandWalk {
 public:
  // `may_tile`: the caller handles tile() > 1 (replicating its row-vector operands).
  OperandWalk(const Shape& output, const std::array<Shape, N>& inputs, bool may_tile = false)
      : loop_(output, std::vector<Shape>(inputs.begin(), inputs.end())),
        total_(checked_numel(output)),
        row_size_(loop_.row_size()) {
    bool tileable = may_tile && row_size_ < kMinRowLength;
    for (size_t i = 0; i < N; ++i) {
      const int64_t count = checked_numel(inputs[i]);
      steps_[i] = loop_.row_stride(i);
      // Counting elements is enough to recognise the simple layouts: an operand that reaches
      // every output element once is laid out like the output, and so on.
      if (count == total_) {
        starts_[i] = RowStart::full;
      } else if (count == 1 || (steps_[i] == 1 && count == row_size_)) {
        starts_[i] = RowStart::fixed;
      } else if (steps_[i] == 0 && count == loop_.rows()) {
        starts_[i] = RowStart::per_row;
        tileable = false;
      } else {
        starts_[i] = RowStart::general;
        tileable = false;
      }
    }
    if (tileable && row_size_ > 0) {
      // Short rows ([N, 3] - [3]) cost more in per-row overhead than in arithmetic. When every
      // operand is laid out like the output or is the same for every row, `tile_` rows are
      // walked as one, and the caller repeats each row-vector operand `tile_` times.
      tile_ = (kMinRowLength + row_size_ - 1) / row_size_;
      row_size_ *= tile_;
    }
  }

  // Rows walked as one; > 1 only when constructed with may_tile. Operand i then needs
  // replicating when replicate(i): its row of row_size() / tile() elements, repeated tile() times.
  int64_t tile() const { return tile_; }
  bool replicate(size_t i) const { return tile_ > 1 && starts_[i] == RowStart::fixed && steps_[i] == 1; }
  int64_t row_size() const { return row_size_; }

  // Element step (0 or 1) of operand i along a row.
  int64_t step(size_t i) const { return steps_[i]; }

  // Calls fn(dst_offset, src_offsets, length) for every row piece, in parallel; element k of the
  // piece is output element dst_offset + k and element src_offsets[i] + k * step(i) of operand i.
  template <typename Fn>
  void run(int64_t cost_per_element, const Fn& fn) const {
    const int64_t row_size = row_size_;
    parallel_for(0, total_, cost_per_element, [&](int64_t begin, int64_t end) {
      int64_t row = begin / row_size;
      int64_t column = begin - row * row_size;
      std::array<int64_t, N> offsets;
      for (int64_t position = begin; position < end; ++row, column = 0) {
        const int64_t length = std::min(row_size - column, end - position);
        for (size_t i = 0; i < N; ++i) offsets[i] = row_start(i, row) + column * steps_[i];
        fn(position, offsets, length);
        position += length;
      }
    });
  }

 private:
  // How an operand's offset at the start of an output row is found: chosen once, so that small
  // rows ([N, 2] + [2]) cost an add each rather than a division per dim.
  enum class RowStart {
    full,     // laid out like the output: row r starts at r * row_size
    fixed,    // the same elements for every row: a scalar, or [..., K] op [K]
    per_row,  // one element per row: [B, S, D] op [B, S, 1]
    general,  // anything else: BroadcastLoop::offset
  };

  int64_t row_start(size_t i, int64_t row) const {
    switch (starts_[i]) {
      case RowStart::full: return row * row_size_;
      case RowStart::fixed: return 0;
      case RowStart::per_row: return row;
      case RowStart::general: break;
    }
    return loop_.offset(i, row);
  }

  BroadcastLoop loop_;
  int64_t total_;
  int64_t row_size_;  // the loop's row size, times tile_
  int64_t tile_ = 1;
  std::array<int64_t, N> steps_{};
  std::array<RowStart, N> starts_{};
};

// ---- binary ------------------------------------------------------------------------------------

// dst[k] = f(a[k * a_step], b[k * b_step]) for k < n, with a loop per step pattern so that the
// common ones (both move; one is a scalar along the row) vectorize. A, B and Out are storage
// types; f works on compute types.
template <typename A, typename B, typename Out, typename F>
void binary_piece(const A* a, int64_t a_step, const B* b, int64_t b_step, Out* dst, int64_t n, const F& f) {
  if (a_step == 1 && b_step == 1) {
    for (int64_t k = 0; k < n; ++k) dst[k] = from_compute<Out>(f(to_compute(a[k]), to_compute(b[k])));
  } else if (a_step == 1) {
    const auto b_value = to_compute(b[0]);
    for (int64_t k = 0; k < n; ++k) dst[k] = from_compute<Out>(f(to_compute(a[k]), b_value));
  } else if (b_step == 1) {
    const auto a_value = to_compute(a[0]);
    for (int64_t k = 0; k < n; ++k) dst[k] = from_compute<Out>(f(a_value, to_compute(b[k])));
  } else {
    const Out value = from_compute<Out>(f(to_compute(a[0]), to_compute(b[0])));
    std::fill(dst, dst + n, value);
  }
}

// `operand`'s row of walk.row_size() / walk.tile() elements repeated to fill `tiled`.
template <typename T>
const T* replicate_row(const T* operand, const OperandWalk<2>& walk, std::array<T, kMaxTiledRowLength>& tiled) {
  const int64_t length = walk.row_size() / walk.tile();
  for (int64_t i = 0; i < walk.row_size(); ++i) tiled[i] = operand[i % length];
  return tiled.data();
}

template <typename A, typename B, typename Out, typename F>
void run_binary(const OperandWalk<2>& walk, const Tensor& a_tensor, const Tensor& b_tensor, Tensor& dst_tensor,
                int64_t cost, const F& f) {
  const A* a = static_cast<const A*>(a_tensor.raw_data());
  const B* b = static_cast<const B*>(b_tensor.raw_data());
  Out* dst = static_cast<Out*>(dst_tensor.raw_data());
  std::array<A, kMaxTiledRowLength> a_tiled;
  std::array<B, kMaxTiledRowLength> b_tiled;
  if (walk.replicate(0)) a = replicate_row(a, walk, a_tiled);
  if (walk.replicate(1)) b = replicate_row(b, walk, b_tiled);
  const int64_t a_step = walk.step(0);
  const int64_t b_step = walk.step(1);
  walk.run(cost, [&](int64_t dst_offset, const std::array<int64_t, 2>& offsets, int64_t n) {
    binary_piece(a + offsets[0], a_step, b + offsets[1], b_step, dst + dst_offset, n, f);
  });
}

OperandWalk<2> binary_walk(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  return OperandWalk<2>(outputs[0].shape, {spec.input(0).shape, spec.input(1).shape}, true);
}

// A kernel running f over inputs 0 and 1 stored as A and B, writing Out.
template <typename A, typename B, typename Out, typename F>
KernelOrReason binary_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs, int64_t cost, F f) {
  return make_kernel(kernel_name(spec), [walk = binary_walk(spec, outputs), cost, f](std::span<const Tensor> inputs,
                                                                                      std::span<Tensor> dsts) {
    run_binary<A, B, Out>(walk, inputs[0], inputs[1], dsts[0], cost, f);
  });
}

// Calls make(T{}) for the numeric (non-bool) dtype of input 0.
template <typename Make>
KernelOrReason visit_numeric(const OpSpec& spec, Make make) {
  const DType dtype = spec.input(0).dtype;
  return visit_dtype(dtype, [&](auto tag) -> KernelOrReason {
    if constexpr (std::is_same_v<decltype(tag), bool>) {
      return unsupported_dtype(spec, dtype);
    } else {
      return make(tag);
    }
  });
}

// Integer + - * wrap around (two's complement) instead of overflowing, which C++ leaves undefined.
template <typename C>
struct WrappingOf {
  using type = C;
};
template <typename C>
  requires std::is_integral_v<C>
struct WrappingOf<C> {
  using type = std::make_unsigned_t<C>;
};
template <typename C>
using Wrapping = typename WrappingOf<C>::type;

struct AddFn {
  template <typename C>
  C operator()(C x, C y) const { return static_cast<C>(static_cast<Wrapping<C>>(x) + static_cast<Wrapping<C>>(y)); }
};
struct SubFn {
  template <typename C>
  C operator()(C x, C y) const { return static_cast<C>(static_cast<Wrapping<C>>(x) - static_cast<Wrapping<C>>(y)); }
};
struct MulFn {
  template <typename C>
  C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C> && sizeof(C) < sizeof(unsigned)) {
      // Narrow unsigned values promote to int, whose product may overflow; multiply as unsigned.
      return static_cast<C>(static_cast<unsigned>(x) * static_cast<unsigned>(y));
    } else {
      return static_cast<C>(static_cast<Wrapping<C>>(x) * static_cast<Wrapping<C>>(y));
    }
  }
};

// Integer division truncates toward zero, like C; by zero it is an error, not a trap.
struct DivFn {
  template <typename C>
  C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) {
      if (y == 0) fail(ErrorKind::invalid_argument, "Div: integer division by zero");
      if constexpr (std::is_signed_v<C>) {
        if (y == C(-1)) return static_cast<C>(-static_cast<std::make_unsigned_t<C>>(x));  // INT_MIN / -1 traps
      }
      return static_cast<C>(x / y);
    } else {
      return x / y;
    }
  }
};

// Mod: the result takes the divisor's sign (Python's %) unless fmod=1, where it takes the
// dividend's (C's fmod and %).
template <bool kSignOfDivisor>
struct ModFn {
  template <typename C>
  C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) {
      if (y == 0) fail(ErrorKind::invalid_argument, "Mod: integer modulo by zero");
      if constexpr (std::is_signed_v<C>) {
        if (y == C(-1)) return 0;  // INT_MIN % -1 traps
        C r = static_cast<C>(x % y);
        if (kSignOfDivisor && r != 0 && ((r < 0) != (y < 0))) r = static_cast<C>(r + y);
        return r;
      } else {
        return static_cast<C>(x % y);
      }
    } else {
      C r = std::fmod(x, y);
      if (kSignOfDivisor && r != 0 && ((r < 0) != (y < 0))) r += y;
      return r;
    }
  }
};

// Max and Min propagate NaN, like numpy's maximum/minimum. `|` rather than `||` keeps the loop
// branch-free.
struct MaxFn {
  template <typename C>
  C operator()(C x, C y) const { return ((x != x) | (x > y)) ? x : y; }
};
struct MinFn {
  template <typename C>
  C operator()(C x, C y) const { return ((x != x) | (x < y)) ? x : y; }
};

struct PReluFn {
  template <typename C>
  C operator()(C x, C slope) const { return choose(x < C(0), static_cast<C>(x * slope), x); }
};

template <typename Fn>
KernelOrReason arithmetic_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  return visit_numeric(spec, [&](auto tag) {
    using T = decltype(tag);
    return binary_kernel<T, T, T>(spec, outputs, kCheapCost, Fn{});
  });
}

// ---- Pow ---------------------------------------------------------------------------------------

// base^exponent for integers by repeated squaring, wrapping like multiplication. Negative
// exponents give 1 / base^-e truncated: 0 unless base is 1 or -1.
template <typename C, typename E>
C integer_power(C base, E exponent) {
  if constexpr (std::is_signed_v<E>) {
    if (exponent < 0) {
      if (base == C(1)) return C(1);
      if constexpr (std::is_signed_v<C>) {
        if (base == C(-1)) return (exponent % 2 == 0) ? C(1) : C(-1);
      }
      return C(0);
    }
  }
  uint64_t result = 1;
  uint64_t square = static_cast<uint64_t>(base);  // modular arithmetic: exact in the low bits
  for (auto e = static_cast<uint64_t>(exponent); e != 0; e >>= 1) {
    if (e & 1) result *= square;
    square *= square;
  }
  return static_cast<C>(result);
}

// One Pow element for base compute type C and exponent compute type D.
template <typename C, typename D>
C power(C x, D y) {
  if constexpr (std::is_floating_point_v<C>) {
    if constexpr (std::is_same_v<C, float> && std::is_same_v<D, float>) {
      return std::pow(x, y);
    } else {
      return static_cast<C>(std::pow(static_cast<double>(x), static_cast<double>(y)));
    }
  } else if constexpr (std::is_integral_v<D>) {
    return integer_power(x, y);
  } else {
    return saturate_cast<C>(std::pow(static_cast<double>(x), static_cast<double>(y)));
  }
}

// Pow with a one-element exponent, the usual case (x^2 in variance, x^3 in GELU's tanh form,
// x^0.5): the output has the base's elements in the base's order, so it is a unary loop over the
// base, and the common exponents become multiplications.
template <typename B>
void scalar_exponent_pow(const Tensor& base_tensor, const Tensor& exponent_tensor, Tensor& dst_tensor) {
  using C = compute_t<B>;
  const B* src = base_tensor.data<B>();
  B* dst = dst_tensor.data<B>();
  const double exponent = exponent_tensor.double_at(0);
  auto apply = [&](int64_t cost, auto f) {
    parallel_for(0, base_tensor.numel(), cost, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dst[i] = from_compute<B>(f(to_compute(src[i])));
    });
  };
  if constexpr (std::is_floating_point_v<C>) {
    constexpr int64_t kPowCost = 20;
    if (exponent == 1) return apply(kCheapCost, [](C x) { return x; });
    if (exponent == 2) return apply(kCheapCost, [](C x) { return x * x; });
    if (exponent == 3) return apply(kCheapCost, [](C x) { return x * x * x; });
    if (exponent == -1) return apply(kCheapCost, [](C x) { return C(1) / x; });
    if (exponent == 0.5) {
      // pow(-0, 0.5) is +0 where sqrt gives -0; adding +0 fixes the sign. pow(-inf, 0.5) is +inf.
      return apply(kPowCost, [](C x) {
        return x == -std::numeric_limits<C>::infinity() ? std::numeric_limits<C>::infinity() : std::sqrt(x) + C(0);
      });
    }
    if (static_cast<double>(static_cast<C>(exponent)) == exponent) {
      const C e = static_cast<C>(exponent);
      return apply(kPowCost, [e](C x) { return std::pow(x, e); });
    }
    return apply(kPowCost, [exponent](C x) { return static_cast<C>(std::pow(static_cast<double>(x), exponent)); });
  } else if (is_integer(exponent_tensor.dtype())) {
    const int64_t e = exponent_tensor.int_at(0);
    return apply(kCheapCost, [e](C x) { return integer_power(x, e); });
  } else {
    return apply(kCheapCost, [exponent](C x) { return saturate_cast<C>(std::pow(static_cast<double>(x), exponent)); });
  }
}

// ---- comparisons, logic, BitShift --------------------------------------------------------------

struct EqualFn {
  template <typename C>
  bool operator()(C x, C y) const { return x == y; }
};
struct LessFn {
  template <typename C>
  bool operator()(C x, C y) const { return x < y; }
};
struct GreaterFn {
  template <typename C>
  bool operator()(C x, C y) const { return x > y; }
};
struct LessOrEqualFn {
  template <typename C>
  bool operator()(C x, C y) const { return x <= y; }
};
struct GreaterOrEqualFn {
  template <typename C>
  bool operator()(C x, C y) const { return x >= y; }
};

template <typename Fn>
KernelOrReason comparison_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  return visit_dtype(spec.input(0).dtype, [&](auto tag) {
    using T = decltype(tag);
    return binary_kernel<T, T, bool>(spec, outputs, kCheapCost, Fn{});
  });
}

// And, Or, Xor work on the bytes of bool tensors (0 or 1): GCC vectorizes byte loops, not bool ones.
template <typename Fn>
KernelOrReason logical_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs, Fn f) {
  if (spec.input(0).dtype != DType::boolean || spec.input(1).dtype != DType::boolean) {
    return unsupported_dtype(spec, spec.input(0).dtype);
  }
  return binary_kernel<uint8_t, uint8_t, uint8_t>(spec, outputs, kCheapCost, f);
}

// ---- variadic ----------------------------------------------------------------------------------

// Max, Min, Sum, Mean: the output is folded pass by pass, first f(input 0, input 1), then
// f(output, input k). Every pass's walk is built at plan time.
template <typename Fn>
KernelOrReason variadic_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs, bool mean) {
  const Shape& shape = outputs[0].shape;
  std::vector<OperandWalk<2>> passes;
  if (spec.num_inputs() == 1) {
    passes.emplace_back(shape, std::array<Shape, 2>{spec.input(0).shape, spec.input(0).shape}, true);
  } else {
    passes.emplace_back(shape, std::array<Shape, 2>{spec.input(0).shape, spec.input(1).shape}, true);
    for (int i = 2; i < spec.num_inputs(); ++i) {
      passes.emplace_back(shape, std::array<Shape, 2>{shape, spec.input(i).shape}, true);
    }
  }
  return visit_numeric(spec, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    return make_kernel(kernel_name(spec), [passes, mean](std::span<const Tensor> inputs, std::span<Tensor> dsts) {
      Tensor& dst = dsts[0];
      if (inputs.size() == 1) {
        run_binary<T, T, T>(passes[0], inputs[0], inputs[0], dst, kCheapCost, [](C x, C) { return x; });
      } else {
        run_binary<T, T, T>(passes[0], inputs[0], inputs[1], dst, kCheapCost, Fn{});
        for (size_t i = 2; i < inputs.size(); ++i) run_binary<T, T, T>(passes[i - 1], dst, inputs[i], dst, kCheapCost, Fn{});
      }
      if (mean) {
        const C count = static_cast<C>(inputs.size());
        T* data = dst.data<T>();
        parallel_for(0, dst.numel(), kCheapCost, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) data[i] = from_compute<T>(to_compute(data[i]) / count);
        });
      }
    });
  });
}

// ---- Where -------------------------------------------------------------------------------------

// One Where row piece with the steps of condition, X and Y fixed at compile time. Both values are
// loaded before choosing, which keeps the loop branch-free.
template <typename T, int kConditionStep, int kXStep, int kYStep>
void where_piece(const uint8_t* condition, const T* x, const T* y, T* dst, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    const T if_true = x[k * kXStep];
    const T if_false = y[k * kYStep];
    dst[k] = condition[k * kConditionStep] ? if_true : if_false;
  }
}

// Where only moves elements, so it is instantiated per element size, not per type.
template <typename T>
KernelOrReason where_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  OperandWalk<3> walk(outputs[0].shape, {spec.input(0).shape, spec.input(1).shape, spec.input(2).shape});
  return make_kernel("native:where", [walk](std::span<const Tensor> inputs, std::span<Tensor> dsts) {
    const auto* condition = static_cast<const uint8_t*>(inputs[0].raw_data());
    const auto* x = static_cast<const T*>(inputs[1].raw_data());
    const auto* y = static_cast<const T*>(inputs[2].raw_data());
    T* dst = static_cast<T*>(dsts[0].raw_data());
    const int pattern = static_cast<int>(walk.step(0) * 4 + walk.step(1) * 2 + walk.step(2));
    walk.run(kCheapCost, [&](int64_t dst_offset, const std::array<int64_t, 3>& offsets, int64_t n) {
      const uint8_t* c = condition + offsets[0];
      const T* px = x + offsets[1];
      const T* py = y + offsets[2];
      T* pd = dst + dst_offset;
      switch (pattern) {
        case 0: return where_piece<T, 0, 0, 0>(c, px, py, pd, n);
        case 1: return where_piece<T, 0, 0, 1>(c, px, py, pd, n);
        case 2: return where_piece<T, 0, 1, 0>(c, px, py, pd, n);
        case 3: return where_piece<T, 0, 1, 1>(c, px, py, pd, n);
        case 4: return where_piece<T, 1, 0, 0>(c, px, py, pd, n);
        case 5: return where_piece<T, 1, 0, 1>(c, px, py, pd, n);
        case 6: return where_piece<T, 1, 1, 0>(c, px, py, pd, n);
        default: return where_piece<T, 1, 1, 1>(c, px, py, pd, n);
      }
    });
  });
}

}  // namespace

KernelOrReason make_add(const OpSpec& spec, Outputs outputs) { return arithmetic_kernel<AddFn>(spec, outputs); }
KernelOrReason make_sub(const OpSpec& spec, Outputs outputs) { return arithmetic_kernel<SubFn>(spec, outputs); }
KernelOrReason make_mul(const OpSpec& spec, Outputs outputs) { return arithmetic_kernel<MulFn>(spec, outputs); }
KernelOrReason make_div(const OpSpec& spec, Outputs outputs) { return arithmetic_kernel<DivFn>(spec, outputs); }
KernelOrReason make_prelu(const OpSpec& spec, Outputs outputs) { return arithmetic_kernel<PReluFn>(spec, outputs); }

KernelOrReason make_mod(const OpSpec& spec, Outputs outputs) {
  const bool fmod = spec.attrs().get_int("fmod", 0) != 0;
  return fmod ? arithmetic_kernel<ModFn<false>>(spec, outputs) : arithmetic_kernel<ModFn<true>>(spec, outputs);
}

KernelOrReason make_pow(const OpSpec& spec, Outputs outputs) {
  const DType base = spec.input(0).dtype;
  const DType exponent = spec.input(1).dtype;
  if (exponent == DType::boolean) return unsupported_dtype(spec, exponent);
  // ONNX's Pow bases: the floats, int32 and int64.
  if (!is_floating(base) && base != DType::i32 && base != DType::i64) return unsupported_dtype(spec, base);
  const bool scalar_exponent = checked_numel(spec.input(1).shape) == 1;
  return visit_numeric(spec, [&](auto base_tag) -> KernelOrReason {
    using B = decltype(base_tag);
    if constexpr (!std::is_floating_point_v<compute_t<B>> && !std::is_same_v<B, int32_t> &&
                  !std::is_same_v<B, int64_t>) {
      return unsupported_dtype(spec, base);  // checked above; this only skips instantiations
    } else {
      if (scalar_exponent) {
        return make_kernel("native:pow", [](std::span<const Tensor> inputs, std::span<Tensor> dsts) {
          scalar_exponent_pow<B>(inputs[0], inputs[1], dsts[0]);
        });
      }
      return visit_dtype(exponent, [&](auto exponent_tag) -> KernelOrReason {
        using E = decltype(exponent_tag);
        if constexpr (std::is_same_v<E, bool>) {
          return unsupported_dtype(spec, exponent);
        } else {
          return binary_kernel<B, E, B>(spec, outputs, kTranscendentalCost,
                                        [](auto x, auto y) { return power(x, y); });
        }
      });
    }
  });
}

KernelOrReason make_max(const OpSpec& spec, Outputs outputs) { return variadic_kernel<MaxFn>(spec, outputs, false); }
KernelOrReason make_min(const OpSpec& spec, Outputs outputs) { return variadic_kernel<MinFn>(spec, outputs, false); }
KernelOrReason make_sum(const OpSpec& spec, Outputs outputs) { return variadic_kernel<AddFn>(spec, outputs, false); }
KernelOrReason make_mean(const OpSpec& spec, Outputs outputs) { return variadic_kernel<AddFn>(spec, outputs, true); }

KernelOrReason make_equal(const OpSpec& spec, Outputs outputs) { return comparison_kernel<EqualFn>(spec, outputs); }
KernelOrReason make_less(const OpSpec& spec, Outputs outputs) { return comparison_kernel<LessFn>(spec, outputs); }
KernelOrReason make_greater(const OpSpec& spec, Outputs outputs) {
  return comparison_kernel<GreaterFn>(spec, outputs);
}
KernelOrReason make_less_or_equal(const OpSpec& spec, Outputs outputs) {
  return comparison_kernel<LessOrEqualFn>(spec, outputs);
}
KernelOrReason make_greater_or_equal(const OpSpec& spec, Outputs outputs) {
  return comparison_kernel<GreaterOrEqualFn>(spec, outputs);
}

KernelOrReason make_and(const OpSpec& spec, Outputs outputs) {
  return logical_kernel(spec, outputs, [](uint8_t x, uint8_t y) { return static_cast<uint8_t>(x & y); });
}
KernelOrReason make_or(const OpSpec& spec, Outputs outputs) {
  return logical_kernel(spec, outputs, [](uint8_t x, uint8_t y) { return static_cast<uint8_t>(x | y); });
}
KernelOrReason make_xor(const OpSpec& spec, Outputs outputs) {
  return logical_kernel(spec, outputs, [](uint8_t x, uint8_t y) { return static_cast<uint8_t>(x ^ y); });
}

KernelOrReason make_bitshift(const OpSpec& spec, Outputs outputs) {
  const bool left = spec.attrs().get_string("direction", "") == "LEFT";
  return visit_dtype(spec.input(0).dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    if constexpr (std::is_unsigned_v<T> && !std::is_same_v<T, bool>) {
      return binary_kernel<T, T, T>(spec, outputs, kCheapCost, [left](T x, T y) -> T {
        if (y >= sizeof(T) * 8) return 0;  // shifting by the width or more is undefined in C++
        return left ? static_cast<T>(x << y) : static_cast<T>(x >> y);
      });
    } else {
      return unsupported_dtype(spec, spec.input(0).dtype);
    }
  });
}

// BitwiseAnd, BitwiseOr, BitwiseXor on any integer type (opset 18).
template <typename Fn>
KernelOrReason bitwise_kernel(const OpSpec& spec, std::span<const TensorInfo> outputs, Fn f) {
  return visit_dtype(spec.input(0).dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      return binary_kernel<T, T, T>(spec, outputs, kCheapCost, [f](T x, T y) { return static_cast<T>(f(x, y)); });
    } else {
      return unsupported_dtype(spec, spec.input(0).dtype);
    }
  });
}

KernelOrReason make_bitwise_and(const OpSpec& spec, Outputs outputs) {
  return bitwise_kernel(spec, outputs, [](auto x, auto y) { return x & y; });
}
KernelOrReason make_bitwise_or(const OpSpec& spec, Outputs outputs) {
  return bitwise_kernel(spec, outputs, [](auto x, auto y) { return x | y; });
}
KernelOrReason make_bitwise_xor(const OpSpec& spec, Outputs outputs) {
  return bitwise_kernel(spec, outputs, [](auto x, auto y) { return x ^ y; });
}

KernelOrReason make_where(const OpSpec& spec, Outputs outputs) {
  if (spec.input(0).dtype != DType::boolean) return unsupported_dtype(spec, spec.input(0).dtype);
  switch (dtype_size(spec.input(1).dtype)) {
    case 1: return where_kernel<uint8_t>(spec, outputs);
    case 2: return where_kernel<uint16_t>(spec, outputs);
    case 4: return where_kernel<uint32_t>(spec, outputs);
    case 8: return where_kernel<uint64_t>(spec, outputs);
    default: return unsupported_dtype(spec, spec.input(1).dtype);
  }
}

}  // namespace kiln::native::elementwise
