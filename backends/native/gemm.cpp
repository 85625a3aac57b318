#include "backends/native/gemm.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "backends/native/isa_variant.h"
#include "backends/native/simd.h"
#include "core/allocator.h"
#include "core/error.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

// Cache blocking. A packed K block of one B sliver (kKc x nr floats, 32 KB for nr = 32) stays in L1
// while the A slivers of a row block (kMcTarget x kKc, under 100 KB) stream from L2; one task's B
// panel (kKc x kTaskColumns, 256 KB) stays in L2 while the task walks its row blocks.
constexpr int64_t kKc = kGemmDepthBlock;
constexpr int64_t kMcTarget = 96;
constexpr int64_t kTaskColumns = 256;
constexpr size_t kAlignment = 64;

using Vec16 = Simd<16>::F;
using Vec8 = Simd<8>::F;
using Vec4 = Simd<4>::F;

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }
int64_t ceil_div(int64_t value, int64_t divisor) { return (value + divisor - 1) / divisor; }

// ---- micro-kernel ------------------------------------------------------------------------------

// acc[kMr][nr] = sum_p a[p][0..kMr) * b[p][0..nr) over one packed K block, nr = 2 vectors, then
// C = alpha * acc + bias[i] + beta * C over the valid `rows` x `cols` corner. The accumulators are
// a fixed-size array of GCC vectors so they live in registers: kMr * 2 of them plus two B vectors
// and one broadcast A value must fit the ISA's register file (32 zmm, 16 ymm, 16 xmm).
// kRowMajorA reads A unpacked instead, row i of the block at a + i * lda (Winograd's transformed
// inputs, written row by row in vectors): the broadcasts come from kMr rows instead of one sliver.
template <typename Vec, int64_t kMr, bool kRowMajorA = false>
[[gnu::always_inline]] inline void micro_kernel_body(int64_t kc, const float* __restrict a,
                                                     const float* __restrict b, float* __restrict c,
                                                     int64_t ldc, int64_t rows, int64_t cols, float alpha,
                                                     float beta, const float* __restrict bias,
                                                     int64_t lda = 0) {
  constexpr int64_t kLanes = sizeof(Vec) / sizeof(float);
  constexpr int64_t kNr = 2 * kLanes;
  Vec acc[kMr][2];
#pragma GCC unroll 16
  for (int64_t i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = Vec{};
  for (int64_t p = 0; p < kc; ++p) {
    Vec b0, b1;
    std::memcpy(&b0, b + p * kNr, sizeof(Vec));
    std::memcpy(&b1, b + p * kNr + kLanes, sizeof(Vec));
#pragma GCC unroll 16
    for (int64_t i = 0; i < kMr; ++i) {
      const float a_value = kRowMajorA ? a[i * lda + p] : a[p * kMr + i];
      acc[i][0] += a_value * b0;
      acc[i][1] += a_value * b1;
    }
  }
  if (rows == kMr && cols == kNr) {
#pragma GCC unroll 16
    for (int64_t i = 0; i < kMr; ++i) {
      float* row = c + i * ldc;
      Vec out0 = alpha * acc[i][0];
      Vec out1 = alpha * acc[i][1];
      if (bias != nullptr) {
        out0 += bias[i];
        out1 += bias[i];
      }
      if (beta != 0.0f) {
        Vec old0, old1;
        std::memcpy(&old0, row, sizeof(Vec));
        std::memcpy(&old1, row + kLanes, sizeof(Vec));
        out0 += beta * old0;
        out1 += beta * old1;
      }
      std::memcpy(row, &out0, sizeof(Vec));
      std::memcpy(row + kLanes, &out1, sizeof(Vec));
    }
    return;
  }
  // An edge tile: go through memory and write only the valid corner.
  alignas(kAlignment) float tile[kMr][kNr];
  for (int64_t i = 0; i < kMr; ++i) {
    std::memcpy(&tile[i][0], &acc[i][0], sizeof(Vec));
    std::memcpy(&tile[i][kLanes], &acc[i][1], sizeof(Vec));
  }
  for (int64_t i = 0; i < rows; ++i) {
    float* row = c + i * ldc;
    const float row_bias = bias != nullptr ? bias[i] : 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      const float old = beta != 0.0f ? beta * row[j] : 0.0f;
      row[j] = alpha * tile[i][j] + row_bias + old;
    }
  }
}

