// What every oneDNN kernel shares: the CPU engine, a stream per thread, memory descriptors for
// kiln's values, primitives whose scratchpad kiln provides, and the base class that runs one
// primitive with its run context's scratchpad.
#pragma once

#include <algorithm>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/base/kernel.h"
#include "backends/base/kernel_request.h"
#include "backends/base/kernel_table.h"
#include "core/allocator.h"

namespace kiln::onednn {

// The CPU engine. Creating it first caps oneDNN at kiln's ISA tier (runtime/cpu_info.h).
const dnnl::engine& engine();
// Why oneDNN could not be capped at kiln's ISA tier, or "" (it was, or the tier is the CPU's best).
const std::string& isa_cap_failure();
// The calling thread's stream, with oneDNN's OpenMP team sized to kiln's thread setting.
dnnl::stream& thread_stream();
// Sets the calling thread's OpenMP thread count to kiln's (a primitive created or executed under
// N threads uses at most N); call before creating or executing primitives.
void apply_thread_count();

// A descriptor for a float32 value of logical `shape` stored in `layout` (as bf16 for the *_bf16
// layouts).
dnnl::memory::desc value_desc(const Shape& shape, Layout layout);
// The same for a value of `dtype`: float32 as above; int8, uint8 and int32 (quantized activations,
// integer accumulators) in the same element order, one element of their type each.
dnnl::memory::desc value_desc(const Shape& shape, DType dtype, Layout layout);
dnnl::memory::desc plain_desc(const Shape& shape,
                              dnnl::memory::data_type type = dnnl::memory::data_type::f32);
// The float32 layout with the same element order (nhwc for nhwc_bf16): ops that stay in float32
// under reduced precision (softmax, normalization) read and write it.
Layout float32_layout(Layout layout);

// What tells oneDNN's implementations of one primitive apart: its name, weights and scratchpad.
struct ImplementationSignature {
  std::string name;
  dnnl::memory::desc weights;
  dnnl::memory::desc scratchpad;
  bool operator==(const ImplementationSignature& other) const {
    return name == other.name && weights == other.weights && scratchpad == other.scratchpad;
  }
};
ImplementationSignature implementation_signature(const dnnl::primitive_desc_base& pd);

// Moves `pd` on to oneDNN's `alternative`-th distinct implementation of the same primitive (0: its
// first choice), for autotune; throws dnnl::error when oneDNN lists fewer. Distinct, because oneDNN
// 2.6's iterator looks each position up in the primitive cache first: once primitives exist for
// earlier positions (autotune creates each alternative's), a later position can return a cached copy
// of the first implementation instead of advancing, as many times as the cache has slots.
template <typename PrimitiveDesc>
void select_alternative(PrimitiveDesc& pd, int alternative) {
  std::vector<ImplementationSignature> seen{implementation_signature(pd)};
  while (static_cast<int>(seen.size()) <= alternative) {
    if (!pd.next_impl()) throw dnnl::error(dnnl_unimplemented, "oneDNN lists no further implementation");
    ImplementationSignature signature = implementation_signature(pd);
    if (std::find(seen.begin(), seen.end(), signature) == seen.end()) seen.push_back(std::move(signature));
  }
}

// "#2" for the alternative-th implementation in oneDNN's list, "" for its first choice. oneDNN
// gives several of its implementations one name (brgconv:avx512_core for different blockings), so
// autotune's timings and plans could not tell them apart without it.
std::string alternative_suffix(int alternative);

// "brgconv:avx512_core" for conv primitives, as oneDNN names its implementations.
std::string implementation_name(const dnnl::primitive_desc_base& pd);

// The attributes every primitive kiln creates starts from: a user scratchpad. In its default mode
// oneDNN allocates a primitive's scratchpad when it creates the primitive: the primitive's own
// buffer, which every run executing it at once would share (wrong outputs), or, in Debian's build
// (no DNNL_ENABLE_CONCURRENT_EXEC), for some implementations a buffer of the creating thread's,
// which an execution on another thread does not have (a crash). kiln's kernels are created at plan
// time and executed by every run of the plan, on any thread.
dnnl::primitive_attr primitive_attributes();

// Weights prepacked into layout `to`, shared with every other kernel in the process that packs the
// same bytes (by content) from and to the same layouts: two sessions of one model hold its packed
// weights once. `owner` keeps `memory`'s buffer alive; the last owner gone frees it.
struct SharedConstant {
  dnnl::memory memory;
  std::shared_ptr<const void> owner;
};
SharedConstant shared_reorder_constant(const dnnl::memory::desc& from, const Tensor& value,
                                       const dnnl::memory::desc& to);

// A oneDNN primitive and the scratchpad an execution must pass it. Every primitive kiln executes is
// one of these, created from a descriptor whose attributes came from primitive_attributes(): the
// constructor throws kiln::Error (runtime) for any other, so no kernel can forget it.
class Primitive {
 public:
  Primitive() = default;
  explicit Primitive(const dnnl::primitive_desc_base& pd);

