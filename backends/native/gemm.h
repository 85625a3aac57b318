// The native single-precision GEMM every native Conv, MatMul and Gemm runs on:
//   C[m, n] = alpha * sum_k op(A)[m, k] * op(B)[k, n] + row_bias[m] + beta * C[m, n]
// Row-major with leading dimensions; op() transposes when asked. A is packed into row slivers and
// B into column slivers (cache-blocked along K), and a register-blocked micro-kernel written in
// plain C++ vector code runs over them. The micro-kernel is compiled for AVX-512, AVX2 and baseline
// x86-64 and picked once, on first use, for the ISA tier in effect (backends/native/isa_variant.h),
// so the binary stays portable. Work is split over blocks of rows and columns of C through
// kiln::parallel_for.
#pragma once

#include <cstdint>
#include <memory>

namespace kiln::native {

struct GemmShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};

// sgemm multiplies at most this many rows of an untransposed A without packing (a Linear layer at
// batch 1): packing B would cost as much as the product, which is bandwidth-bound anyway.
inline constexpr int64_t kGemmSmallRows = 4;

// Optional additions to the product, applied as C is written.
struct GemmEpilogue {
  float alpha = 1.0f;
  float beta = 0.0f;                  // C is not read when 0 (it may hold garbage)
  const float* row_bias = nullptr;    // m values, one per row of C (a Conv's bias)
};

// op(A) packed once into the layout the micro-kernel reads, for a left operand used by many calls
// (Conv weights). Immutable after construction, so concurrent sgemm_packed calls may share it.
class PackedA {
 public:
  PackedA() = default;
  PackedA(bool transpose, int64_t m, int64_t k, const float* a, int64_t lda);

  int64_t rows() const { return m_; }
  int64_t depth() const { return k_; }
  const float* data() const { return data_.get(); }

 private:
  int64_t m_ = 0;
  int64_t k_ = 0;
  std::shared_ptr<float[]> data_;
};

// Supplies op(B) to the sgemm already in the micro-kernel's layout, so a producer such as Conv's
// im2col can write the packed panels directly instead of materializing B first. pack() may be
// called concurrently from several threads, for disjoint or overlapping blocks.
class PackedBSource {
 public:
  virtual ~PackedBSource() = default;
  // Writes op(B)[p0 : p0+kc, j0 : j0+cols] as ceil(cols / nr) slivers of nr columns, sliver s at
  // dst + s * kc * nr holding kc rows of nr adjacent values; columns past `cols` must be zero.
  virtual void pack(int64_t p0, int64_t kc, int64_t j0, int64_t cols, int64_t nr, float* dst) const = 0;
  // The same block already in that form, or null (then pack() is called): a prepacked operand.
  virtual const float* packed(int64_t p0, int64_t kc, int64_t j0, int64_t cols, int64_t nr) const {
    return nullptr;
  }
};

// The depth (rows of op(B)) of the blocks the GEMM walks K in. A PackedB slice starts at a multiple.
inline constexpr int64_t kGemmDepthBlock = 256;

// op(B) (k x n) packed once, every K block and column, in the micro-kernel's layout, into storage the
// caller owns (floats(k, n) of them): for a right operand many products share, such as attention's
// K^T and V against each block of queries. Slices of it are operands of their own.
class PackedB final : public PackedBSource {
 public:
  static int64_t floats(int64_t k, int64_t n);
  PackedB(bool transpose, int64_t k, int64_t n, const float* b, int64_t ldb, float* storage);
  // Rows [p0, p0 + k) and columns [j0, j0 + n): p0 a multiple of kGemmDepthBlock, and p0 + k a
  // multiple of it or the end; j0 a multiple of the micro-kernel's column block (gemm_kernel_info().nr).
  PackedB slice(int64_t p0, int64_t k, int64_t j0, int64_t n) const;
  int64_t rows() const { return k_; }
  int64_t columns() const { return n_; }
  void pack(int64_t p0, int64_t kc, int64_t j0, int64_t cols, int64_t nr, float* dst) const override;
  const float* packed(int64_t p0, int64_t kc, int64_t j0, int64_t cols, int64_t nr) const override;

 private:
  PackedB() = default;
  const float* data_ = nullptr;  // the whole operand's panels
  int64_t padded_n_ = 0;         // the whole operand's columns, rounded up to the column block
  int64_t total_k_ = 0;          // the whole operand's rows
  int64_t row0_ = 0;             // this slice's first row and column within the whole
  int64_t column0_ = 0;
  int64_t k_ = 0;
  int64_t n_ = 0;
};

// A row-major matrix as a PackedBSource: op(B) is k x n, B itself n x k when transposed.
class MatrixB final : public PackedBSource {
 public:
  MatrixB(const float* b, int64_t ldb, bool transpose) : b_(b), ldb_(ldb), transpose_(transpose) {}
  void pack(int64_t p0, int64_t kc, int64_t j0, int64_t cols, int64_t nr, float* dst) const override;

 private:
  const float* b_;
  int64_t ldb_;
  bool transpose_;
};

void sgemm(bool transpose_a, bool transpose_b, GemmShape shape, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same with an epilogue (beta and a per-row bias).
void sgemm(bool transpose_a, bool transpose_b, GemmShape shape, const float* a, int64_t lda, const float* b,
           int64_t ldb, float* c, int64_t ldc, const GemmEpilogue& epilogue);

// C[m, b.columns()] = epilogue(op(A) x B) with B prepacked (A packed on the fly; up to kGemmSmallRows
// rows of an untransposed A, alone or left after full register blocks, are read in place against
// the whole of B: a recurrent step).
void sgemm(bool transpose_a, int64_t m, const float* a, int64_t lda, const PackedB& b, float* c, int64_t ldc,
           const GemmEpilogue& epilogue);

// C[a.rows(), n] = epilogue(A x B) with a prepacked A and B of a.depth() x n from `b`.
void sgemm_packed(const PackedA& a, const PackedBSource& b, int64_t n, float* c, int64_t ldc,
                  const GemmEpilogue& epilogue);

// C[m, n] = epilogue(A x B) with A row-major (lda >= k) and read in place, unpacked: the
// micro-kernel broadcasts each row's values from the row itself. For an A written once and
// multiplied once, which packing would only copy (Winograd's transformed inputs).
void sgemm_rows(const float* a, int64_t lda, int64_t m, int64_t k, const PackedBSource& b, int64_t n,
                float* c, int64_t ldc, const GemmEpilogue& epilogue);

// Which micro-kernel runs under the ISA tier in effect ("avx512", "avx2" or "baseline") and its
// register block (mr x nr).
struct GemmKernelInfo {
  const char* isa;
  int64_t mr;
  int64_t nr;
};
GemmKernelInfo gemm_kernel_info();

}  // namespace kiln::native