#define KILN_MICRO_KERNEL_PARAMETERS                                                                              \
  int64_t kc, const float *__restrict a, const float *__restrict b, float *__restrict c, int64_t ldc, int64_t rows, \
      int64_t cols, float alpha, float beta, const float *__restrict bias
#define KILN_MICRO_KERNEL_ARGUMENTS kc, a, b, c, ldc, rows, cols, alpha, beta, bias

// Register blocks (kMr x nr) per ISA: 14 x 32 on AVX-512 (28 of the 32 zmm registers accumulate),
// 6 x 16 on AVX2 and 6 x 8 on SSE2 (12 of their 16 ymm or xmm registers accumulate).
constexpr int64_t kMrAvx512 = 14;
constexpr int64_t kMrAvx2 = 6;
constexpr int64_t kMrBaseline = 6;
static_assert(kMrAvx512 >= kMrAvx2 && kMrAvx512 >= kMrBaseline,
              "kMrAvx512 bounds every register block's rows");

__attribute__((target("avx512f,avx512vl,fma"))) void micro_kernel_avx512(KILN_MICRO_KERNEL_PARAMETERS) {
  micro_kernel_body<Vec16, kMrAvx512>(KILN_MICRO_KERNEL_ARGUMENTS);
}
__attribute__((target("avx2,fma"))) void micro_kernel_avx2(KILN_MICRO_KERNEL_PARAMETERS) {
  micro_kernel_body<Vec8, kMrAvx2>(KILN_MICRO_KERNEL_ARGUMENTS);
}
void micro_kernel_baseline(KILN_MICRO_KERNEL_PARAMETERS) {
  micro_kernel_body<Vec4, kMrBaseline>(KILN_MICRO_KERNEL_ARGUMENTS);
}

using MicroKernel = void (*)(KILN_MICRO_KERNEL_PARAMETERS);

__attribute__((target("avx512f,avx512vl,fma"))) void micro_kernel_rows_avx512(KILN_MICRO_KERNEL_PARAMETERS,
                                                                              int64_t lda) {
  micro_kernel_body<Vec16, kMrAvx512, true>(KILN_MICRO_KERNEL_ARGUMENTS, lda);
}
__attribute__((target("avx2,fma"))) void micro_kernel_rows_avx2(KILN_MICRO_KERNEL_PARAMETERS, int64_t lda) {
  micro_kernel_body<Vec8, kMrAvx2, true>(KILN_MICRO_KERNEL_ARGUMENTS, lda);
}
void micro_kernel_rows_baseline(KILN_MICRO_KERNEL_PARAMETERS, int64_t lda) {
  micro_kernel_body<Vec4, kMrBaseline, true>(KILN_MICRO_KERNEL_ARGUMENTS, lda);
}

using RowsMicroKernel = void (*)(KILN_MICRO_KERNEL_PARAMETERS, int64_t lda);

#undef KILN_MICRO_KERNEL_PARAMETERS
#undef KILN_MICRO_KERNEL_ARGUMENTS

// ---- small-m path ------------------------------------------------------------------------------

// C[i, j0:j1] for small m: dot products against rows of B^T (transpose_b) or row updates with
// rows of B, both reading B contiguously.
[[gnu::always_inline]] inline void small_m_body(bool transpose_b, GemmShape shape, const float* __restrict a,
                                                int64_t lda, const float* __restrict b, int64_t ldb,
                                                float* __restrict c, int64_t ldc, const GemmEpilogue& epilogue,
                                                int64_t j0, int64_t j1) {
  const int64_t k = shape.k;
  const float alpha = epilogue.alpha;
  const float beta = epilogue.beta;
  for (int64_t i = 0; i < shape.m; ++i) {
    const float* a_row = a + i * lda;
    float* c_row = c + i * ldc;
    const float bias = epilogue.row_bias != nullptr ? epilogue.row_bias[i] : 0.0f;
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
        c_row[j] = alpha * sum + bias + (beta == 0.0f ? 0.0f : beta * c_row[j]);
      }
    } else {
      for (int64_t j = j0; j < j1; ++j) c_row[j] = bias + (beta == 0.0f ? 0.0f : beta * c_row[j]);
      for (int64_t p = 0; p < k; ++p) {
        const float scale = alpha * a_row[p];
        const float* b_row = b + p * ldb;
        for (int64_t j = j0; j < j1; ++j) c_row[j] += scale * b_row[j];
      }
    }
  }
}

