// oneDNN MatMul and Gemm (float32, or bf16 operands under reduced precision) on the matmul primitive. A
// constant right-hand side (the weights of a Linear layer) is reordered once at plan time into the layout the
// implementation wants, with Gemm's alpha folded into it and beta * C into the bias; fused activations run
// inside.
#include <algorithm>

#include "backends/onednn/onednn_common.h"
#include "backends/onednn/post_ops.h"

namespace kiln::onednn {
namespace {

using dnnl::memory;

// A [M, K] x [K, N] product, possibly batched over leading dims (same on both sides).
struct MatmulProblem {
  memory::desc a_desc;  // as the caller stores A (transposed via strides for Gemm's transA)
  memory::desc b_desc;  // as B is stored
  memory::desc dst_desc;
  Tensor constant_b;                  // set when B is a plan-time constant (prepacked)
  Tensor bias;                        // [1, N] or undefined
  std::vector<size_t> copied_inputs;  // constant inputs folded into the weights or the bias
  std::vector<PostOp> post_ops;
  int residual_input = -1;  // input added by a fused sum (same shape as the result)
  bool bf16 = false;        // reduced precision: bf16 operands, float32 accumulation and result
};

class MatmulKernel final : public PrimitiveKernel {
 public:
  MatmulKernel(const MatmulProblem& problem, int alternative) {
    const bool packed = problem.constant_b.defined();
    const auto type = problem.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    const Layout operand_layout = problem.bf16 ? Layout::plain_bf16 : Layout::plain;
    const memory::desc a_desc = with_type(problem.a_desc, type);
    const memory::desc b_desc = packed ? memory::desc(problem.b_desc.dims(), type, memory::format_tag::any)
                                       : with_type(problem.b_desc, type);
    const memory::desc bias_desc = problem.bias.defined() ? plain_desc(problem.bias.shape()) : memory::desc();
    const dnnl::matmul::desc desc(a_desc, b_desc, bias_desc, problem.dst_desc);
    dnnl::matmul::primitive_desc pd(desc, make_attr(problem.post_ops), engine());
    select_alternative(pd, alternative);
    name_ = "onednn:" + implementation_name(pd) + (problem.bf16 ? ":bf16" : "") +
            post_ops_suffix(problem.post_ops) + alternative_suffix(alternative);
    primitive_ = Primitive(pd);
    input_layouts_ = {operand_layout, packed ? Layout::plain : operand_layout};
    bind_input(DNNL_ARG_SRC, 0, a_desc);
    if (packed) {
      constant_args_[DNNL_ARG_WEIGHTS] = prepack(problem.b_desc, problem.constant_b, pd.weights_desc());
    } else {
      bind_input(DNNL_ARG_WEIGHTS, 1, b_desc);
    }
    bind_output(DNNL_ARG_DST, 0, problem.dst_desc);
    if (problem.bias.defined())
      constant_args_[DNNL_ARG_BIAS] = reorder_constant(bias_desc, problem.bias, bias_desc);
    for (size_t index : problem.copied_inputs) mark_copied(index);
    residual_input_ = problem.residual_input;
  }

  int in_place_input() const override { return residual_input_; }

  void prepare_outputs(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    if (residual_input_ >= 0) copy_residual(inputs[static_cast<size_t>(residual_input_)], outputs[0]);
  }

