// Plain loops for the ops whose native kernels are tuned engines (packed-panel GEMM with ISA-cloned
// micro-kernels, im2col written into packed panels, ISA-cloned depthwise loops, windowed pooling,
// attention's math and flash, int16 dot products for int8): the oracle those kernels are tested
// against. Written for obviousness, not speed; float32 inputs with sums in double, int8 inputs with
// sums in int64 wrapped to int32. Not linked into kiln, only into its tests (kiln_native_reference).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/pool.h"

namespace kiln::native::ref {

// A result in double, and per element the sum of |terms| that formed it: a float32 kernel's
// rounding error grows with that sum, so tests scale their tolerance by it.
struct Values {
  std::vector<double> value;
  std::vector<double> magnitude;
};

// C[m, n] = alpha * op(A) op(B) + beta * C, row-major with leading dimensions; `c` is read only when
// beta is not 0.
Values gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            int64_t lda, const float* b, int64_t ldb, float beta, const float* c, int64_t ldc);

// 2-D convolution of NCHW `x` with OIHW `w` (I = channels per group) and optional `bias`, as `p`
// describes it (groups, strides, pads, dilations, output size).
Values conv(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p);

// 2-D max or average pooling of NCHW `x` as `p` describes it; outside the input, max ignores the
// window and average counts the padding only with count_include_pad.
Values pool(const Tensor& x, const PoolParams& p, bool is_max);

// Scaled dot-product attention as `p` describes it (ops/attention.h); `mask` undefined without one.
// A row whose every key is masked gives NaN.
Values attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                 const AttentionParams& p);

// ONNX's ConvInteger in 2-D: the int32 accumulators of NCHW int8/uint8 `x` and OIHW `w`, summing
// (x - x_zero_point) * (w - w_zero_points[m]) over each window (w_zero_points: one value, or one per
// output channel); a tap outside the input adds nothing, as if it held x's zero point. Summed in
// int64 and wrapped to int32, as int32 accumulation wraps.
std::vector<int32_t> conv_integer(const Tensor& x, const Tensor& w, int32_t x_zero_point,
                                  std::span<const int32_t> w_zero_points, const ConvParams& p);

// ONNX's MatMulInteger for 2-D int8/uint8 A [M, K] and B [K, N]: the int32 accumulators of
// (a - a_zero_points[m]) * (b - b_zero_points[n]), each zero point list one value or one per row of A
// (column of B). Summed in int64 and wrapped to int32.
std::vector<int32_t> matmul_integer(const Tensor& a, const Tensor& b, std::span<const int32_t> a_zero_points,
                                    std::span<const int32_t> b_zero_points);

}  // namespace kiln::native::ref