#define KILN_SMALL_M_PARAMETERS                                                                                 \
  bool transpose_b, GemmShape shape, const float *__restrict a, int64_t lda, const float *__restrict b,        \
      int64_t ldb, float *__restrict c, int64_t ldc, const GemmEpilogue &epilogue, int64_t j0, int64_t j1
#define KILN_SMALL_M_ARGUMENTS transpose_b, shape, a, lda, b, ldb, c, ldc, epilogue, j0, j1

__attribute__((target("avx512f,avx512vl,fma"))) void small_m_avx512(KILN_SMALL_M_PARAMETERS) {
  small_m_body(KILN_SMALL_M_ARGUMENTS);
}
__attribute__((target("avx2,fma"))) void small_m_avx2(KILN_SMALL_M_PARAMETERS) { small_m_body(KILN_SMALL_M_ARGUMENTS); }
void small_m_baseline(KILN_SMALL_M_PARAMETERS) { small_m_body(KILN_SMALL_M_ARGUMENTS); }

using SmallMKernel = void (*)(KILN_SMALL_M_PARAMETERS);

#undef KILN_SMALL_M_PARAMETERS
#undef KILN_SMALL_M_ARGUMENTS

// ---- few rows against a prepacked B --------------------------------------------------------------

// C[0:m, slivers [s0, s1)) for m <= kGemmSmallRows rows of A (unpacked, row i at a + i * lda) times a
// prepacked B: a recurrent layer's hidden state times R, step after step, at batch 1. The
// register-blocked micro-kernel computes all kMr rows of its block whatever `rows` is (14 on
// AVX-512, for the one that exists), so this walks kSlivers slivers at once instead, one accumulator
// pair per row and sliver, summing every K block in registers before writing C once.
template <typename Vec, int64_t kRows, int64_t kSlivers>
[[gnu::always_inline]] inline void packed_rows_tile(const float* __restrict a, int64_t lda, int64_t k,
                                                    const PackedB& b, float* __restrict c, int64_t ldc,
                                                    const GemmEpilogue& epilogue, int64_t first_sliver,
                                                    int64_t slivers) {
  constexpr int64_t kLanes = sizeof(Vec) / sizeof(float);
  constexpr int64_t kNr = 2 * kLanes;
  Vec acc[kRows][kSlivers][2];
#pragma GCC unroll 8
  for (int64_t i = 0; i < kRows; ++i)
#pragma GCC unroll 8
    for (int64_t s = 0; s < kSlivers; ++s) acc[i][s][0] = acc[i][s][1] = Vec{};
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kc = std::min(kKc, k - p0);
    const float* panel[kSlivers];
    for (int64_t s = 0; s < kSlivers; ++s) {
      // A missing sliver past the end reads the first again; its sums are never written.
      const int64_t sliver = first_sliver + (s < slivers ? s : 0);
      panel[s] = b.packed(p0, kc, sliver * kNr, kNr, kNr);
    }
    for (int64_t p = 0; p < kc; ++p) {
#pragma GCC unroll 8
      for (int64_t s = 0; s < kSlivers; ++s) {
        Vec b0, b1;
        std::memcpy(&b0, panel[s] + p * kNr, sizeof(Vec));
        std::memcpy(&b1, panel[s] + p * kNr + kLanes, sizeof(Vec));
#pragma GCC unroll 8
        for (int64_t i = 0; i < kRows; ++i) {
          const float a_value = a[i * lda + p0 + p];
          acc[i][s][0] += a_value * b0;
          acc[i][s][1] += a_value * b1;
        }
      }
    }
  }
  const int64_t n = b.columns();
  for (int64_t i = 0; i < kRows; ++i) {
    float* row = c + i * ldc;
    const float bias = epilogue.row_bias != nullptr ? epilogue.row_bias[i] : 0.0f;
    for (int64_t s = 0; s < slivers; ++s) {
      alignas(kAlignment) float sums[kNr];
      std::memcpy(sums, &acc[i][s][0], sizeof(Vec));
      std::memcpy(sums + kLanes, &acc[i][s][1], sizeof(Vec));
      const int64_t j0 = (first_sliver + s) * kNr;
      const int64_t cols = std::min(kNr, n - j0);
      for (int64_t j = 0; j < cols; ++j) {
        const float old = epilogue.beta != 0.0f ? epilogue.beta * row[j0 + j] : 0.0f;
        row[j0 + j] = epilogue.alpha * sums[j] + bias + old;
      }
    }
  }
}

