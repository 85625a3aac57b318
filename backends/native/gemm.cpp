#include "backends/native/gemm.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "runtime/parallel.h"

namespace kiln::native {
namespace {

// Register block: kMr rows of A times kNr columns of B stay in 16 vector accumulators on AVX-512.
constexpr int64_t kMr = 8;
constexpr int64_t kNr = 32;
// Cache blocks: a kKc x kNr panel of B (32 KB) fits L1, a kMc x kKc panel of A L2, kKc x kNc of B L3.
constexpr int64_t kKc = 256;
constexpr int64_t kMc = 96;
constexpr int64_t kNc = 3072;
// Columns of B one parallel task covers (a multiple of kNr), so narrow matrices still split.
constexpr int64_t kTaskColumns = 8 * kNr;

using Vec16 = float __attribute__((vector_size(64)));  // lowered to 1 zmm, 2 ymm or 4 xmm

struct AlignedBuffer {
  explicit AlignedBuffer(size_t count)
      : data(static_cast<float*>(::operator new(count * sizeof(float), std::align_val_t{64}))) {}
  ~AlignedBuffer() { ::operator delete(data, std::align_val_t{64}); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  float* data;
};

// acc[kMr][kNr] = sum_k a_panel[k][0..kMr) * b_panel[k][0..kNr), then written to C:
// C = alpha * acc + beta * C over the valid rows/cols. Compiled once per ISA below.
__attribute__((always_inline)) inline void micro_kernel_body(int64_t kc, const float* __restrict a_panel,
                                                             const float* __restrict b_panel, float* __restrict c,
                                                             int64_t ldc, int64_t rows, int64_t cols, float alpha,
                                                             float beta) {
  Vec16 acc[kMr][2] = {};
  for (int64_t p = 0; p < kc; ++p) {
    Vec16 b0, b1;
    std::memcpy(&b0, b_panel + p * kNr, sizeof(Vec16));
    std::memcpy(&b1, b_panel + p * kNr + 16, sizeof(Vec16));
#pragma GCC unroll 8
    for (int64_t i = 0; i < kMr; ++i) {
      const float a = a_panel[p * kMr + i];
      acc[i][0] += a * b0;
      acc[i][1] += a * b1;
    }
  }
  alignas(64) float tile[kMr][kNr];
  for (int64_t i = 0; i < kMr; ++i) {
    std::memcpy(&tile[i][0], &acc[i][0], sizeof(Vec16));
    std::memcpy(&tile[i][16], &acc[i][1], sizeof(Vec16));
  }
  for (int64_t i = 0; i < rows; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      for (int64_t j = 0; j < cols; ++j) row[j] = alpha * tile[i][j];
    } else {
      for (int64_t j = 0; j < cols; ++j) row[j] = alpha * tile[i][j] + beta * row[j];
    }
  }
}

#define KILN_MICRO_KERNEL_PARAMETERS                                                                          \
  int64_t kc, const float *__restrict a_panel, const float *__restrict b_panel, float *__restrict c, int64_t ldc, \
      int64_t rows, int64_t cols, float alpha, float beta
#define KILN_MICRO_KERNEL_ARGUMENTS kc, a_panel, b_panel, c, ldc, rows, cols, alpha, beta

__attribute__((target("avx512f,avx512vl,fma"))) void micro_kernel_avx512(KILN_MICRO_KERNEL_PARAMETERS) {
  micro_kernel_body(KILN_MICRO_KERNEL_ARGUMENTS);
}
__attribute__((target("avx2,fma"))) void micro_kernel_avx2(KILN_MICRO_KERNEL_PARAMETERS) {
  micro_kernel_body(KILN_MICRO_KERNEL_ARGUMENTS);
}
void micro_kernel_baseline(KILN_MICRO_KERNEL_PARAMETERS) { micro_kernel_body(KILN_MICRO_KERNEL_ARGUMENTS); }

using MicroKernel = void (*)(KILN_MICRO_KERNEL_PARAMETERS);

// The widest variant this CPU runs, chosen once (the binary itself targets baseline x86-64).
MicroKernel select_micro_kernel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) return micro_kernel_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return micro_kernel_avx2;
  return micro_kernel_baseline;
}

#undef KILN_MICRO_KERNEL_PARAMETERS
#undef KILN_MICRO_KERNEL_ARGUMENTS

