// Scaled dot-product attention on oneDNN primitives (the kernel users name "onednn"): a batched
// matmul writes the scores with the scale as output scales and the mask as a binary-add post-op,
// a softmax primitive normalizes them in place (oneDNN 2.6 has no softmax post-op), a second
// matmul multiplies by V. The scores [..., L, S] are materialized in a buffer of each run context. Under
// bf16 precision Q, K and V arrive as bf16 (Reorder steps before the kernel), the softmax writes
// bf16 probabilities, and both products accumulate in float32. The primitives' scratchpads are the run
// context's too, one buffer for all (they run one after the other).
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "backends/onednn/onednn_common.h"

namespace kiln::onednn {
namespace {

using dnnl::memory;

// The kernel refuses to materialize more scores than this (bytes), as native math does.
constexpr int64_t kScoresLimit = int64_t{1} << 30;

memory::dims dims_of(const Shape& leading, int64_t rows, int64_t columns) {
  memory::dims dims(leading.begin(), leading.end());
  dims.push_back(rows);
  dims.push_back(columns);
  return dims;
}

// Row-major strides of `dims`.
memory::dims strides_of(const memory::dims& dims) {
  memory::dims strides(dims.size(), 1);
  for (size_t d = dims.size() - 1; d-- > 0;) strides[d] = strides[d + 1] * dims[d + 1];
  return strides;
}

class BoundAttention;

class AttentionKernel final : public Kernel {
 public:
  AttentionKernel(const AttentionParams& p, const TensorInfo* mask, bool bf16) : bf16_(bf16) {
    const auto operand = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    const memory::dims q_dims = dims_of(p.leading, p.l, p.e);
    const memory::dims kt_dims = dims_of(p.leading, p.e, p.s);
    memory::dims kt_strides = strides_of(kt_dims);
    if (!p.k_transposed) {  // K [..., S, E] read as K^T through its strides
      const size_t rank = kt_dims.size();
      kt_strides[rank - 2] = 1;
      kt_strides[rank - 1] = p.e;
    }
    q_desc_ = memory::desc(q_dims, operand, strides_of(q_dims));
    kt_desc_ = memory::desc(kt_dims, operand, kt_strides);
    scores_desc_ = memory::desc(dims_of(p.leading, p.l, p.s), memory::data_type::f32,
                                strides_of(dims_of(p.leading, p.l, p.s)));
    probabilities_desc_ = with_type(scores_desc_, operand);
    const memory::dims v_dims = dims_of(p.leading, p.s, p.ev);
    v_desc_ = memory::desc(v_dims, operand, strides_of(v_dims));
    const memory::dims out_dims = dims_of(p.leading, p.l, p.ev);
    out_desc_ = memory::desc(out_dims, memory::data_type::f32, strides_of(out_dims));

    dnnl::primitive_attr scores_attr = primitive_attributes();
    scores_attr.set_output_scales(0, {p.scale});
    dnnl::matmul::primitive_desc scores_pd(dnnl::matmul::desc(q_desc_, kt_desc_, scores_desc_), scores_attr,
                                           engine());
    if (mask != nullptr) {
      // The mask's shape right-aligned against the scores: oneDNN broadcasts its dims of 1.
      memory::dims mask_dims(scores_desc_.dims().size(), 1);
      std::copy(mask->shape.begin(), mask->shape.end(),
                mask_dims.end() - static_cast<int64_t>(mask->shape.size()));
      mask_desc_ = memory::desc(mask_dims, memory::data_type::f32, strides_of(mask_dims));
      dnnl::post_ops post_ops;
      post_ops.append_binary(dnnl::algorithm::binary_add, mask_desc_);
      dnnl::primitive_attr masked_attr = scores_attr;
      masked_attr.set_post_ops(post_ops);
      const dnnl::matmul::primitive_desc masked_pd(dnnl::matmul::desc(q_desc_, kt_desc_, scores_desc_),
                                                   masked_attr, engine());
      // oneDNN 2.6's fast matmuls take a post-op operand broadcast only in some dims (not over the
      // batch): elsewhere the mask is added by a binary primitive after the product.
      if (!implementation_name(masked_pd).starts_with("ref")) {
        scores_pd = masked_pd;
      } else {
        const dnnl::binary::primitive_desc add_pd(
            dnnl::binary::desc(dnnl::algorithm::binary_add, scores_desc_, mask_desc_, scores_desc_),
            primitive_attributes(), engine());
        add_mask_ = Primitive(add_pd);
        separate_mask_ = true;
        mask_name_ = str_cat("+", implementation_name(add_pd));  // not "+" + ...: GCC 12's false -Wrestrict
      }
    }
    const dnnl::softmax_v2_forward::primitive_desc softmax_pd(
        dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::softmax_accurate,
                                       scores_desc_, probabilities_desc_,
                                       static_cast<int>(q_dims.size()) - 1),
        primitive_attributes(), engine());
    const dnnl::matmul::primitive_desc output_pd(dnnl::matmul::desc(probabilities_desc_, v_desc_, out_desc_),
                                                 primitive_attributes(), engine());
    scores_ = Primitive(scores_pd);
    softmax_ = Primitive(softmax_pd);
    output_ = Primitive(output_pd);
    name_ = str_cat("onednn:attention(", implementation_name(scores_pd), mask_name_, "+",
                    implementation_name(softmax_pd), "+", implementation_name(output_pd), ")",
                    bf16 ? ":bf16" : "");
    scores_bytes_ = scores_desc_.get_size() + (bf16 ? probabilities_desc_.get_size() : 0);
    has_mask_ = mask != nullptr;
  }