// Slivers [s0, s1) for m rows, in tiles of as many slivers as the accumulators allow (16 vectors).
template <typename Vec>
[[gnu::always_inline]] inline void packed_rows_body(int64_t m, const float* a, int64_t lda, int64_t k,
                                                    const PackedB& b, float* c, int64_t ldc,
                                                    const GemmEpilogue& epilogue, int64_t s0, int64_t s1) {
  constexpr int64_t kWide = 4;    // slivers per tile for 1 or 2 rows
  constexpr int64_t kNarrow = 2;  // for 3 or 4
  const int64_t step = m <= 2 ? kWide : kNarrow;
  for (int64_t s = s0; s < s1; s += step) {
    const int64_t count = std::min(step, s1 - s);
    switch (m) {
      case 1:
        packed_rows_tile<Vec, 1, kWide>(a, lda, k, b, c, ldc, epilogue, s, count);
        break;
      case 2:
        packed_rows_tile<Vec, 2, kWide>(a, lda, k, b, c, ldc, epilogue, s, count);
        break;
      case 3:
        packed_rows_tile<Vec, 3, kNarrow>(a, lda, k, b, c, ldc, epilogue, s, count);
        break;
      default:
        packed_rows_tile<Vec, 4, kNarrow>(a, lda, k, b, c, ldc, epilogue, s, count);
        break;
    }
  }
}

#define KILN_PACKED_ROWS_PARAMETERS                                                           \
  int64_t m, const float *a, int64_t lda, int64_t k, const PackedB &b, float *c, int64_t ldc, \
      const GemmEpilogue &epilogue, int64_t s0, int64_t s1
#define KILN_PACKED_ROWS_ARGUMENTS m, a, lda, k, b, c, ldc, epilogue, s0, s1

__attribute__((target("avx512f,avx512vl,fma"))) void packed_rows_avx512(KILN_PACKED_ROWS_PARAMETERS) {
  packed_rows_body<Vec16>(KILN_PACKED_ROWS_ARGUMENTS);
}
__attribute__((target("avx2,fma"))) void packed_rows_avx2(KILN_PACKED_ROWS_PARAMETERS) {
  packed_rows_body<Vec8>(KILN_PACKED_ROWS_ARGUMENTS);
}
void packed_rows_baseline(KILN_PACKED_ROWS_PARAMETERS) {
  packed_rows_body<Vec4>(KILN_PACKED_ROWS_ARGUMENTS);
}

using PackedRowsKernel = void (*)(KILN_PACKED_ROWS_PARAMETERS);

#undef KILN_PACKED_ROWS_PARAMETERS
#undef KILN_PACKED_ROWS_ARGUMENTS

// ---- dispatch ----------------------------------------------------------------------------------

struct KernelSet {
  const char* isa;
  int64_t mr;
  int64_t nr;
  MicroKernel micro;
  SmallMKernel small_m;
  RowsMicroKernel micro_rows;
  PackedRowsKernel packed_rows;
};

constexpr KernelSet kAvx512Kernels{
    "avx512",          kMrAvx512, 2 * 16, micro_kernel_avx512, small_m_avx512, micro_kernel_rows_avx512,
    packed_rows_avx512};
constexpr KernelSet kAvx2Kernels{
    "avx2", kMrAvx2, 2 * 8, micro_kernel_avx2, small_m_avx2, micro_kernel_rows_avx2, packed_rows_avx2};
constexpr KernelSet kBaselineKernels{"baseline",
                                     kMrBaseline,
                                     2 * 4,
                                     micro_kernel_baseline,
                                     small_m_baseline,
                                     micro_kernel_rows_baseline,
                                     packed_rows_baseline};

