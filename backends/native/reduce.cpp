// Native reductions. At plan time adjacent dims that are both kept or both reduced are merged and
// size-1 dims dropped, which leaves one of three layouts:
//   rows     [kept, reduced]         each output reduces one contiguous run (last-axis ReduceMean);
//   columns  [kept, reduced, kept]   outputs of one kept block accumulate side by side, row by row;
//   strided  anything else           each output walks its reduced sub-space with an odometer.
// Rows and columns vectorize: runs accumulate into kLanes independent lanes (floats in double,
// integers in wrapping 64-bit), which also keeps float sums of long runs accurate.
#include "ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/elementwise.h"
#include "backends/native/isa_variant.h"
#include "backends/native/native_backend.h"
#include "backends/native/simd.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

using elementwise::saturate_cast;

enum class Reduction { mean, sum, max, min, prod, l1, l2, log_sum, log_sum_exp, sum_square, arg_max, arg_min };

// Independent accumulators per run: enough to hide add latency and fill two SSE registers of double.
constexpr int kLanes = 8;
// Column outputs accumulated together: the accumulators stay in L1 while rows stream past.
constexpr int64_t kColumnTile = 512;
// A single output over a long run is split into blocks of this many elements reduced in parallel;
// the split depends only on the size, so results do not change with the thread count.
constexpr int64_t kBlockSize = 16 * 1024;
// Rough scalar operations per element, for parallel_for's inline threshold.
constexpr int64_t kCostPerElement = 2;
constexpr int64_t kExpCostPerElement = 20;

// What one reduction does to each element (map), between accumulators (combine) and at the end
// (finish). Floats accumulate in double; integers in wrapping uint64, which gives the exact low bits
// for sums and products of any signed or unsigned type. Max and min stay in the element's type.
template <Reduction kKind, typename T>
struct Reducer {
  using C = compute_t<T>;
  static constexpr bool kFloating = std::is_floating_point_v<C>;
  static constexpr bool kExtremum = kKind == Reduction::max || kKind == Reduction::min;
  using Acc = std::conditional_t<kExtremum, C, std::conditional_t<kFloating || kKind == Reduction::log_sum_exp, double, uint64_t>>;

  static Acc identity() {
    if constexpr (kKind == Reduction::max) {
      return kFloating ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest();
    } else if constexpr (kKind == Reduction::min) {
      return kFloating ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max();
    } else if constexpr (kKind == Reduction::prod) {
      return Acc{1};
    } else {
      return Acc{0};
    }
  }

  // `shift` is LogSumExp's maximum (0 when it is not finite); the other kinds ignore it.
  static Acc map(T value, double shift) {
    const C x = to_compute(value);
    if constexpr (kExtremum) {
      return x;
    } else if constexpr (kKind == Reduction::log_sum_exp) {
      return std::exp(static_cast<double>(x) - shift);
    } else if constexpr (kKind == Reduction::l1) {
      if constexpr (kFloating) {
        return std::fabs(static_cast<Acc>(x));
      } else if constexpr (std::is_signed_v<C>) {
        return x < 0 ? Acc{0} - static_cast<Acc>(x) : static_cast<Acc>(x);
      } else {
        return static_cast<Acc>(x);
      }
    } else if constexpr (kKind == Reduction::l2 || kKind == Reduction::sum_square) {
      return static_cast<Acc>(x) * static_cast<Acc>(x);
    } else {
      return static_cast<Acc>(x);
    }
  }

  static Acc combine(Acc a, Acc b) {
    if constexpr (kKind == Reduction::max) {
      return (b > a || b != b) ? b : a;  // b != b: NaN wins, as in numpy
    } else if constexpr (kKind == Reduction::min) {
      return (b < a || b != b) ? b : a;
    } else if constexpr (kKind == Reduction::prod) {
      return a * b;
    } else {
      return a + b;
    }
  }

  // The accumulator as a signed or unsigned value, for the kinds that finish in double.
  static double as_double(Acc acc) {
    if constexpr (kFloating || std::is_same_v<Acc, double>) {
      return static_cast<double>(acc);
    } else if constexpr (std::is_signed_v<C>) {
      return static_cast<double>(static_cast<int64_t>(acc));
    } else {
      return static_cast<double>(acc);
    }
  }