  std::string_view name() const override { return name_; }
  Layout input_layout(size_t index) const override {
    return bf16_ && index < 3 ? Layout::plain_bf16 : Layout::plain;
  }

  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override;
  // Memories, the scores buffer and argument arrays made once per run context, so a bound run
  // allocates nothing on kiln's side (run() makes them for each call).
  std::unique_ptr<BoundKernel> bind(std::span<const Tensor> inputs,
                                    std::span<const Tensor> outputs) const override;

 private:
  friend class BoundAttention;
  bool bf16_ = false;
  bool has_mask_ = false;
  bool separate_mask_ = false;  // added by add_mask_, not by a post-op of the product
  std::string mask_name_;
  memory::desc q_desc_, kt_desc_, v_desc_, mask_desc_, scores_desc_, probabilities_desc_, out_desc_;
  Primitive scores_;
  Primitive add_mask_;  // only where separate_mask_
  Primitive softmax_;
  Primitive output_;
  size_t scores_bytes_ = 0;
  std::string name_;
};

class BoundAttention final : public BoundKernel {
 public:
  BoundAttention(const AttentionKernel& kernel, std::span<const Tensor> inputs,
                 std::span<const Tensor> outputs)
      : kernel_(kernel) {
    char* scratch = static_cast<char*>(buffer_.reserve(kernel.scores_bytes_));
    scores_ = memory(kernel.scores_desc_, engine(), scratch);
    probabilities_ =
        kernel.bf16_ ? memory(kernel.probabilities_desc_, engine(), scratch + kernel.scores_desc_.get_size())
                     : scores_;
    // Inputs 0..3 (Q, K^T or K, V, mask) and the output, their data handles following the tensors.
    const memory::desc* descs[] = {&kernel.q_desc_, &kernel.kt_desc_, &kernel.v_desc_, &kernel.mask_desc_};
    for (size_t i = 0; i < (kernel.has_mask_ ? 4u : 3u); ++i)
      tensors_.emplace_back(*descs[i], engine(), handle(inputs[i]));
    tensors_.emplace_back(kernel.out_desc_, engine(), handle(outputs[0]));
    const dnnl_memory_t q = tensors_[0].get(), kt = tensors_[1].get(), v = tensors_[2].get();
    const dnnl_memory_t mask = kernel.has_mask_ ? tensors_[3].get() : nullptr;
    const dnnl_memory_t out = tensors_.back().get();
    scores_args_ = {{DNNL_ARG_SRC, q}, {DNNL_ARG_WEIGHTS, kt}, {DNNL_ARG_DST, scores_.get()}};
    if (kernel.has_mask_ && !kernel.separate_mask_)
      scores_args_.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, mask});
    if (kernel.separate_mask_)
      mask_args_ = {{DNNL_ARG_SRC_0, scores_.get()}, {DNNL_ARG_SRC_1, mask}, {DNNL_ARG_DST, scores_.get()}};
    softmax_args_ = {{DNNL_ARG_SRC, scores_.get()}, {DNNL_ARG_DST, probabilities_.get()}};
    output_args_ = {{DNNL_ARG_SRC, probabilities_.get()}, {DNNL_ARG_WEIGHTS, v}, {DNNL_ARG_DST, out}};
    // The primitives run one after the other: one buffer, as large as the largest scratchpad, serves all.
    const size_t scratchpad_bytes =
        std::max({kernel.scores_.scratchpad_bytes(), kernel.add_mask_.scratchpad_bytes(),
                  kernel.softmax_.scratchpad_bytes(), kernel.output_.scratchpad_bytes()});
    void* scratchpad = scratchpad_bytes > 0 ? scratchpad_buffer_.reserve(scratchpad_bytes) : nullptr;
    give_scratchpad(kernel.scores_, scratchpad, scores_args_);
    if (kernel.separate_mask_) give_scratchpad(kernel.add_mask_, scratchpad, mask_args_);
    give_scratchpad(kernel.softmax_, scratchpad, softmax_args_);
    give_scratchpad(kernel.output_, scratchpad, output_args_);
  }

  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) override {
    apply_thread_count();
    for (size_t i = 0; i + 1 < tensors_.size(); ++i) follow(tensors_[i], inputs[i]);
    follow(tensors_.back(), outputs[0]);
    dnnl::stream& stream = thread_stream();
    execute(kernel_.scores_, scores_args_, stream);
    if (kernel_.separate_mask_) execute(kernel_.add_mask_, mask_args_, stream);
    execute(kernel_.softmax_, softmax_args_, stream);
    execute(kernel_.output_, output_args_, stream);
    stream.wait();
  }

 private:
  static void* handle(const Tensor& tensor) {
    return tensor.defined() ? const_cast<void*>(tensor.raw_data()) : nullptr;
  }
  static void follow(memory& memory, const Tensor& tensor) {
    if (memory.get_data_handle() != handle(tensor)) memory.set_data_handle(handle(tensor));
  }
  static void execute(const Primitive& primitive, const std::vector<dnnl_exec_arg_t>& args,
                      dnnl::stream& stream) {
    dnnl::error::wrap_c_api(dnnl_primitive_execute(primitive.get().get(), stream.get(),
                                                   static_cast<int>(args.size()), args.data()),
                            "could not execute an attention primitive");
  }
  // Adds `primitive`'s scratchpad, at `scratchpad`, to its arguments.
  void give_scratchpad(const Primitive& primitive, void* scratchpad, std::vector<dnnl_exec_arg_t>& args) {
    if (primitive.scratchpad_bytes() == 0) return;
    scratchpads_.emplace_back(primitive.scratchpad_desc(), engine(), scratchpad);
    args.push_back({DNNL_ARG_SCRATCHPAD, scratchpads_.back().get()});
  }

  const AttentionKernel& kernel_;
  ScratchBuffer buffer_;
  memory scores_, probabilities_;
  std::vector<memory> tensors_;
  ScratchBuffer scratchpad_buffer_;
  std::vector<memory> scratchpads_;  // one per primitive that has one, all at scratchpad_buffer_
  std::vector<dnnl_exec_arg_t> scores_args_, mask_args_, softmax_args_, output_args_;
};