  const dnnl::primitive& get() const { return primitive_; }
  const dnnl::memory::desc& scratchpad_desc() const { return scratchpad_desc_; }
  size_t scratchpad_bytes() const { return scratchpad_desc_.get_size(); }

  // Executes the primitive on the calling thread's stream with the calling thread's scratchpad, and
  // waits: for plan-time work (weights reordered, kernels timed) and unbound runs. Runs bound to a
  // run context pass the context's scratchpad instead.
  void execute(std::unordered_map<int, dnnl::memory> args) const;

 private:
  dnnl::primitive primitive_;
  dnnl::memory::desc scratchpad_desc_;
};

// A kernel made of one primitive. Subclasses create the primitive and declare which kernel input
// or output feeds each primitive argument; constants (prepacked weights, bias) live in
// `constant_args_` and are shared by every run. Scratchpads are the bound kernel's own (one per run
// context) for bind(), the calling thread's for run() (plan-time folding and timing), so concurrent
// runs never share one.
class PrimitiveKernel : public Kernel {
 public:
  std::string_view name() const override { return name_; }
  Layout input_layout(size_t index) const override {
    return index < input_layouts_.size() ? input_layouts_[index] : Layout::plain;
  }
  Layout output_layout(size_t index) const override {
    return index < output_layouts_.size() ? output_layouts_[index] : Layout::plain;
  }
  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override;
  bool copied_at_plan_time(size_t index) const override {
    return index < copied_inputs_.size() && copied_inputs_[index];
  }
  std::unique_ptr<BoundKernel> bind(std::span<const Tensor> inputs,
                                    std::span<const Tensor> outputs) const override;

  // A primitive argument taken from kernel input or output `index`, described by `desc`.
  struct Binding {
    int argument;
    bool is_output;
    size_t index;
    dnnl::memory::desc desc;
  };
  const std::vector<Binding>& bindings() const { return bindings_; }
  const Primitive& primitive() const { return primitive_; }
  const std::unordered_map<int, dnnl::memory>& constant_args() const { return constant_args_; }
  // Called before each execution (a fused sum copies its residual into the output here).
  virtual void prepare_outputs(std::span<const Tensor> inputs, std::span<Tensor> outputs) const {}

 protected:
  void bind_input(int argument, size_t index, const dnnl::memory::desc& desc) {
    bindings_.push_back({argument, false, index, desc});
  }
  void bind_output(int argument, size_t index, const dnnl::memory::desc& desc) {
    bindings_.push_back({argument, true, index, desc});
  }

  Primitive primitive_;
  std::unordered_map<int, dnnl::memory> constant_args_;
  std::string name_;
  std::vector<Layout> input_layouts_;
  std::vector<Layout> output_layouts_;
  std::vector<bool> copied_inputs_;  // per input: reordered into constant_args_ at creation
  std::vector<std::shared_ptr<const void>> shared_constants_;  // prepack()'s buffers

  // Weights packed as shared_reorder_constant does, owned by this kernel while it lives.
  dnnl::memory prepack(const dnnl::memory::desc& from, const Tensor& value, const dnnl::memory::desc& to) {
    SharedConstant packed = shared_reorder_constant(from, value, to);
    shared_constants_.push_back(std::move(packed.owner));
    return packed.memory;
  }