  static T to_output(double value) {
    if constexpr (kFloating) {
      return from_compute<T>(value);
    } else {
      return saturate_cast<T>(value);
    }
  }

  static T finish(Acc acc, int64_t count, double shift) {
    if constexpr (kKind == Reduction::mean) {
      return to_output(as_double(acc) / static_cast<double>(count));
    } else if constexpr (kKind == Reduction::l2) {
      return to_output(std::sqrt(as_double(acc)));
    } else if constexpr (kKind == Reduction::log_sum) {
      return to_output(std::log(as_double(acc)));
    } else if constexpr (kKind == Reduction::log_sum_exp) {
      return to_output(shift + std::log(acc));
    } else if constexpr (kExtremum || kFloating) {
      return from_compute<T>(acc);
    } else {
      return static_cast<T>(acc);  // modular, like the wrapping accumulation
    }
  }
};

// LogSumExp subtracts the maximum before exp() so that it cannot overflow; an infinite or NaN maximum
// is left to propagate through the sum instead.
inline double exp_shift(double maximum) { return std::isfinite(maximum) ? maximum : 0.0; }

// Reduces n elements `stride` apart. With kUnitStride the lane loop vectorizes.
template <typename R, bool kUnitStride, typename T>
typename R::Acc reduce_run(const T* src, int64_t n, int64_t stride, double shift) {
  using Acc = typename R::Acc;
  if constexpr (kUnitStride) stride = 1;
  int64_t i = 0;
  Acc lanes[kLanes];
  for (Acc& lane : lanes) lane = R::identity();
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lanes[j] = R::combine(lanes[j], R::map(src[(i + j) * stride], shift));
  }
  for (int j = 0; i < n; ++i, ++j) lanes[j] = R::combine(lanes[j], R::map(src[i * stride], shift));
  // Pairwise, so that the lanes' partial sums meet in a fixed order.
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) lanes[j] = R::combine(lanes[j], lanes[j + width]);
  }
  return lanes[0];
}

// ---- float rows with GCC vectors ---------------------------------------------------------------
// The transformer's ReduceMean over the last axis (and the other sums, max and min of float rows)
// in vectors of the widest ISA the CPU has, chosen once like gemm.cpp's micro-kernels.

constexpr bool has_float_rows(Reduction kind) {
  return kind == Reduction::mean || kind == Reduction::sum || kind == Reduction::sum_square || kind == Reduction::l1 ||
         kind == Reduction::l2 || kind == Reduction::max || kind == Reduction::min;
}

template <typename S, Reduction kKind>
[[gnu::always_inline]] inline typename S::F vector_map(typename S::F x) {
  if constexpr (kKind == Reduction::sum_square || kKind == Reduction::l2) {
    return x * x;
  } else if constexpr (kKind == Reduction::l1) {
    constexpr uint32_t kMagnitudeBits = 0x7fffffffu;  // clears the sign bit
    return reinterpret_cast<typename S::F>(reinterpret_cast<typename S::U>(x) & kMagnitudeBits);
  } else {
    return x;
  }
}

template <typename S, Reduction kKind>
[[gnu::always_inline]] inline typename S::F vector_combine(typename S::F a, typename S::F b) {
  if constexpr (kKind == Reduction::max) {
    return ((b > a) | (b != b)) ? b : a;  // a NaN wins, as in numpy
  } else if constexpr (kKind == Reduction::min) {
    return ((b < a) | (b != b)) ? b : a;
  } else {
    return a + b;
  }
}

template <typename S, Reduction kKind>
[[gnu::always_inline]] inline typename S::F load_mapped(const float* src) {
  typename S::F x;
  std::memcpy(&x, src, sizeof(x));
  return vector_map<S, kKind>(x);
}

// Adds the lanes of x, widened to double, to two double accumulators.
template <typename S>
[[gnu::always_inline]] inline void accumulate_wide(typename S::F x, typename S::D& low, typename S::D& high) {
  typename S::H h0, h1;
  std::memcpy(&h0, &x, sizeof(h0));
  std::memcpy(&h1, reinterpret_cast<const char*>(&x) + sizeof(h0), sizeof(h1));
  low += __builtin_convertvector(h0, typename S::D);
  high += __builtin_convertvector(h1, typename S::D);
}

