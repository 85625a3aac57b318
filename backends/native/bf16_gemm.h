// Products in bf16 with float32 accumulation, on AVX512_BF16's pair dot product (vdpbf16ps: each
// float32 lane adds a[2p] b[2p] + a[2p+1] b[2p+1]), for the bf16 form of attention's flash kernel.
// Operands are float32 converted once into "pairs": two neighbours along the reduced dimension K,
// rounded to bf16 (nearest even) and held in one uint32. Only for the ISA tier avx512_bf16 and up
// (bf16_gemm_available()); the planner asks for bf16 only there.
#pragma once

#include <cstdint>

namespace kiln::native {

bool bf16_gemm_available();

// Columns of packed B are padded to this many (one vector of float32 results).
inline constexpr int64_t kBf16Columns = 16;

// uint32s of op(B) (k x n) packed as pairs: ceil(k / 2) rows of round_up(n, kBf16Columns).
int64_t bf16_pairs_b_size(int64_t k, int64_t n);
// op(B)[p][j] is b[p * ldb + j], or b[j * ldb + p] when transposed; rows past k and columns past n
// are zero. Row p2 of the result holds the pairs (2 p2, 2 p2 + 1) of every column.
void pack_bf16_pairs_b(bool transpose, int64_t k, int64_t n, const float* b, int64_t ldb, uint32_t* packed);

// `rows` rows of A (k wide, stride lda) as pairs: ceil(k / 2) uint32s per row, the last one's second
// half zero when k is odd.
void pack_bf16_pairs_a(int64_t rows, int64_t k, const float* a, int64_t lda, uint32_t* packed);

// C[m, n] = alpha * A B + beta * C (C not read when beta is 0), A as pack_bf16_pairs_a wrote it,
// B as pack_bf16_pairs_b did with `b_stride` uint32s per pair row (its padded column count), `b`
// pointing at the first column wanted.
void bf16_gemm(int64_t m, int64_t n, int64_t k, const uint32_t* a, const uint32_t* b, int64_t b_stride,
               float* c, int64_t ldc, float alpha, float beta);

}  // namespace kiln::native
