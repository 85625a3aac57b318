// A kernel is one node's computation, created at plan time for fixed input dtypes and shapes.
// run() is const and keeps no state between calls, so one kernel may serve concurrent runs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "backends/base/layout.h"
#include "backends/base/refusal.h"
#include "core/tensor.h"

namespace kiln {

// A kernel bound to one run context's tensors (see Kernel::bind): it prepared everything it needs
// for them once, so running allocates nothing on kiln's side.
class BoundKernel {
 public:
  virtual ~BoundKernel() = default;
  // Same contract as Kernel::run; tensors whose storage was fixed at bind time keep it, others
  // (the caller's inputs, graph outputs) may change between calls.
  virtual void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) = 0;
};

class Kernel {
 public:
  virtual ~Kernel() = default;

  // Reads `inputs` (absent optional inputs are undefined tensors) and writes `outputs`, which the
  // executor has allocated with the shapes and dtypes shape inference gave, unless is_view().
  virtual void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const = 0;

  // Implementation name as users see it in plans and verbose lines, e.g. "native:conv_im2col_gemm".
  virtual std::string_view name() const = 0;

  // Optional: true when the kernel's outputs share storage with its inputs (Reshape, Squeeze, ...).
  // The executor then passes undefined outputs and the kernel assigns views to them.
  virtual bool is_view() const { return false; }

  // Optional: true when the size of an output depends on the input's values (NonZero, Unique,
  // NonMaxSuppression, ...): the executor then passes undefined outputs and the kernel allocates
  // them with the shapes it finds. Shape inference gave an upper bound; the planner lets such
  // outputs reach only the caller.
  virtual bool sizes_outputs() const { return false; }

  // The layout the kernel reads input `index` in and writes output `index` in. The planner stores
  // values accordingly and inserts a visible reorder step where a producer and a reader disagree.
  virtual Layout input_layout(size_t index) const { return Layout::plain; }
  virtual Layout output_layout(size_t index) const { return Layout::plain; }

  // An input the kernel can compute output 0 in place of (a fused residual sum starts from it), or
  // -1. The planner lets it when that input's value is not read afterwards; run() then receives
  // output 0 sharing the input's storage.
  virtual int in_place_input() const { return -1; }

  // True for a constant input the kernel copied at creation (weights reordered for oneDNN) and never
  // reads at run time: the plan then passes it as absent and holds no reference to the value.
  virtual bool copied_at_plan_time(size_t index) const { return false; }

  // Optional: a version of this kernel prepared for a run context whose tensors are `inputs` and
  // `outputs` (undefined where storage changes per run), or null to be run through run(). Not
  // thread-safe: one bound kernel serves one context, and contexts serve one run at a time.
  virtual std::unique_ptr<BoundKernel> bind(std::span<const Tensor> inputs,
                                            std::span<const Tensor> outputs) const {
    return nullptr;
  }
};

// A backend's answer to "can you run this node?": a kernel, or why it cannot.
struct KernelOrReason {
  std::unique_ptr<Kernel> kernel;
  Refusal refusal;   // when kernel is null: its kind and detail (selection fills in who refused)
  std::string note;  // with a kernel: what it does differently from what was asked (precision)
  // With a kernel: it trades flops for memory traffic (Winograd's transformed filters), so autotune
  // times it and its rivals from cold caches, as they run inside a model whose weights do not fit
  // the caches.
  bool cold_caches = false;

  static KernelOrReason rejected(RefusalKind kind, std::string detail) {
    return rejected(Refusal{{}, {}, kind, std::move(detail)});
  }
  static KernelOrReason rejected(Refusal refusal) { return {nullptr, std::move(refusal), {}, false}; }
};

}  // namespace kiln
