// The native single-precision GEMM every native Conv, MatMul and Gemm runs on:
//   C[m, n] = alpha * sum_k op(A)[m, k] * op(B)[k, n] + beta * C[m, n]
// Row-major with leading dimensions; op() transposes when asked. Cache-blocked with packed panels
// and a register-blocked micro-kernel compiled for AVX-512, AVX2 and baseline x86-64 (picked at
// load time), parallel through kiln::parallel_for.
#pragma once

#include <cstdint>

namespace kiln::native {

struct GemmShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};

void sgemm(bool transpose_a, bool transpose_b, GemmShape shape, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The straightforward triple loop, for tests.
void sgemm_reference(bool transpose_a, bool transpose_b, GemmShape shape, float alpha, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace kiln::native
