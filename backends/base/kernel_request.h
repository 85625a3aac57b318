// What kernel selection asks a backend for: one node's semantics (an OpSpec, all that shape
// inference sees) plus how to execute it: the layouts its inputs are stored in, the precision, the
// fused post-ops, which of the backend's implementations (autotune's alternatives), and the plan's
// backend options (backends/base/backend_options.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/base/backend_options.h"
#include "backends/base/layout.h"
#include "backends/base/post_op.h"
#include "ops/op_spec.h"

namespace kiln {

// The arithmetic a convolution or matrix product may use. bf16: weights converted once at plan
// time, activations stored as bfloat16 between such ops, accumulation in float32.
enum class Precision : uint8_t { fp32, bf16 };
const char* precision_name(Precision precision);

struct KernelRequest {
  // The node. Post-op operands (a residual for sum, a bias) are appended to op.inputs, after
  // any absent optional inputs the op has before them.
  OpSpec op;
  std::vector<Layout> input_layouts;  // per op.inputs entry; entries past the end are plain
  // The layouts the outputs must be written in, where the caller needs particular ones (a Reorder's
  // target); empty: the kernel chooses and says so through Kernel::output_layout.
  std::vector<Layout> output_layouts;
  // Set by the planner for the op families that have a precision setting (Conv, MatMul, Gemm).
  Precision precision = Precision::fp32;
  std::vector<PostOp> post_ops;
  // Which of a backend's implementations to create: 0 is its first choice; autotune asks for the
  // alternatives a backend lists (backends/registry.h). A backend with fewer refuses.
  int alternative = 0;
  // The plan's options of every backend (read once per plan from its settings); a backend takes its
  // own with options_of. Null for a request made outside planning: each backend's defaults.
  std::shared_ptr<const BackendOptionSet> options;
  // Set when the offers will be timed against each other (autotune): a backend that would refuse a
  // kernel its own rule predicts slower than the next candidate's offers it, to be measured.
  bool timed = false;
  // Set by selection when a later candidate other than the reference fallback (native) may take the
  // node: enabled, built, available and allowed in deterministic mode. A backend whose rule weighs its
  // kernel against an optimized one (Winograd against oneDNN's direct convolution) applies the rule
  // only then; against the reference kernels it takes every node it can.
  bool optimized_candidate_follows = false;
  // Set by selection when native, the reference fallback, may take the node after this candidate
  // (a prefer_<family> setting may leave it out). A backend whose rule leaves a node to one of
  // native's kernels (oneDNN's mostly-padding and grouped convolutions) applies the rule only then.
  bool native_follows = false;
  // The error, relative to the output's scale, a less accurate kernel may bring to this node, where
  // it is above the backend's own bound (Winograd's kAutoErrorBound under conv_algorithm auto): the
  // share of the model's error budget planning gave it (graph/error_budget.h). 0: the own bound.
  double max_error = 0;
  // For ops whose kernels users choose by name (attention: "math", "flash", "onednn"; see
  // backends/registry.h), the one asked for; empty otherwise.
  std::string_view variant;
  // The less accurate form the error budget measures (ApproximateForm::name: "F(4x4,3x3)"), to be
  // created whatever the backend's cost rule would choose; empty otherwise.
  std::string approximate_form;

  Layout input_layout(size_t index) const {
    return index < input_layouts.size() ? input_layouts[index] : Layout::plain;
  }
  bool wants_output_layout(size_t index) const { return index < output_layouts.size(); }
};

// The options of type `Options` that `request` carries, or that type's defaults.
template <typename Options>
const Options& options_of(const KernelRequest& request) {
  static const Options defaults;
  const Options* found = request.options != nullptr ? request.options->find<Options>() : nullptr;
  return found != nullptr ? *found : defaults;
}

}  // namespace kiln