template <typename S, Reduction kKind>
[[gnu::always_inline]] inline float float_row(const float* src, int64_t n) {
  using F = typename S::F;
  using R = Reducer<kKind, float>;
  constexpr int64_t kWidth = sizeof(F) / sizeof(float);
  typename R::Acc acc = R::identity();
  int64_t i = 0;
  if constexpr (kKind == Reduction::max || kKind == Reduction::min) {
    // Exact in float.
    const F identity = F{} + R::identity();
    F a0 = identity, a1 = identity;
    for (; i + 2 * kWidth <= n; i += 2 * kWidth) {
      a0 = vector_combine<S, kKind>(a0, load_mapped<S, kKind>(src + i));
      a1 = vector_combine<S, kKind>(a1, load_mapped<S, kKind>(src + i + kWidth));
    }
    for (; i + kWidth <= n; i += kWidth) a0 = vector_combine<S, kKind>(a0, load_mapped<S, kKind>(src + i));
    a0 = vector_combine<S, kKind>(a0, a1);
    for (int64_t j = 0; j < kWidth; ++j) acc = R::combine(acc, a0[j]);
  } else {
    // Sums accumulate in double, as the portable path does: a float mean of values far from zero
    // would lose the digits that a following Sub (the exported LayerNorm's x - mean) needs.
    typename S::D a0{}, a1{}, a2{}, a3{};
    for (; i + 2 * kWidth <= n; i += 2 * kWidth) {
      accumulate_wide<S>(load_mapped<S, kKind>(src + i), a0, a1);
      accumulate_wide<S>(load_mapped<S, kKind>(src + i + kWidth), a2, a3);
    }
    for (; i + kWidth <= n; i += kWidth) accumulate_wide<S>(load_mapped<S, kKind>(src + i), a0, a1);
    const typename S::D total = (a0 + a1) + (a2 + a3);
    for (size_t j = 0; j < sizeof(total) / sizeof(double); ++j) acc += total[j];
  }
  for (; i < n; ++i) acc = R::combine(acc, R::map(src[i], 0.0));
  return R::finish(acc, n, 0.0);
}

using FloatRowsFn = void (*)(const float* src, float* dst, int64_t rows, int64_t n);

template <Reduction kKind>
__attribute__((target("avx512f"))) void float_rows_avx512(const float* src, float* dst, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) dst[r] = float_row<Simd<16>, kKind>(src + r * n, n);
}
template <Reduction kKind>
__attribute__((target("avx2"))) void float_rows_avx2(const float* src, float* dst, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) dst[r] = float_row<Simd<8>, kKind>(src + r * n, n);
}
template <Reduction kKind>
void float_rows_baseline(const float* src, float* dst, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) dst[r] = float_row<Simd<4>, kKind>(src + r * n, n);
}

using FloatRows = IsaVariant<FloatRowsFn>;

template <Reduction kKind>
FloatRows float_rows() {
  return pick_isa_variant<FloatRowsFn>(float_rows_avx512<kKind>, float_rows_avx2<kKind>,
                                       float_rows_baseline<kKind>);
}

enum class Layout { rows, columns, strided };

// The input viewed after merging dims (see the file comment), fixed at plan time.
struct ReduceGeometry {
  Layout layout = Layout::rows;
  int64_t outer = 1;          // rows: outputs; columns: kept blocks before the reduced block
  int64_t reduced_count = 1;  // elements reduced into each output
  int64_t inner = 1;          // columns: kept elements after the reduced block
  // strided: merged kept and reduced dims with their input strides (reduced has at least one dim).
  Shape kept_shape;
  std::vector<int64_t> kept_strides;
  Shape reduced_shape;
  std::vector<int64_t> reduced_strides;
};