 private:
  int residual_input_ = -1;
};

// The fused bias of a MatMul (a constant with N elements), as the [1, N] bias oneDNN adds.
Tensor fused_bias(const KernelRequest& request, int64_t n) {
  for (const PostOp& op : request.post_ops) {
    if (op.kind != PostOp::Kind::bias) continue;
    const TensorInfo& bias = request.op.inputs.at(static_cast<size_t>(op.input));
    KILN_CHECK(bias.is_constant() && bias.dtype == DType::f32 && checked_numel(bias.shape) == n,
               not_implemented, "a fused bias must be a float32 constant with ", n, " elements");
    return bias.value.reshaped({1, n});
  }
  return {};
}

memory::desc strided_desc(const Shape& dims, const Shape& strides) {
  return memory::desc(dims, memory::data_type::f32, strides);
}

KernelOrReason create_matmul_kernel(const KernelRequest& request, MatmulProblem problem) {
  return create_reduced_precision_kernel(request, [&](const KernelRequest& chosen) {
    problem.bf16 = chosen.precision == Precision::bf16;
    return std::make_unique<MatmulKernel>(problem, chosen.alternative);
  });
}

KernelOrReason make_matmul(const KernelRequest& request, std::span<const TensorInfo> outputs) {
  const OpSpec& spec = request.op;
  const TensorInfo& a = spec.input(0);
  const TensorInfo& b = spec.input(1);
  if (a.dtype != DType::f32 || b.dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "oneDNN MatMul here runs float32 only");
  if (a.shape.size() < 2 || b.shape.size() < 2)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape, "1-D operands are not supported");
  const int64_t k = a.shape.back();
  const int64_t n = b.shape.back();
  MatmulProblem problem;
  problem.post_ops = request.post_ops;
  if (b.shape.size() == 2 && b.is_constant()) {
    // Every leading dim of A folds into M: one 2-D product against prepacked weights.
    const int64_t m = checked_numel(a.shape) / std::max<int64_t>(k, 1);
    problem.a_desc = plain_desc({m, k});
    problem.b_desc = plain_desc(b.shape);
    problem.dst_desc = plain_desc({m, n});
    problem.constant_b = b.value;
    problem.bias = fused_bias(request, n);
    problem.residual_input = sum_input(request.post_ops);
    problem.copied_inputs = {1};
    for (const PostOp& op : request.post_ops) {
      if (op.kind == PostOp::Kind::bias) problem.copied_inputs.push_back(static_cast<size_t>(op.input));
    }
  } else {
    if (a.shape.size() != b.shape.size() ||
        !std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin(), b.shape.end() - 2)) {
      return KernelOrReason::rejected(
          RefusalKind::unsupported_shape,
          "batch dims differ between the operands (broadcast batches are not supported)");
    }
    const int64_t m = a.shape[a.shape.size() - 2];
    const int64_t batch = checked_numel(std::span(a.shape).first(a.shape.size() - 2));
    problem.a_desc = plain_desc({batch, m, k});
    problem.b_desc = plain_desc({batch, k, n});
    problem.dst_desc = plain_desc({batch, m, n});
    if (fused_bias(request, n).defined() || sum_input(request.post_ops) >= 0) {
      return KernelOrReason::rejected(RefusalKind::unsupported_fusion,
                                      "a bias or sum fuses only with a constant 2-D B");
    }
  }
  if (checked_numel(outputs[0].shape) == 0 || k == 0)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape, "empty product");
  return create_matmul_kernel(request, problem);
}

KernelOrReason make_gemm(const KernelRequest& request, std::span<const TensorInfo> outputs) {
  const OpSpec& spec = request.op;
  const TensorInfo& a = spec.input(0);
  const TensorInfo& b = spec.input(1);
  if (a.dtype != DType::f32 || b.dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "oneDNN Gemm here runs float32 only");
  for (const PostOp& op : request.post_ops) {
    if (op.kind == PostOp::Kind::bias || op.kind == PostOp::Kind::sum) {
      return KernelOrReason::rejected(RefusalKind::unsupported_fusion,
                                      "Gemm fuses activations only (it has its own bias)");
    }
  }
  if (!b.is_constant())
    return KernelOrReason::rejected(RefusalKind::not_constant, "B is not a plan-time constant");
  const bool trans_a = spec.attrs().get_int("transA", 0) != 0;
  const bool trans_b = spec.attrs().get_int("transB", 0) != 0;
  const float alpha = spec.attrs().get_float("alpha", 1.0f);
  const float beta = spec.attrs().get_float("beta", 1.0f);
  const int64_t m = outputs[0].shape[0];
  const int64_t n = outputs[0].shape[1];
  const int64_t k = trans_a ? a.shape[0] : a.shape[1];
  if (m == 0 || n == 0 || k == 0)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape, "empty product");

  MatmulProblem problem;
  problem.post_ops = request.post_ops;
  problem.a_desc = trans_a ? strided_desc({m, k}, {1, m}) : plain_desc({m, k});
  problem.b_desc = trans_b ? strided_desc({k, n}, {1, k}) : plain_desc({k, n});
  problem.dst_desc = plain_desc({m, n});
  problem.constant_b = b.value;
  problem.copied_inputs = {1};
  if (alpha != 1.0f) {
    problem.constant_b = b.value.clone();
    for (float& w : std::span(problem.constant_b.data<float>(), static_cast<size_t>(k * n))) w *= alpha;
  }
  if (spec.has_input(2) && beta != 0.0f) {
    const TensorInfo& c = spec.input(2);
    if (!c.is_constant() || c.dtype != DType::f32)
      return KernelOrReason::rejected(RefusalKind::not_constant, "C is not a float32 plan-time constant");
    const bool per_column = c.shape.empty() || checked_numel(c.shape) == 1 || c.shape.back() == n;
    if (!per_column || (c.shape.size() == 2 && c.shape[0] != 1)) {
      return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                      "C varies along M (only a per-column bias is fused)");
    }
    problem.bias = Tensor::empty(DType::f32, {1, n});
    problem.copied_inputs.push_back(2);
    const bool scalar = checked_numel(c.shape) == 1;
    for (int64_t j = 0; j < n; ++j)
      problem.bias.data<float>()[j] = beta * c.value.data<float>()[scalar ? 0 : j];
  }
  return create_matmul_kernel(request, problem);
}

constexpr KernelEntry kMatmulKernels[] = {{"MatMul", make_matmul}, {"Gemm", make_gemm}};

}  // namespace

std::span<const KernelEntry> matmul_kernels() {
  return kMatmulKernels;
}

}  // namespace kiln::onednn
