// Native MatMul and Gemm on the native sgemm (float32), with a plain loop for float64/float16; Det by
// LU decomposition.
#include "ops/matmul.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/base/function_kernel.h"
#include "backends/native/broadcast_loop.h"
#include "backends/native/element_math.h"
#include "backends/native/gemm.h"
#include "backends/native/native_backend.h"
#include "core/error.h"
#include "ops/broadcast.h"
#include "runtime/parallel.h"
#include "runtime/threads.h"

namespace kiln::native {
namespace {

// Element offset of every broadcast batch's matrix in an operand with `batch` dims.
std::vector<int64_t> batch_offsets(const Shape& operand_batch, const Shape& batch, int64_t matrix_size) {
  const int64_t count = checked_numel(batch);
  std::vector<int64_t> offsets(static_cast<size_t>(count), 0);
  if (batch.empty()) return offsets;
  const std::vector<int64_t> strides = broadcast_strides(operand_batch, batch);
  for (int64_t index = 0; index < count; ++index) {
    int64_t rest = index;
    int64_t offset = 0;
    for (size_t d = batch.size(); d-- > 0;) {
      offset += (rest % batch[d]) * strides[d];
      rest /= batch[d];
    }
    offsets[static_cast<size_t>(index)] = offset * matrix_size;
  }
  return offsets;
}

// C = A x B for one matrix pair in any floating type, accumulating in double.
template <typename T>
void matmul_loop(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += static_cast<double>(to_compute(a[i * k + p])) * to_compute(b[p * n + j]);
      c[i * n + j] = from_compute<T>(sum);
    }
  }
}

KernelOrReason make_matmul(const OpSpec& spec, std::span<const TensorInfo>) {
  const MatMulParams params = matmul_params(spec);
  const std::vector<int64_t> a_offsets = batch_offsets(params.a_batch, params.batch, params.m * params.k);
  const std::vector<int64_t> b_offsets = batch_offsets(params.b_batch, params.batch, params.k * params.n);
  const int64_t m = params.m, n = params.n, k = params.k;
  if (spec.input(0).dtype == DType::f32) {
    // A batched A times one shared B is a single product with batch * m rows.
    const bool shared_b = checked_numel(params.b_batch) == 1 && params.a_batch == params.batch;
    const std::string isa = gemm_kernel_info().isa;
    if (shared_b) {
      const int64_t rows = checked_numel(params.batch) * m;
      return make_kernel("native:matmul_sgemm:" + isa, [=](std::span<const Tensor> inputs,
                                                           std::span<Tensor> outputs) {
        sgemm(false, false, {rows, n, k}, 1.0f, inputs[0].data<float>(), k, inputs[1].data<float>(), n, 0.0f,
              outputs[0].data<float>(), n);
      });
    }
    const std::string name = "native:matmul_sgemm_batched:" + isa;
    return make_kernel(name, [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
      const float* a = inputs[0].data<float>();
      const float* b = inputs[1].data<float>();
      float* c = outputs[0].data<float>();
      const int64_t batches = static_cast<int64_t>(a_offsets.size());
      auto multiply = [&](int64_t begin, int64_t end) {
        for (int64_t batch = begin; batch < end; ++batch) {
          sgemm(false, false, {m, n, k}, 1.0f, a + a_offsets[batch], k, b + b_offsets[batch], n, 0.0f,
                c + batch * m * n, n);
        }
      };
      // Enough products to go round: one per worker, each running inline (attention's many small
      // products). Otherwise one at a time, each parallel inside.
      if (batches >= intra_op_threads()) {
        parallel_for(0, batches, 2 * m * n * k, multiply);
      } else {
        multiply(0, batches);
      }
    });
  }
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:matmul_loop", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          for (size_t batch = 0; batch < a_offsets.size(); ++batch) {
            matmul_loop(inputs[0].data<T>() + a_offsets[batch], inputs[1].data<T>() + b_offsets[batch],
                        outputs[0].data<T>() + static_cast<int64_t>(batch) * m * n, m, n, k);
          }
        });
      },
      [&] {
        return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                        "native MatMul supports floating types only");
      });
}