void AttentionKernel::run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const {
  BoundAttention(*this, inputs, std::span<const Tensor>(outputs.data(), outputs.size())).run(inputs, outputs);
}

std::unique_ptr<BoundKernel> AttentionKernel::bind(std::span<const Tensor> inputs,
                                                   std::span<const Tensor> outputs) const {
  return std::make_unique<BoundAttention>(*this, inputs, outputs);
}

KernelOrReason make_attention(const KernelRequest& request, std::span<const TensorInfo> outputs) {
  if (request.variant != "onednn")
    return KernelOrReason::rejected(RefusalKind::no_kernel,
                                    str_cat("no oneDNN attention kernel named '", request.variant, "'"));
  const AttentionParams p = attention_params(request.op);
  if (p.mask == AttentionMask::keep || p.mask == AttentionMask::drop)
    return KernelOrReason::rejected(
        RefusalKind::unsupported_attribute,
        "boolean masks are not supported (oneDNN's binary post-op adds float32 values)");
  if (p.causal)
    return KernelOrReason::rejected(RefusalKind::unsupported_attribute,
                                    "is_causal is not supported (oneDNN 2.6 matmul has no causal mask)");
  if (p.leading.size() + 2 > DNNL_MAX_NDIMS)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                    str_cat("more than ", DNNL_MAX_NDIMS, " dims"));
  const int64_t scores_bytes = p.batch * p.l * p.s * static_cast<int64_t>(sizeof(float));
  if (scores_bytes > kScoresLimit) {
    return KernelOrReason::rejected(RefusalKind::above_threshold,
                                    str_cat("the scores (", scores_bytes >> 20, " MiB) exceed the ",
                                            kScoresLimit >> 20, " MiB this kernel materializes"));
  }
  if (p.batch * p.l * p.s * p.e * p.ev == 0)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape, "empty attention");
  const TensorInfo* mask = p.mask == AttentionMask::additive ? &request.op.inputs[3] : nullptr;
  KernelOrReason offer = create_reduced_precision_kernel(request, [&](const KernelRequest& chosen) {
    return std::make_unique<AttentionKernel>(p, mask, chosen.precision == Precision::bf16);
  });
  // A primitive on oneDNN's reference implementation is slower than the native kernels.
  if (offer.kernel && offer.kernel->name().find("ref:") != std::string_view::npos) {
    return KernelOrReason::rejected(
        RefusalKind::library_refused,
        str_cat("oneDNN offers only its reference implementation for part of it (", offer.kernel->name(),
                ")"));
  }
  return offer;
}

constexpr KernelEntry kAttentionKernels[] = {{kAttentionOp, make_attention}};

}  // namespace

std::span<const KernelEntry> attention_kernels() {
  return kAttentionKernels;
}

}  // namespace kiln::onednn