ReduceGeometry reduce_geometry(const Shape& input, const std::vector<bool>& reduced) {
  struct Block {
    int64_t size;
    bool reduced;
  };
  std::vector<Block> blocks;
  ReduceGeometry g;
  for (size_t d = 0; d < input.size(); ++d) {
    if (reduced[d]) g.reduced_count *= input[d];
    if (input[d] == 1) continue;
    if (!blocks.empty() && blocks.back().reduced == reduced[d]) {
      blocks.back().size *= input[d];
    } else {
      blocks.push_back({input[d], reduced[d]});
    }
  }
  int64_t stride = 1;
  for (size_t b = blocks.size(); b-- > 0;) {
    auto& sizes = blocks[b].reduced ? g.reduced_shape : g.kept_shape;
    auto& strides = blocks[b].reduced ? g.reduced_strides : g.kept_strides;
    sizes.insert(sizes.begin(), blocks[b].size);
    strides.insert(strides.begin(), stride);
    stride *= blocks[b].size;
  }
  if (g.reduced_shape.empty()) {
    g.reduced_shape.push_back(1);
    g.reduced_strides.push_back(0);
  }
  const auto pattern = [&](std::initializer_list<bool> flags) {
    return std::equal(blocks.begin(), blocks.end(), flags.begin(), flags.end(),
                      [](const Block& block, bool flag) { return block.reduced == flag; });
  };
  if (blocks.size() <= 1 || pattern({false, true})) {
    g.layout = Layout::rows;
    g.outer = blocks.empty() || blocks[0].reduced ? 1 : blocks[0].size;
  } else if (pattern({true, false})) {
    g.layout = Layout::columns;
    g.inner = blocks[1].size;
  } else if (pattern({false, true, false})) {
    g.layout = Layout::columns;
    g.outer = blocks[0].size;
    g.inner = blocks[2].size;
  } else {
    g.layout = Layout::strided;
  }
  return g;
}

// Offset of output `o`'s first element in the strided layout.
int64_t kept_offset(const ReduceGeometry& g, int64_t o) {
  int64_t offset = 0;
  for (size_t d = g.kept_shape.size(); d-- > 0;) {
    offset += (o % g.kept_shape[d]) * g.kept_strides[d];
    o /= g.kept_shape[d];
  }
  return offset;
}

// Calls fn(run, n, stride) for each innermost reduced run of the output starting at `base`, in
// row-major order of the reduced dims.
template <typename T, typename Fn>
void for_each_run(const T* src, const ReduceGeometry& g, int64_t base, Fn&& fn) {
  const size_t last = g.reduced_shape.size() - 1;
  const int64_t runs = g.reduced_count / g.reduced_shape[last];
  for (int64_t r = 0; r < runs; ++r) {
    int64_t offset = base;
    for (int64_t d = static_cast<int64_t>(last) - 1, rest = r; d >= 0; --d) {
      offset += (rest % g.reduced_shape[d]) * g.reduced_strides[d];
      rest /= g.reduced_shape[d];
    }
    fn(src + offset, g.reduced_shape[last], g.reduced_strides[last]);
  }
}

// `float_rows` is the vectorized kernel for float rows of this kind (null to use the portable one).
template <typename T, Reduction kKind>
void reduce_rows(const T* src, T* dst, const ReduceGeometry& g, int64_t cost, FloatRowsFn float_rows) {
  using R = Reducer<kKind, T>;
  using Max = Reducer<Reduction::max, T>;
  const int64_t n = g.reduced_count;
  const auto reduce_one = [&](const T* row) {
    double shift = 0;
    if constexpr (kKind == Reduction::log_sum_exp) shift = exp_shift(reduce_run<Max, true>(row, n, 1, 0.0));
    return R::finish(reduce_run<R, true>(row, n, 1, shift), n, shift);
  };
  if (g.outer == 1 && n >= 2 * kBlockSize && kKind != Reduction::log_sum_exp) {
    const int64_t blocks = (n + kBlockSize - 1) / kBlockSize;
    std::vector<typename R::Acc> partial(static_cast<size_t>(blocks));
    parallel_for(0, blocks, kBlockSize * cost, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const int64_t start = b * kBlockSize;
        partial[b] = reduce_run<R, true>(src + start, std::min(kBlockSize, n - start), 1, 0.0);
      }
    });
    typename R::Acc acc = R::identity();
    for (const auto& value : partial) acc = R::combine(acc, value);
    dst[0] = R::finish(acc, n, 0.0);
    return;
  }
  parallel_for(0, g.outer, n * cost, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      if (float_rows != nullptr) return float_rows(src + begin * n, dst + begin, end - begin, n);
    }
    for (int64_t o = begin; o < end; ++o) dst[o] = reduce_one(src + o * n);
  });
}