KernelOrReason make_gemm(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  if (spec.input(0).dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "native Gemm supports float32 only");
  const bool trans_a = spec.attrs().get_int("transA", 0) != 0;
  const bool trans_b = spec.attrs().get_int("transB", 0) != 0;
  const float alpha = spec.attrs().get_float("alpha", 1.0f);
  const float beta = spec.attrs().get_float("beta", 1.0f);
  const Shape& a = spec.input(0).shape;
  const Shape& b = spec.input(1).shape;
  const int64_t m = outputs[0].shape[0], n = outputs[0].shape[1];
  const int64_t k = trans_a ? a[0] : a[1];
  const bool has_c = spec.has_input(2) && beta != 0.0f;
  const Shape c_shape = spec.has_input(2) ? spec.input(2).shape : Shape{};
  const std::string name = str_cat("native:gemm_sgemm:", gemm_kernel_info().isa);
  return make_kernel(name, [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    float* out = dst[0].data<float>();
    if (has_c) {
      // Broadcast C into the output, then accumulate beta * C + alpha * A x B in place.
      const BroadcastLoop loop({m, n}, {c_shape});
      const float* c = inputs[2].data<float>();
      const int64_t row = loop.row_size();
      const int64_t step = loop.row_stride(0);
      loop.for_each_row(1, [&](int64_t r, const int64_t* offsets) {
        for (int64_t j = 0; j < row; ++j) out[r * row + j] = c[offsets[0] + j * step];
      });
    }
    sgemm(trans_a, trans_b, {m, n, k}, alpha, inputs[0].data<float>(), a[1], inputs[1].data<float>(), b[1],
          has_c ? beta : 0.0f, out, n);
  });
}

// The determinant of the m x m row-major matrix `a`, which it overwrites: LU decomposition with
// partial pivoting (the largest pivot keeps the elimination stable), the product of U's diagonal,
// negated for every row swap. A column without a nonzero pivot makes the matrix singular.
double lu_determinant(double* a, int64_t m) {
  double det = 1;
  for (int64_t k = 0; k < m; ++k) {
    int64_t pivot = k;
    for (int64_t i = k + 1; i < m; ++i) {
      if (std::abs(a[i * m + k]) > std::abs(a[pivot * m + k])) pivot = i;
    }
    if (a[pivot * m + k] == 0) return 0;
    if (pivot != k) {
      // Columns left of k hold L, which the determinant never reads again.
      std::swap_ranges(a + k * m + k, a + (k + 1) * m, a + pivot * m + k);
      det = -det;
    }
    const double diagonal = a[k * m + k];
    det *= diagonal;
    for (int64_t i = k + 1; i < m; ++i) {
      const double factor = a[i * m + k] / diagonal;
      for (int64_t j = k + 1; j < m; ++j) a[i * m + j] -= factor * a[k * m + j];
    }
  }
  return det;
}

// Det in double whatever the input's precision, one matrix per parallel item.
KernelOrReason make_det(const OpSpec& spec, std::span<const TensorInfo>) {
  const Shape& x = spec.input(0).shape;
  const int64_t m = x.back();
  const int64_t matrices = checked_numel(Shape(x.begin(), x.end() - 2));
  return visit_floating(
      spec.input(0).dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:det_lu", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
          const int64_t size = m * m;
          const T* src = inputs[0].data<T>();
          T* dst = outputs[0].data<T>();
          parallel_for(0, matrices, size * m, [&](int64_t begin, int64_t end) {
            std::vector<double> lu(static_cast<size_t>(size));
            for (int64_t matrix = begin; matrix < end; ++matrix) {
              const T* in = src + matrix * size;
              for (int64_t i = 0; i < size; ++i) lu[static_cast<size_t>(i)] = to_compute(in[i]);
              dst[matrix] = from_compute<T>(lu_determinant(lu.data(), m));
            }
          });
        });
      },
      [&] {
        return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "native Det supports floating types only");
      });
}

constexpr KernelEntry kKernels[] = {
    {"MatMul", make_matmul},
    {"Gemm", make_gemm},
    {"Det", make_det},
};

}  // namespace

std::span<const KernelEntry> matmul_kernels() { return kKernels; }

}  // namespace kiln::native