// The variant for the ISA tier in effect, which is fixed once read, so PackedA's layout (packed
// for one register block) always matches the micro-kernel that reads it.
const KernelSet& kernel_set() {
  static const KernelSet& chosen = *pick_isa_variant(&kAvx512Kernels, &kAvx2Kernels, &kBaselineKernels).fn;
  return chosen;
}

// ---- scratch memory ----------------------------------------------------------------------------

// Grow-only scratch owned by the calling thread, from the current allocator (64-byte aligned), so
// repeated calls neither allocate nor fault in fresh pages. Kernels stay stateless: each thread
// has its own.
enum class ScratchSlot { packed_a, packed_b, count };

float* thread_scratch(ScratchSlot slot, size_t count) {
  thread_local AllocatedBlock buffers[static_cast<size_t>(ScratchSlot::count)];
  AllocatedBlock& buffer = buffers[static_cast<size_t>(slot)];
  if (buffer.data() == nullptr || buffer.size() < count * sizeof(float)) {
    buffer = AllocatedBlock();
    buffer = AllocatedBlock(count * sizeof(float));
  }
  return static_cast<float*>(buffer.data());
}

// ---- packing -----------------------------------------------------------------------------------
// Packed A: for each K block p0 (kKc deep, the last one shorter), round_up(m, mr) rows stored as
// slivers of mr rows, each kc x mr with the rows of one k adjacent; rows past m are zero. The
// block at p0 starts at p0 * round_up(m, mr), its sliver at row i at that plus i * kc.

void pack_a_sliver(bool transpose, const float* a, int64_t lda, int64_t i0, int64_t rows, int64_t p0, int64_t kc,
                   int64_t mr, float* dst) {
  if (rows < mr) std::fill(dst, dst + kc * mr, 0.0f);
  if (!transpose) {
    for (int64_t i = 0; i < rows; ++i) {
      const float* src = a + (i0 + i) * lda + p0;
      for (int64_t p = 0; p < kc; ++p) dst[p * mr + i] = src[p];
    }
  } else {
    for (int64_t p = 0; p < kc; ++p) std::memcpy(dst + p * mr, a + (p0 + p) * lda + i0, rows * sizeof(float));
  }
}

void pack_a(bool transpose, GemmShape shape, const float* a, int64_t lda, int64_t mr, float* dst) {
  const int64_t padded_m = round_up(shape.m, mr);
  const int64_t slivers = padded_m / mr;
  const int64_t k_blocks = ceil_div(shape.k, kKc);
  parallel_for(0, k_blocks * slivers, kKc * mr, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t p0 = task / slivers * kKc;
      const int64_t i0 = task % slivers * mr;
      const int64_t kc = std::min(kKc, shape.k - p0);
      pack_a_sliver(transpose, a, lda, i0, std::min(mr, shape.m - i0), p0, kc, mr, dst + p0 * padded_m + i0 * kc);
    }
  });
}

// ---- driver ------------------------------------------------------------------------------------