template <typename T, Reduction kKind>
void reduce_columns(const T* src, T* dst, const ReduceGeometry& g, int64_t cost) {
  using R = Reducer<kKind, T>;
  using Max = Reducer<Reduction::max, T>;
  const int64_t n = g.reduced_count;
  const int64_t tiles = (g.inner + kColumnTile - 1) / kColumnTile;
  parallel_for(0, g.outer * tiles, n * std::min(g.inner, kColumnTile) * cost, [&](int64_t begin, int64_t end) {
    typename R::Acc acc[kColumnTile];
    double shift[kColumnTile];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / tiles;
      const int64_t first = (task % tiles) * kColumnTile;
      const int64_t width = std::min(kColumnTile, g.inner - first);
      const T* block = src + o * n * g.inner + first;
      for (int64_t i = 0; i < width; ++i) shift[i] = 0;
      if constexpr (kKind == Reduction::log_sum_exp) {
        typename Max::Acc maximum[kColumnTile];
        for (int64_t i = 0; i < width; ++i) maximum[i] = Max::identity();
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t i = 0; i < width; ++i) maximum[i] = Max::combine(maximum[i], Max::map(block[r * g.inner + i], 0.0));
        }
        for (int64_t i = 0; i < width; ++i) shift[i] = exp_shift(maximum[i]);
      }
      for (int64_t i = 0; i < width; ++i) acc[i] = R::identity();
      for (int64_t r = 0; r < n; ++r) {
        const T* row = block + r * g.inner;
        for (int64_t i = 0; i < width; ++i) acc[i] = R::combine(acc[i], R::map(row[i], shift[i]));
      }
      T* out = dst + o * g.inner + first;
      for (int64_t i = 0; i < width; ++i) out[i] = R::finish(acc[i], n, shift[i]);
    }
  });
}

template <typename T, Reduction kKind>
void reduce_strided(const T* src, T* dst, const ReduceGeometry& g, int64_t outputs, int64_t cost) {
  using R = Reducer<kKind, T>;
  using Max = Reducer<Reduction::max, T>;
  parallel_for(0, outputs, g.reduced_count * cost, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const int64_t base = kept_offset(g, o);
      double shift = 0;
      if constexpr (kKind == Reduction::log_sum_exp) {
        typename Max::Acc maximum = Max::identity();
        for_each_run(src, g, base, [&](const T* run, int64_t n, int64_t stride) {
          maximum = Max::combine(maximum, reduce_run<Max, false>(run, n, stride, 0.0));
        });
        shift = exp_shift(maximum);
      }
      typename R::Acc acc = R::identity();
      for_each_run(src, g, base, [&](const T* run, int64_t n, int64_t stride) {
        acc = R::combine(acc, stride == 1 ? reduce_run<R, true>(run, n, 1, shift) : reduce_run<R, false>(run, n, stride, shift));
      });
      dst[o] = R::finish(acc, g.reduced_count, shift);
    }
  });
}

template <typename T, Reduction kKind>
void reduce(const Tensor& input, Tensor& output, const ReduceGeometry& g, FloatRowsFn float_rows) {
  const T* src = input.data<T>();
  T* dst = output.data<T>();
  const int64_t outputs = output.numel();
  if (outputs == 0) return;
  if (g.reduced_count == 0) {  // every output is the reduction of nothing
    using R = Reducer<kKind, T>;
    std::fill(dst, dst + outputs, R::finish(R::identity(), 0, 0.0));
    return;
  }
  const int64_t cost = kKind == Reduction::log_sum_exp ? kExpCostPerElement : kCostPerElement;
  switch (g.layout) {
    case Layout::rows: return reduce_rows<T, kKind>(src, dst, g, cost, float_rows);
    case Layout::columns: return reduce_columns<T, kKind>(src, dst, g, cost);
    case Layout::strided: return reduce_strided<T, kKind>(src, dst, g, outputs, cost);
  }
}