// Rows of C at or below which sgemm skips packing: with so few rows of A, packing B would cost as
// much as the product, which is bandwidth-bound anyway (a Linear layer at batch 1).
constexpr int64_t kSmallM = 4;

// C[i, j0:j1] for small m: dot products against rows of B^T (transpose_b) or row updates with
// rows of B, both reading B contiguously.
__attribute__((always_inline)) inline void small_m_body(bool transpose_b, GemmShape shape, float alpha,
                                                        const float* __restrict a, int64_t lda,
                                                        const float* __restrict b, int64_t ldb, float beta,
                                                        float* __restrict c, int64_t ldc, int64_t j0, int64_t j1) {
  const int64_t k = shape.k;
  for (int64_t i = 0; i < shape.m; ++i) {
    const float* a_row = a + i * lda;
    float* c_row = c + i * ldc;
    if (transpose_b) {
      for (int64_t j = j0; j < j1; ++j) {
        const float* b_row = b + j * ldb;
        Vec16 acc = {};
        int64_t p = 0;
        for (; p + 16 <= k; p += 16) {
          Vec16 x, y;
          std::memcpy(&x, a_row + p, sizeof(Vec16));
          std::memcpy(&y, b_row + p, sizeof(Vec16));
          acc += x * y;
        }
        float sum = 0.0f;
        for (int lane = 0; lane < 16; ++lane) sum += acc[lane];
        for (; p < k; ++p) sum += a_row[p] * b_row[p];
        c_row[j] = alpha * sum + (beta == 0.0f ? 0.0f : beta * c_row[j]);
      }
    } else {
      for (int64_t j = j0; j < j1; ++j) c_row[j] = beta == 0.0f ? 0.0f : beta * c_row[j];
      for (int64_t p = 0; p < k; ++p) {
        const float scale = alpha * a_row[p];
        const float* b_row = b + p * ldb;
        for (int64_t j = j0; j < j1; ++j) c_row[j] += scale * b_row[j];
      }
    }
  }
}

#define KILN_SMALL_M_PARAMETERS                                                                              \
  bool transpose_b, GemmShape shape, float alpha, const float *__restrict a, int64_t lda,                   \
      const float *__restrict b, int64_t ldb, float beta, float *__restrict c, int64_t ldc, int64_t j0, int64_t j1
#define KILN_SMALL_M_ARGUMENTS transpose_b, shape, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1

__attribute__((target("avx512f,avx512vl,fma"))) void small_m_avx512(KILN_SMALL_M_PARAMETERS) {
  small_m_body(KILN_SMALL_M_ARGUMENTS);
}
__attribute__((target("avx2,fma"))) void small_m_avx2(KILN_SMALL_M_PARAMETERS) { small_m_body(KILN_SMALL_M_ARGUMENTS); }
void small_m_baseline(KILN_SMALL_M_PARAMETERS) { small_m_body(KILN_SMALL_M_ARGUMENTS); }

using SmallMKernel = void (*)(KILN_SMALL_M_PARAMETERS);

SmallMKernel select_small_m_kernel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) return small_m_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return small_m_avx2;
  return small_m_baseline;
}

#undef KILN_SMALL_M_PARAMETERS
#undef KILN_SMALL_M_ARGUMENTS

// Packs op(A)[i0 : i0+mc, p0 : p0+kc] into kMr-row slivers, zero-padded: dst[sliver][p][kMr].
void pack_a(bool transpose, const float* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* dst) {
  for (int64_t s = 0; s < mc; s += kMr) {
    const int64_t rows = std::min(kMr, mc - s);
    for (int64_t p = 0; p < kc; ++p) {
      float* out = dst + s * kc + p * kMr;
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t row = i0 + s + i;
        const int64_t col = p0 + p;
        out[i] = transpose ? a[col * lda + row] : a[row * lda + col];
      }
      for (int64_t i = rows; i < kMr; ++i) out[i] = 0.0f;
    }
  }
}

// Packs op(B)[p0 : p0+kc, j0 : j0+nc] into kNr-column slivers, zero-padded: dst[sliver][p][kNr].
void pack_b_sliver(bool transpose, const float* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t cols,
                   float* dst) {
  for (int64_t p = 0; p < kc; ++p) {
    float* out = dst + p * kNr;
    if (!transpose) {
      const float* src = b + (p0 + p) * ldb + j0;
      std::memcpy(out, src, static_cast<size_t>(cols) * sizeof(float));
    } else {
      for (int64_t j = 0; j < cols; ++j) out[j] = b[(j0 + j) * ldb + p0 + p];
    }
    for (int64_t j = cols; j < kNr; ++j) out[j] = 0.0f;
  }
}

