#include "backends/native/bf16_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "runtime/cpu_info.h"

namespace kiln::native {
namespace {

constexpr int64_t kRows = 8;  // rows per register block: 8 x 32 float32 accumulators in 16 zmm

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

uint32_t pair(float low, float high) {
  return static_cast<uint32_t>(float_to_bfloat16(low).bits) |
         static_cast<uint32_t>(float_to_bfloat16(high).bits) << 16;
}

// One block of up to kRows rows and up to 32 columns (`vectors` of 16; the last `tail` wide).
template <int kBlockRows>
__attribute__((target("avx512f,avx512bf16"))) void block(int64_t k2, const uint32_t* a, int64_t a_stride,
                                                         const uint32_t* b, int64_t b_stride, float* c,
                                                         int64_t ldc, int vectors, __mmask16 tail,
                                                         float alpha, float beta) {
  __m512 acc[kBlockRows][2];
  for (int r = 0; r < kBlockRows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k2; ++p) {
    const __m512i b0 = _mm512_loadu_si512(b + p * b_stride);
    const __m512i b1 =
        vectors > 1 ? _mm512_loadu_si512(b + p * b_stride + kBf16Columns) : _mm512_setzero_si512();
    for (int r = 0; r < kBlockRows; ++r) {
      const __m512i pairs = _mm512_set1_epi32(static_cast<int>(a[r * a_stride + p]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)pairs, (__m512bh)b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)pairs, (__m512bh)b1);
    }
  }
  const __m512 alphas = _mm512_set1_ps(alpha);
  const __m512 betas = _mm512_set1_ps(beta);
  for (int r = 0; r < kBlockRows; ++r) {
    for (int v = 0; v < vectors; ++v) {
      float* row = c + r * ldc + v * kBf16Columns;
      const __mmask16 mask = v + 1 == vectors ? tail : static_cast<__mmask16>(0xffff);
      __m512 out = _mm512_mul_ps(alphas, acc[r][v]);
      if (beta != 0.0f) out = _mm512_fmadd_ps(betas, _mm512_maskz_loadu_ps(mask, row), out);
      _mm512_mask_storeu_ps(row, mask, out);
    }
  }
}

using BlockFn = void (*)(int64_t, const uint32_t*, int64_t, const uint32_t*, int64_t, float*, int64_t, int,
                         __mmask16, float, float);
constexpr BlockFn kBlocks[kRows + 1] = {nullptr,  block<1>, block<2>, block<3>, block<4>,
                                        block<5>, block<6>, block<7>, block<8>};

}  // namespace

bool bf16_gemm_available() {
  return isa_in_effect() >= Isa::avx512_bf16;
}

int64_t bf16_pairs_b_size(int64_t k, int64_t n) {
  return std::max<int64_t>(1, (k + 1) / 2 * round_up(n, kBf16Columns));
}

// Conversions run only where bf16_gemm_available() (the kernels using them check it first), so
// they may use AVX512_BF16 (vcvtne2ps2bf16, rounding to nearest even as float_to_bfloat16 does).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void pack_bf16_pairs_a(int64_t rows, int64_t k,
                                                                              const float* a, int64_t lda,
                                                                              uint32_t* packed) {
  const int64_t k2 = (k + 1) / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = a + r * lda;
    uint32_t* out = packed + r * k2;
    int64_t p = 0;
    // 32 neighbours in a row are 16 pairs: converted together they are already in pair order.
    for (; p + 2 * kBf16Columns <= k; p += 2 * kBf16Columns) {
      const __m512bh pairs =
          _mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + p + kBf16Columns), _mm512_loadu_ps(row + p));
      _mm512_storeu_si512(out + p / 2, (__m512i)pairs);
    }
    for (; p + 1 < k; p += 2) out[p / 2] = pair(row[p], row[p + 1]);
    if (p < k) out[p / 2] = pair(row[p], 0.0f);
  }
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void pack_bf16_pairs_b(bool transpose, int64_t k,
                                                                              int64_t n, const float* b,
                                                                              int64_t ldb, uint32_t* packed) {
  const int64_t stride = round_up(n, kBf16Columns);
  const int64_t k2 = (k + 1) / 2;
  if (transpose) {
    // Column j of op(B) is row j of B: its pairs are neighbours there, converted as A's rows are.
    std::vector<uint32_t> column(static_cast<size_t>(k2));
    for (int64_t j = 0; j < n; ++j) {
      pack_bf16_pairs_a(1, k, b + j * ldb, ldb, column.data());
      for (int64_t p2 = 0; p2 < k2; ++p2) packed[p2 * stride + j] = column[static_cast<size_t>(p2)];
    }
    for (int64_t p2 = 0; p2 < k2; ++p2) std::fill(packed + p2 * stride + n, packed + (p2 + 1) * stride, 0u);
    return;
  }
  // Rows 2 p2 and 2 p2 + 1 interleaved: (even j, odd j) for each column j.
  alignas(64) static constexpr uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                           21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i order = _mm512_load_si512(kInterleave);
  for (int64_t p2 = 0; p2 < k2; ++p2) {
    const float* even = b + 2 * p2 * ldb;
    const float* odd = 2 * p2 + 1 < k ? even + ldb : nullptr;
    uint32_t* row = packed + p2 * stride;
    for (int64_t j = 0; j < stride; j += kBf16Columns) {
      const int64_t valid = std::clamp<int64_t>(n - j, 0, kBf16Columns);
      const __mmask16 mask = static_cast<__mmask16>(valid == kBf16Columns ? 0xffff : (1u << valid) - 1);
      const __m512 low = _mm512_maskz_loadu_ps(mask, even + j);
      const __m512 high = odd != nullptr ? _mm512_maskz_loadu_ps(mask, odd + j) : _mm512_setzero_ps();
      const __m512i halves = (__m512i)_mm512_cvtne2ps_pbh(high, low);  // [low 0..15 | high 0..15]
      _mm512_storeu_si512(row + j, _mm512_permutexvar_epi16(order, halves));
    }
  }
}

void bf16_gemm(int64_t m, int64_t n, int64_t k, const uint32_t* a, const uint32_t* b, int64_t b_stride,
               float* c, int64_t ldc, float alpha, float beta) {
  KILN_CHECK(bf16_gemm_available(), runtime, "bf16 products need AVX512_BF16 in the ISA tier in effect");
  const int64_t k2 = (k + 1) / 2;
  for (int64_t j0 = 0; j0 < n; j0 += 2 * kBf16Columns) {
    const int64_t cols = std::min<int64_t>(2 * kBf16Columns, n - j0);
    const int vectors = static_cast<int>((cols + kBf16Columns - 1) / kBf16Columns);
    const int64_t last = cols - (vectors - 1) * kBf16Columns;
    const auto tail = static_cast<__mmask16>(last == kBf16Columns ? 0xffff : (1u << last) - 1);
    for (int64_t i0 = 0; i0 < m; i0 += kRows) {
      const int64_t rows = std::min(kRows, m - i0);
      kBlocks[rows](k2, a + i0 * k2, k2, b + j0, b_stride, c + i0 * ldc + j0, ldc, vectors, tail, alpha,
                    beta);
    }
  }
}

}  // namespace kiln::native
