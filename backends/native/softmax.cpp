// Native Softmax, LogSoftmax and Hardmax over an [outer, dim, inner] view of the input: dim is the
// normalized axis (before opset 13, every dim from `axis` on), inner what follows it.
//   rows     inner == 1 (the last axis, attention's case): float rows use GCC vectors of the widest
//            ISA the CPU has (chosen once, like gemm.cpp's micro-kernels); double rows plain loops.
//   columns  inner > 1: a tile of up to kColumnTile neighbouring columns is normalized together, so
//            every pass still reads contiguous memory and the loops over the tile vectorize.
// Sums of exps accumulate in float vectors flushed into a double every kFlushElements, which keeps
// rows of any length accurate to a few float ulps. 16-bit floats are widened to float once per run.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/elementwise.h"
#include "backends/native/isa_variant.h"
#include "backends/native/native_backend.h"
#include "backends/native/simd.h"
#include "backends/native/softmax_math.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

using elementwise::choose;
using namespace softmax_math;

enum class SoftmaxKind { softmax, log_softmax, hardmax };

// Columns normalized together when the axis is not the last one.
constexpr int64_t kColumnTile = 256;
// Rough scalar operations per element (an exp, a max, a sum, a scale), for parallel_for.
constexpr int64_t kCostPerElement = 24;

// `rows` contiguous rows of n floats; dst may be src.
template <typename S, SoftmaxKind kKind>
[[gnu::always_inline]] inline void softmax_rows_simd(const float* src, float* dst, int64_t rows, int64_t n) {
  using F = typename S::F;
  constexpr int64_t kWidth = sizeof(F) / sizeof(float);
  for (int64_t row = 0; row < rows; ++row, src += n, dst += n) {
    const float maximum = row_max_simd<S>(src, n);
    if constexpr (kKind == SoftmaxKind::softmax) {
      const float scale = static_cast<float>(1.0 / exp_sum_simd<S, true>(src, dst, n, maximum));
      int64_t i = 0;
      for (; i + kWidth <= n; i += kWidth) store<S>(dst + i, load<S>(dst + i) * scale);
      for (; i < n; ++i) dst[i] *= scale;
    } else {
      // (x - max) - log(sum): x - max is exact for the entries that matter, whereas max + log(sum)
      // rounded to float would lose log(sum)'s low bits when |max| is large.
      const float log_sum = static_cast<float>(std::log(exp_sum_simd<S, false>(src, dst, n, maximum)));
      int64_t i = 0;
      for (; i + kWidth <= n; i += kWidth) store<S>(dst + i, (load<S>(src + i) - maximum) - log_sum);
      for (; i < n; ++i) dst[i] = (src[i] - maximum) - log_sum;
    }
  }
}

using FloatRowsFn = void (*)(const float* src, float* dst, int64_t rows, int64_t n);

template <SoftmaxKind kKind>
__attribute__((target("avx512f"))) void softmax_rows_avx512(const float* src, float* dst, int64_t rows, int64_t n) {
  softmax_rows_simd<Simd<16>, kKind>(src, dst, rows, n);
}
template <SoftmaxKind kKind>
__attribute__((target("avx2,fma"))) void softmax_rows_avx2(const float* src, float* dst, int64_t rows, int64_t n) {
  softmax_rows_simd<Simd<8>, kKind>(src, dst, rows, n);
}
template <SoftmaxKind kKind>
void softmax_rows_baseline(const float* src, float* dst, int64_t rows, int64_t n) {
  softmax_rows_simd<Simd<4>, kKind>(src, dst, rows, n);
}

using FloatRows = IsaVariant<FloatRowsFn>;

template <SoftmaxKind kKind>
FloatRows float_rows() {
  return pick_isa_variant<FloatRowsFn>(softmax_rows_avx512<kKind>, softmax_rows_avx2<kKind>,
                                       softmax_rows_baseline<kKind>);
}

// ---- portable rows and columns -----------------------------------------------------------------

template <typename C>
C row_max(const C* src, int64_t n) {
  C result = -std::numeric_limits<C>::infinity();
  for (int64_t i = 0; i < n; ++i) result = max_of(result, src[i]);
  return result;
}

