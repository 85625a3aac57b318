// MatMul (numpy semantics: 1-D operands, batched, broadcast batch dims), Gemm and Det.
#include "ops/matmul.h"

#include "core/error.h"
#include "ops/broadcast.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

std::vector<TensorInfo> infer_matmul(const OpSpec& spec) {
  return {TensorInfo{spec.input(0).dtype, matmul_params(spec).output, {}}};
}

std::vector<TensorInfo> infer_gemm(const OpSpec& spec) {
  expect_inputs(spec, 2, 3);
  expect_floating(spec, 0);
  expect_dtype(spec, 1, spec.input(0).dtype);
  if (spec.has_input(2)) expect_dtype(spec, 2, spec.input(0).dtype);
  const GemmShape shape = gemm_shape(spec, 0, 1, 2);
  return {TensorInfo{spec.input(0).dtype, {shape.m, shape.n}, {}}};
}

// One determinant per trailing M x M matrix.
std::vector<TensorInfo> infer_det(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  expect_floating(spec, 0);
  const Shape& x = spec.input(0).shape;
  KILN_CHECK(x.size() >= 2 && x[x.size() - 1] == x[x.size() - 2], invalid_argument,
             "Det input must have shape [*, M, M], got ", shape_to_string(x));
  return {TensorInfo{spec.input(0).dtype, Shape(x.begin(), x.end() - 2), {}}};
}

constexpr OpSchema kSchemas[] = {
    {"MatMul", infer_matmul},
    {"Gemm", infer_gemm},
    {"Det", infer_det, 11},
};

}  // namespace

GemmShape gemm_shape(const OpSpec& spec, int a_input, int b_input, int c_input) {
  expect_rank(spec, a_input, 2);
  expect_rank(spec, b_input, 2);
  GemmShape shape;
  shape.trans_a = spec.attrs().get_int("transA", 0) != 0;
  shape.trans_b = spec.attrs().get_int("transB", 0) != 0;
  const Shape& a = spec.input(a_input).shape;
  const Shape& b = spec.input(b_input).shape;
  shape.m = shape.trans_a ? a[1] : a[0];
  shape.k = shape.trans_a ? a[0] : a[1];
  const int64_t kb = shape.trans_b ? b[1] : b[0];
  shape.n = shape.trans_b ? b[0] : b[1];
  KILN_CHECK(shape.k == kb, invalid_argument, spec.op_type, " inner dims differ: A ", shape_to_string(a),
             (shape.trans_a ? " (transposed)" : ""), " and B ", shape_to_string(b),
             (shape.trans_b ? " (transposed)" : ""));
  if (c_input >= 0 && spec.has_input(c_input)) {
    // Unidirectional: each of C's dims (aligned right) is 1 or the product's.
    const Shape& c = spec.input(c_input).shape;
    const Shape product{shape.m, shape.n};
    bool broadcasts = c.size() <= 2;
    for (size_t d = 0; broadcasts && d < c.size(); ++d) {
      const int64_t dim = c[c.size() - 1 - d];
      broadcasts = dim == 1 || dim == product[1 - d];
    }
    KILN_CHECK(broadcasts, invalid_argument, spec.op_type, " C of shape ", shape_to_string(c),
               " does not broadcast to [", shape.m, ", ", shape.n, "]");
  }
  return shape;
}

MatMulParams matmul_params(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  expect_floating(spec, 0);
  expect_dtype(spec, 1, spec.input(0).dtype);
  return matmul_shapes(spec, 0, 1);
}

MatMulParams matmul_shapes(const OpSpec& spec, int a_input, int b_input) {
  Shape a = spec.input(a_input).shape;
  Shape b = spec.input(b_input).shape;
  KILN_CHECK(!a.empty() && !b.empty(), invalid_argument, spec.op_type, " inputs must have rank >= 1, got ",
             shape_to_string(a), " and ", shape_to_string(b));
  const bool a_vector = a.size() == 1;
  const bool b_vector = b.size() == 1;
  if (a_vector) a.insert(a.begin(), 1);
  if (b_vector) b.push_back(1);
  MatMulParams params;
  params.m = a[a.size() - 2];
  params.k = a[a.size() - 1];
  params.n = b[b.size() - 1];
  KILN_CHECK(b[b.size() - 2] == params.k, invalid_argument, spec.op_type,
             " inner dims differ: ", shape_to_string(spec.input(a_input).shape), " x ",
             shape_to_string(spec.input(b_input).shape));
  params.a_batch.assign(a.begin(), a.end() - 2);
  params.b_batch.assign(b.begin(), b.end() - 2);
  params.batch = broadcast_shapes(params.a_batch, params.b_batch);
  params.output = params.batch;
  if (!a_vector) params.output.push_back(params.m);
  if (!b_vector) params.output.push_back(params.n);
  return params;
}

std::span<const OpSchema> matmul_schemas() { return kSchemas; }

}  // namespace kiln