  void mark_copied(size_t index) {
    if (copied_inputs_.size() <= index) copied_inputs_.resize(index + 1, false);
    copied_inputs_[index] = true;
  }

 private:
  std::vector<Binding> bindings_;
};

// Grow-only memory from the current allocator: a user scratchpad, or attention's scores.
class ScratchBuffer {
 public:
  void* reserve(size_t bytes);

 private:
  AllocatedBlock block_;
};

// Wraps a tensor's storage as a oneDNN memory with descriptor `desc` (no copy).
dnnl::memory wrap(const dnnl::memory::desc& desc, const Tensor& tensor);
// A fused sum post-op adds the primitive's result to what dst holds: dst starts as the residual,
// unless the planner already placed dst in the residual's storage (then this is a no-op).
void copy_residual(const Tensor& residual, Tensor& destination);
// A oneDNN-owned copy of constant `value` (described by `from`) in layout `to`: weights prepacking.
dnnl::memory reorder_constant(const dnnl::memory::desc& from, const Tensor& value,
                              const dnnl::memory::desc& to);

// Builds a kernel with `make` (which creates its primitive), turning oneDNN's refusals into
// rejection reasons. A primitive for which oneDNN has only its slow reference implementation is
// refused too: the native kernel is faster there.
template <typename MakeKernel>
KernelOrReason create_primitive_kernel(MakeKernel make) {
  try {
    apply_thread_count();
    std::unique_ptr<Kernel> kernel = make();
    if (kernel->name().starts_with("onednn:ref")) {
      return KernelOrReason::rejected(RefusalKind::library_refused,
                                      str_cat("oneDNN offers only its reference implementation (",
                                              kernel->name().substr(7), ") for this shape"));
    }
    return {std::move(kernel), {}, {}};
  } catch (const dnnl::error& error) {
    return KernelOrReason::rejected(RefusalKind::library_refused,
                                    str_cat("oneDNN cannot create the primitive: ", error.what()));
  }
}

// Creates a Conv/MatMul/Gemm kernel with `make(request)` at request.precision; where oneDNN refuses
// the bf16 primitive, creates the float32 one and says why in the offer's note. (The planner asks
// for bf16 only where the ISA tier in effect has bf16 dot products.)
template <typename MakeKernel>
KernelOrReason create_reduced_precision_kernel(const KernelRequest& request, MakeKernel make) {
  KernelOrReason offer = create_primitive_kernel([&] { return make(request); });
  if (offer.kernel || request.precision == Precision::fp32) return offer;
  const std::string why = std::move(offer.refusal.detail);
  KernelRequest fp32 = request;
  fp32.precision = Precision::fp32;
  offer = create_primitive_kernel([&] { return make(fp32); });
  if (offer.kernel) offer.note = str_cat("precision bf16 requested, float32 used: ", why);
  return offer;
}

// `desc` with its elements of `type` (a plain or strided layout keeps its strides).
dnnl::memory::desc with_type(const dnnl::memory::desc& desc, dnnl::memory::data_type type);

// oneDNN's factories read the whole request: layouts, precision, post-ops, alternative.
using KernelEntry = kiln::KernelEntry<KernelRequest>;

// Family tables, one per file under backends/onednn/.
std::span<const KernelEntry> conv_kernels();
std::span<const KernelEntry> conv_transpose_kernels();
std::span<const KernelEntry> pool_kernels();
std::span<const KernelEntry> matmul_kernels();
std::span<const KernelEntry> elementwise_kernels();
std::span<const KernelEntry> concat_kernels();
std::span<const KernelEntry> normalization_kernels();
std::span<const KernelEntry> softmax_kernels();
std::span<const KernelEntry> reorder_kernels();  // layout conversions: the planner's Reorder steps
std::span<const KernelEntry> attention_kernels();  // scaled dot-product attention, the kernel "onednn"
std::span<const KernelEntry> recurrent_kernels();  // LSTM, GRU, RNN
std::span<const KernelEntry> quantize_kernels();   // QLinearConv, ConvInteger (int8, VNNI only)

}  // namespace kiln::onednn