// C = epilogue(packed A x op(B)). Tasks are (column group of kTaskColumns) x (row block), numbered
// group-major, so a thread's contiguous chunk packs each B panel it needs once per K block and
// runs all its row blocks against it.
// With row_major_lda > 0, A is not packed: row i at packed_a + i * row_major_lda (micro_rows).
void gemm_packed_a(const KernelSet& kernels, const float* packed_a, int64_t m, int64_t k,
                   const PackedBSource& b, int64_t n, float* c, int64_t ldc, const GemmEpilogue& epilogue,
                   int64_t row_major_lda = 0) {
  const int64_t mr = kernels.mr;
  const int64_t nr = kernels.nr;
  const int64_t padded_m = round_up(m, mr);
  const int64_t mc = std::max<int64_t>(mr, kMcTarget / mr * mr);
  const int64_t row_blocks = ceil_div(m, mc);
  const int64_t groups = ceil_div(n, kTaskColumns);
  const int64_t task_cost = 2 * std::min(mc, m) * std::min(kTaskColumns, n) * k;
  parallel_for(0, groups * row_blocks, task_cost, [&](int64_t begin, int64_t end) {
    float* b_panel = thread_scratch(ScratchSlot::packed_b, static_cast<size_t>(kKc * kTaskColumns));
    for (int64_t task = begin; task < end;) {
      const int64_t group = task / row_blocks;
      const int64_t block_begin = task % row_blocks;
      const int64_t block_end = std::min(row_blocks, block_begin + (end - task));
      task += block_end - block_begin;
      const int64_t j0 = group * kTaskColumns;
      const int64_t cols = std::min(kTaskColumns, n - j0);
      const int64_t slivers = ceil_div(cols, nr);
      for (int64_t p0 = 0; p0 < k; p0 += kKc) {
        const int64_t kc = std::min(kKc, k - p0);
        const float* panel = b.packed(p0, kc, j0, cols, nr);
        if (panel == nullptr) {
          b.pack(p0, kc, j0, cols, nr, b_panel);
          panel = b_panel;
        }
        // Only the first K block applies beta and the bias; later ones accumulate into C.
        const bool first = p0 == 0;
        const float beta = first ? epilogue.beta : 1.0f;
        const float* bias = first ? epilogue.row_bias : nullptr;
        const float* a_block = row_major_lda > 0 ? packed_a + p0 : packed_a + p0 * padded_m;
        for (int64_t block = block_begin; block < block_end; ++block) {
          const int64_t i0 = block * mc;
          const int64_t block_rows = std::min(mc, m - i0);
          for (int64_t s = 0; s < slivers; ++s) {
            const float* b_sliver = panel + s * kc * nr;
            const int64_t j = j0 + s * nr;
            const int64_t sliver_cols = std::min(nr, cols - s * nr);
            for (int64_t r = 0; r < block_rows; r += mr) {
              const int64_t row = i0 + r;
              const int64_t rows = std::min(mr, block_rows - r);
              const float* row_bias = bias != nullptr ? bias + row : nullptr;
              if (row_major_lda > 0 && rows == mr) {
                kernels.micro_rows(kc, a_block + row * row_major_lda, b_sliver, c + row * ldc + j, ldc, rows,
                                   sliver_cols, epilogue.alpha, beta, row_bias, row_major_lda);
              } else if (row_major_lda > 0) {
                // The last rows, fewer than mr: packed with zero rows below, so nothing past row m is read.
                alignas(kAlignment) float edge[kKc * kMrAvx512];
                pack_a_sliver(false, packed_a, row_major_lda, row, rows, p0, kc, mr, edge);
                kernels.micro(kc, edge, b_sliver, c + row * ldc + j, ldc, rows, sliver_cols, epilogue.alpha,
                              beta, row_bias);
              } else {
                kernels.micro(kc, a_block + row * kc, b_sliver, c + row * ldc + j, ldc, rows, sliver_cols,
                              epilogue.alpha, beta, row_bias);
              }
            }
          }
        }
      }
    }
  });
}

// C = row_bias + beta * C, for products with nothing to sum (k == 0 or alpha == 0).
void apply_epilogue_only(int64_t m, int64_t n, float* c, int64_t ldc, const GemmEpilogue& epilogue) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    const float bias = epilogue.row_bias != nullptr ? epilogue.row_bias[i] : 0.0f;
    for (int64_t j = 0; j < n; ++j) row[j] = bias + (epilogue.beta == 0.0f ? 0.0f : epilogue.beta * row[j]);
  }
}

// The products with nothing to multiply (an empty C, k == 0 or alpha == 0), done; false for others.
bool trivial_product(int64_t m, int64_t n, int64_t k, float* c, int64_t ldc, const GemmEpilogue& epilogue) {
  if (m == 0 || n == 0) return true;
  if (k != 0 && epilogue.alpha != 0.0f) return false;
  apply_epilogue_only(m, n, c, ldc, epilogue);
  return true;
}

// op(A) packed into the calling thread's scratch, then the driver over `b`.
void gemm_packing_a(bool transpose_a, GemmShape shape, const float* a, int64_t lda, const PackedBSource& b,
                    float* c, int64_t ldc, const GemmEpilogue& epilogue) {
  const KernelSet& kernels = kernel_set();
  float* packed_a =
      thread_scratch(ScratchSlot::packed_a, static_cast<size_t>(round_up(shape.m, kernels.mr) * shape.k));
  pack_a(transpose_a, shape, a, lda, kernels.mr, packed_a);
  gemm_packed_a(kernels, packed_a, shape.m, shape.k, b, shape.n, c, ldc, epilogue);
}

}  // namespace

