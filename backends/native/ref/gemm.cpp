#include <cmath>

#include "backends/native/ref/reference.h"

namespace kiln::native::ref {

Values gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            int64_t lda, const float* b, int64_t ldb, float beta, const float* c, int64_t ldc) {
  Values result;
  result.value.assign(static_cast<size_t>(m * n), 0.0);
  result.magnitude = result.value;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, size = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = transpose_a ? a[p * lda + i] : a[i * lda + p];
        const double y = transpose_b ? b[j * ldb + p] : b[p * ldb + j];
        sum += x * y;
        size += std::abs(x * y);
      }
      const double old = beta == 0.0f ? 0.0 : static_cast<double>(beta) * c[i * ldc + j];
      result.value[static_cast<size_t>(i * n + j)] = alpha * sum + old;
      result.magnitude[static_cast<size_t>(i * n + j)] = std::abs(alpha) * size + std::abs(old);
    }
  }
  return result;
}

}  // namespace kiln::native::ref