// One contiguous row of any floating type (double, and Hardmax of every type); dst may be src.
template <typename C, SoftmaxKind kKind>
void normalize_row(const C* src, C* dst, int64_t n) {
  if constexpr (kKind == SoftmaxKind::hardmax) {
    int64_t best = 0;  // the first maximum; a NaN counts as the maximum, as in numpy's argmax
    for (int64_t i = 1; i < n && src[best] == src[best]; ++i) {
      if (src[i] > src[best] || src[i] != src[i]) best = i;
    }
    std::fill(dst, dst + n, C{0});
    dst[best] = C{1};
  } else {
    const C maximum = row_max(src, n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += exp_of<C>(src[i] - maximum);
    if constexpr (kKind == SoftmaxKind::softmax) {
      const C scale = static_cast<C>(1.0 / sum);
      for (int64_t i = 0; i < n; ++i) dst[i] = exp_of<C>(src[i] - maximum) * scale;
    } else {
      const C log_sum = static_cast<C>(std::log(sum));
      for (int64_t i = 0; i < n; ++i) dst[i] = (src[i] - maximum) - log_sum;
    }
  }
}

// `width` neighbouring columns of a [dim, inner] block (rows `inner` apart); dst may be src.
template <typename C, SoftmaxKind kKind>
void normalize_columns(const C* src, C* dst, int64_t dim, int64_t inner, int64_t width) {
  C maximum[kColumnTile];
  std::fill(maximum, maximum + width, -std::numeric_limits<C>::infinity());
  if constexpr (kKind == SoftmaxKind::hardmax) {
    int64_t best[kColumnTile] = {};
    for (int64_t r = 0; r < dim; ++r) {
      const C* row = src + r * inner;
      for (int64_t i = 0; i < width; ++i) {
        if (r == 0 || (maximum[i] == maximum[i] && (row[i] > maximum[i] || row[i] != row[i]))) {
          maximum[i] = row[i];
          best[i] = r;
        }
      }
    }
    for (int64_t r = 0; r < dim; ++r) {
      for (int64_t i = 0; i < width; ++i) dst[r * inner + i] = best[i] == r ? C{1} : C{0};
    }
    return;
  }
  for (int64_t r = 0; r < dim; ++r) {
    const C* row = src + r * inner;
    for (int64_t i = 0; i < width; ++i) maximum[i] = max_of(maximum[i], row[i]);
  }
  double sum[kColumnTile] = {};
  for (int64_t r = 0; r < dim; ++r) {
    const C* row = src + r * inner;
    C* out = dst + r * inner;
    for (int64_t i = 0; i < width; ++i) {
      const C e = exp_of<C>(row[i] - maximum[i]);
      if constexpr (kKind == SoftmaxKind::softmax) out[i] = e;
      sum[i] += e;
    }
  }
  C factor[kColumnTile];  // 1 / sum for Softmax, log(sum) for LogSoftmax
  for (int64_t i = 0; i < width; ++i) {
    factor[i] = kKind == SoftmaxKind::softmax ? static_cast<C>(1.0 / sum[i]) : static_cast<C>(std::log(sum[i]));
  }
  for (int64_t r = 0; r < dim; ++r) {
    const C* row = src + r * inner;
    C* out = dst + r * inner;
    for (int64_t i = 0; i < width; ++i) {
      if constexpr (kKind == SoftmaxKind::softmax) {
        out[i] *= factor[i];
      } else {
        out[i] = (row[i] - maximum[i]) - factor[i];
      }
    }
  }
}

struct SoftmaxGeometry {
  int64_t outer = 1;
  int64_t dim = 1;
  int64_t inner = 1;
};

// `float_rows` is the vectorized row kernel for C = float (null to use the portable one).
template <typename C, SoftmaxKind kKind>
void normalize(const C* src, C* dst, const SoftmaxGeometry& g, FloatRowsFn float_rows) {
  if (g.dim == 0) return;
  if (g.inner == 1) {
    parallel_for(0, g.outer, g.dim * kCostPerElement, [&](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<C, float>) {
        if (float_rows != nullptr) return float_rows(src + begin * g.dim, dst + begin * g.dim, end - begin, g.dim);
      }
      for (int64_t o = begin; o < end; ++o) normalize_row<C, kKind>(src + o * g.dim, dst + o * g.dim, g.dim);
    });
    return;
  }
  const int64_t tiles = (g.inner + kColumnTile - 1) / kColumnTile;
  const int64_t block = g.dim * g.inner;
  parallel_for(0, g.outer * tiles, g.dim * std::min(g.inner, kColumnTile) * kCostPerElement, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t first = (task % tiles) * kColumnTile;
      const int64_t offset = (task / tiles) * block + first;
      normalize_columns<C, kKind>(src + offset, dst + offset, g.dim, g.inner, std::min(kColumnTile, g.inner - first));
    }
  });
}

template <SoftmaxKind kKind>
KernelOrReason make_softmax(const OpSpec& spec, std::span<const TensorInfo>) {
  const Shape& shape = spec.input(0).shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t axis = normalize_axis(spec.attrs().get_int("axis", spec.opset < 13 ? 1 : -1), rank);
  SoftmaxGeometry g;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t size = shape[static_cast<size_t>(d)];
    if (d < axis) {
      g.outer *= size;
    } else if (spec.opset < 13 || d == axis) {
      g.dim *= size;  // before opset 13 everything from axis on is one normalized block
    } else {
      g.inner *= size;
    }
  }
  // Hardmax has no arithmetic to vectorize; every row kind of float but Hardmax does.
  FloatRows rows{"portable", nullptr};
  if constexpr (kKind != SoftmaxKind::hardmax) rows = float_rows<kKind>();
  const DType dtype = spec.input(0).dtype;
  const std::string name = g.inner > 1               ? "native:softmax_columns"
                           : dtype == DType::f32 && rows.fn ? std::string("native:softmax_rows:") + rows.isa
                                                            : "native:softmax_rows";
  const FloatRowsFn float_rows_fn = rows.fn;
  return visit_floating(
      dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel(name, [g, float_rows_fn](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            normalize<T, kKind>(inputs[0].data<T>(), outputs[0].data<T>(), g, float_rows_fn);
          } else {
            // 16-bit floats: widen once, normalize in float, narrow once.
            const int64_t count = inputs[0].numel();
            std::vector<float> wide(static_cast<size_t>(count));
            const T* src = inputs[0].data<T>();
            T* dst = outputs[0].data<T>();
            for (int64_t i = 0; i < count; ++i) wide[i] = to_compute(src[i]);
            normalize<float, kKind>(wide.data(), wide.data(), g, float_rows_fn);
            for (int64_t i = 0; i < count; ++i) dst[i] = from_compute<T>(wide[i]);
          }
        });
      },
      [] {
        return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                        "native softmax supports floating types only");
      });
}

constexpr KernelEntry kKernels[] = {
    {"Softmax", make_softmax<SoftmaxKind::softmax>},
    {"LogSoftmax", make_softmax<SoftmaxKind::log_softmax>},
    {"Hardmax", make_softmax<SoftmaxKind::hardmax>},
};

}  // namespace

std::span<const KernelEntry> softmax_kernels() { return kKernels; }

}  // namespace kiln::native