void MatrixB::pack(int64_t p0, int64_t kc, int64_t j0, int64_t cols, int64_t nr, float* dst) const {
  const int64_t slivers = ceil_div(cols, nr);
  const int64_t tail = cols - (slivers - 1) * nr;  // valid columns of the last sliver
  if (!transpose_) {
    // Row by row, so B is read sequentially.
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = b_ + (p0 + p) * ldb_ + j0;
      float* out = dst + p * nr;
      for (int64_t s = 0; s + 1 < slivers; ++s) std::memcpy(out + s * kc * nr, src + s * nr, nr * sizeof(float));
      float* last = out + (slivers - 1) * kc * nr;
      std::memcpy(last, src + (slivers - 1) * nr, tail * sizeof(float));
      std::fill(last + tail, last + nr, 0.0f);
    }
    return;
  }
  // Column j of op(B) is row j of B: read each one along k.
  for (int64_t s = 0; s < slivers; ++s) {
    float* out = dst + s * kc * nr;
    const int64_t width = s + 1 < slivers ? nr : tail;
    for (int64_t j = 0; j < width; ++j) {
      const float* src = b_ + (j0 + s * nr + j) * ldb_ + p0;
      for (int64_t p = 0; p < kc; ++p) out[p * nr + j] = src[p];
    }
    for (int64_t p = 0; p < kc && width < nr; ++p) std::fill(out + p * nr + width, out + (p + 1) * nr, 0.0f);
  }
}

// PackedB: K block at p0 (kc rows) holds every column, as slivers of nr columns (kc x nr each), at
// p0 * padded_n; its sliver of column j at that plus (j / nr) * kc * nr.
int64_t PackedB::floats(int64_t k, int64_t n) {
  return std::max<int64_t>(1, k * round_up(n, kernel_set().nr));
}

PackedB::PackedB(bool transpose, int64_t k, int64_t n, const float* b, int64_t ldb, float* storage)
    : data_(storage), padded_n_(round_up(n, kernel_set().nr)), total_k_(k), k_(k), n_(n) {
  const MatrixB source(b, ldb, transpose);
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kc = std::min(kKc, k - p0);
    source.pack(p0, kc, 0, n, kernel_set().nr, storage + p0 * padded_n_);
  }
}

PackedB PackedB::slice(int64_t p0, int64_t k, int64_t j0, int64_t n) const {
  const int64_t end = row0_ + p0 + k;
  KILN_CHECK((row0_ + p0) % kKc == 0 && (end % kKc == 0 || end == total_k_) &&
                 (column0_ + j0) % kernel_set().nr == 0 && p0 + k <= k_ && j0 + n <= n_,
             runtime, "PackedB slice [", p0, ", ", p0 + k, ") x [", j0, ", ", j0 + n,
             ") is not on block bounds");
  PackedB part;
  part.data_ = data_;
  part.padded_n_ = padded_n_;
  part.total_k_ = total_k_;
  part.row0_ = row0_ + p0;
  part.column0_ = column0_ + j0;
  part.k_ = k;
  part.n_ = n;
  return part;
}

const float* PackedB::packed(int64_t p0, int64_t kc, int64_t j0, int64_t cols, int64_t nr) const {
  const int64_t row = row0_ + p0;
  const int64_t column = column0_ + j0;
  if (nr != kernel_set().nr || row % kKc != 0 || column % nr != 0) return nullptr;
  if (std::min(kKc, total_k_ - row) != kc) return nullptr;  // packed with the whole operand's blocks
  return data_ + row * padded_n_ + column / nr * kc * nr;
}

void PackedB::pack(int64_t p0, int64_t kc, int64_t j0, int64_t cols, int64_t nr, float* dst) const {
  // The driver asks for blocks on the bounds slice() enforces, which packed() always serves.
  fail(ErrorKind::runtime, "PackedB asked for rows [", row0_ + p0, ", ", row0_ + p0 + kc, ") and columns [",
       column0_ + j0, ", ", column0_ + j0 + cols, ") off its block bounds (column block ", nr, ")");
}