void scale_c(GemmShape shape, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < shape.m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + shape.n, 0.0f);
    } else {
      for (int64_t j = 0; j < shape.n; ++j) row[j] *= beta;
    }
  }
}

}  // namespace

void sgemm(bool transpose_a, bool transpose_b, GemmShape shape, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const auto [m, n, k] = shape;
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) {
    scale_c(shape, beta, c, ldc);
    return;
  }
  if (m <= kSmallM && !transpose_a) {
    static const SmallMKernel small_m_kernel = select_small_m_kernel();
    parallel_for(0, n, m * k, [&](int64_t j0, int64_t j1) {
      small_m_kernel(transpose_b, shape, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1);
    });
    return;
  }
  static const MicroKernel micro_kernel = select_micro_kernel();
  const int64_t nc_max = std::min(kNc, (n + kNr - 1) / kNr * kNr);
  AlignedBuffer b_packed(static_cast<size_t>(std::min(kKc, k) * nc_max));
  for (int64_t j0 = 0; j0 < n; j0 += kNc) {
    const int64_t nc = std::min(kNc, n - j0);
    const int64_t slivers = (nc + kNr - 1) / kNr;
    for (int64_t p0 = 0; p0 < k; p0 += kKc) {
      const int64_t kc = std::min(kKc, k - p0);
      const float beta_here = p0 == 0 ? beta : 1.0f;  // later K blocks accumulate
      parallel_for(0, slivers, kc * kNr, [&](int64_t begin, int64_t end) {
        for (int64_t s = begin; s < end; ++s) {
          pack_b_sliver(transpose_b, b, ldb, p0, kc, j0 + s * kNr, std::min(kNr, nc - s * kNr),
                        b_packed.data + s * kc * kNr);
        }
      });
      // Tasks: (row block of A) x (group of B slivers).
      const int64_t row_blocks = (m + kMc - 1) / kMc;
      const int64_t slivers_per_task = kTaskColumns / kNr;
      const int64_t column_groups = (slivers + slivers_per_task - 1) / slivers_per_task;
      parallel_for(0, row_blocks * column_groups, 2 * kMc * kc * kTaskColumns, [&](int64_t begin, int64_t end) {
        AlignedBuffer a_packed(static_cast<size_t>(kMc * kc));
        int64_t packed_block = -1;
        for (int64_t task = begin; task < end; ++task) {
          const int64_t block = task / column_groups;
          const int64_t group = task % column_groups;
          const int64_t i0 = block * kMc;
          const int64_t mc = std::min(kMc, m - i0);
          if (block != packed_block) {
            pack_a(transpose_a, a, lda, i0, mc, p0, kc, a_packed.data);
            packed_block = block;
          }
          const int64_t s_end = std::min(slivers, (group + 1) * slivers_per_task);
          for (int64_t s = group * slivers_per_task; s < s_end; ++s) {
            const int64_t j = j0 + s * kNr;
            const int64_t cols = std::min(kNr, nc - s * kNr);
            for (int64_t r = 0; r < mc; r += kMr) {
              micro_kernel(kc, a_packed.data + r * kc, b_packed.data + s * kc * kNr, c + (i0 + r) * ldc + j, ldc,
                           std::min(kMr, mc - r), cols, alpha, beta_here);
            }
          }
        }
      });
    }
  }
}

void sgemm_reference(bool transpose_a, bool transpose_b, GemmShape shape, float alpha, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < shape.m; ++i) {
    for (int64_t j = 0; j < shape.n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < shape.k; ++p) {
        const float x = transpose_a ? a[p * lda + i] : a[i * lda + p];
        const float y = transpose_b ? b[j * ldb + p] : b[p * ldb + j];
        sum += static_cast<double>(x) * y;
      }
      float& out = c[i * ldc + j];
      out = static_cast<float>(alpha * sum + (beta == 0.0f ? 0.0 : beta * static_cast<double>(out)));
    }
  }
}

}  // namespace kiln::native