// ArgMax / ArgMin: index along the one reduced axis of the first (or, with select_last_index, the
// last) extreme value; a NaN counts as the extreme, as in numpy. Compares in the element's own type
// so that large int64 values stay exact.
template <typename T, bool kMax>
void arg_reduce(const Tensor& input, Tensor& output, const ReduceGeometry& g, bool select_last) {
  using C = compute_t<T>;
  const T* src = input.data<T>();
  int64_t* dst = output.data<int64_t>();
  parallel_for(0, output.numel(), g.reduced_count * kCostPerElement, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      int64_t best = 0;
      int64_t position = 0;
      C best_value{};
      bool best_is_nan = false;
      for_each_run(src, g, kept_offset(g, o), [&](const T* run, int64_t n, int64_t stride) {
        for (int64_t i = 0; i < n; ++i, ++position) {
          if (best_is_nan && !select_last) return;  // the first NaN is the answer
          const C x = to_compute(run[i * stride]);
          const bool better = position == 0 || x != x || (kMax ? x > best_value : x < best_value) ||
                              (select_last && x == best_value);
          if (better) {
            best_value = x;
            best = position;
            best_is_nan = x != x;
          }
        }
      });
      dst[o] = best;
    }
  });
}

template <Reduction kKind>
KernelOrReason make_reduce(const OpSpec& spec, std::span<const TensorInfo>) {
  const ReduceParams params = reduce_params(spec);
  ReduceGeometry geometry = reduce_geometry(spec.input(0).shape, params.reduced);
  const bool select_last = spec.attrs().get_int("select_last_index", 0) != 0;
  constexpr bool kArg = kKind == Reduction::arg_max || kKind == Reduction::arg_min;
  const DType dtype = spec.input(0).dtype;
  FloatRows rows{"portable", nullptr};
  if constexpr (has_float_rows(kKind)) {
    if (dtype == DType::f32 && geometry.layout == Layout::rows) rows = float_rows<kKind>();
  }
  // ArgMax walks runs in the strided form, which describes every layout.
  const std::string name = kArg                                 ? std::string("native:arg_reduce")
                           : rows.fn != nullptr                 ? std::string("native:reduce_rows:") + rows.isa
                           : geometry.layout == Layout::rows    ? std::string("native:reduce_rows")
                           : geometry.layout == Layout::columns ? std::string("native:reduce_columns")
                                                                : std::string("native:reduce_strided");
  const FloatRowsFn float_rows_fn = rows.fn;
  return visit_dtype(dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                      "native reductions do not support bool");
    } else if constexpr (kArg) {
      return make_kernel(name, [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
        arg_reduce<T, kKind == Reduction::arg_max>(inputs[0], outputs[0], geometry, select_last);
      });
    } else {
      return make_kernel(name, [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
        reduce<T, kKind>(inputs[0], outputs[0], geometry, float_rows_fn);
      });
    }
  });
}

constexpr KernelEntry kKernels[] = {
    {"ReduceMean", make_reduce<Reduction::mean>},
    {"ReduceSum", make_reduce<Reduction::sum>},
    {"ReduceMax", make_reduce<Reduction::max>},
    {"ReduceMin", make_reduce<Reduction::min>},
    {"ReduceProd", make_reduce<Reduction::prod>},
    {"ReduceL1", make_reduce<Reduction::l1>},
    {"ReduceL2", make_reduce<Reduction::l2>},
    {"ReduceLogSum", make_reduce<Reduction::log_sum>},
    {"ReduceLogSumExp", make_reduce<Reduction::log_sum_exp>},
    {"ReduceSumSquare", make_reduce<Reduction::sum_square>},
    {"ArgMax", make_reduce<Reduction::arg_max>},
    {"ArgMin", make_reduce<Reduction::arg_min>},
};

}  // namespace

std::span<const KernelEntry> reduce_kernels() { return kKernels; }

}  // namespace kiln::native