void sgemm(bool transpose_a, int64_t m, const float* a, int64_t lda, const PackedB& b, float* c, int64_t ldc,
           const GemmEpilogue& epilogue) {
  if (trivial_product(m, b.columns(), b.rows(), c, ldc, epilogue)) return;
  const KernelSet& kernels = kernel_set();
  const int64_t tail = m % kernels.mr;
  if (m > kGemmSmallRows && tail != 0 && tail <= kGemmSmallRows && !transpose_a) {
    // The register blocks' last few rows on the few-rows path: 16 rows on AVX-512 would compute 28.
    sgemm(false, m - tail, a, lda, b, c, ldc, epilogue);
    GemmEpilogue rest = epilogue;
    if (rest.row_bias != nullptr) rest.row_bias += m - tail;
    sgemm(false, tail, a + (m - tail) * lda, lda, b, c + (m - tail) * ldc, ldc, rest);
    return;
  }
  if (m <= kGemmSmallRows && !transpose_a) {
    const int64_t slivers = ceil_div(b.columns(), kernels.nr);
    constexpr int64_t kSliversPerTask = 4;
    parallel_for(0, ceil_div(slivers, kSliversPerTask), m * b.rows() * kernels.nr * kSliversPerTask,
                 [&](int64_t t0, int64_t t1) {
                   kernels.packed_rows(m, a, lda, b.rows(), b, c, ldc, epilogue, t0 * kSliversPerTask,
                                       std::min(slivers, t1 * kSliversPerTask));
                 });
    return;
  }
  gemm_packing_a(transpose_a, {m, b.columns(), b.rows()}, a, lda, b, c, ldc, epilogue);
}

PackedA::PackedA(bool transpose, int64_t m, int64_t k, const float* a, int64_t lda) : m_(m), k_(k) {
  const int64_t mr = kernel_set().mr;
  const size_t count = static_cast<size_t>(std::max<int64_t>(1, round_up(m, mr) * k));
  const auto block = std::make_shared<AllocatedBlock>(count * sizeof(float));
  data_ = std::shared_ptr<float[]>(block, static_cast<float*>(block->data()));
  if (m > 0 && k > 0) pack_a(transpose, {m, 0, k}, a, lda, mr, data_.get());
}

void sgemm(bool transpose_a, bool transpose_b, GemmShape shape, const float* a, int64_t lda, const float* b,
           int64_t ldb, float* c, int64_t ldc, const GemmEpilogue& epilogue) {
  if (trivial_product(shape.m, shape.n, shape.k, c, ldc, epilogue)) return;
  if (shape.m <= kGemmSmallRows && !transpose_a) {
    parallel_for(0, shape.n, shape.m * shape.k, [&](int64_t j0, int64_t j1) {
      kernel_set().small_m(transpose_b, shape, a, lda, b, ldb, c, ldc, epilogue, j0, j1);
    });
    return;
  }
  gemm_packing_a(transpose_a, shape, a, lda, MatrixB(b, ldb, transpose_b), c, ldc, epilogue);
}

void sgemm(bool transpose_a, bool transpose_b, GemmShape shape, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  sgemm(transpose_a, transpose_b, shape, a, lda, b, ldb, c, ldc, GemmEpilogue{alpha, beta, nullptr});
}

void sgemm_packed(const PackedA& a, const PackedBSource& b, int64_t n, float* c, int64_t ldc,
                  const GemmEpilogue& epilogue) {
  if (trivial_product(a.rows(), n, a.depth(), c, ldc, epilogue)) return;
  gemm_packed_a(kernel_set(), a.data(), a.rows(), a.depth(), b, n, c, ldc, epilogue);
}

void sgemm_rows(const float* a, int64_t lda, int64_t m, int64_t k, const PackedBSource& b, int64_t n,
                float* c, int64_t ldc, const GemmEpilogue& epilogue) {
  if (trivial_product(m, n, k, c, ldc, epilogue)) return;
  KILN_CHECK(lda >= k && lda > 0, invalid_argument, "sgemm_rows: lda ", lda, " is below k ", k);
  gemm_packed_a(kernel_set(), a, m, k, b, n, c, ldc, epilogue, lda);
}

GemmKernelInfo gemm_kernel_info() {
  const KernelSet& kernels = kernel_set();
  return {kernels.isa, kernels.mr, kernels.nr};
}

}  // namespace kiln::native
