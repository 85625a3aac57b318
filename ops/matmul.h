// MatMul's numpy semantics, shared by inference and kernels.
#pragma once

#include "ops/op_spec.h"

namespace kiln {

struct MatMulParams {
  Shape a_batch;  // A's batch dims (after promoting a 1-D A to [1, K])
  Shape b_batch;
  Shape batch;    // broadcast batch dims
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  Shape output;  // with the promoted dims of 1-D operands removed
};

MatMulParams matmul_params(const OpSpec& spec);
// The shapes alone, from the A and B inputs at these positions (the quantized products keep theirs
// elsewhere); checks shapes, not dtypes.
MatMulParams matmul_shapes(const OpSpec& spec, int a_input, int b_input);

// Gemm's product: A [M, K] (stored [K, M] with transA) times B [K, N] (stored [N, K] with transB),
// C broadcast to [M, N].
struct GemmShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool trans_a = false;
  bool trans_b = false;
};
// From the 2-D A and B inputs at these positions and C's, if present (-1: none); checks shapes, not
// dtypes.
GemmShape gemm_shape(const OpSpec& spec, int a_input, int b_input, int c_input);

}  // namespace kiln
