// What kernel selection asks a backend for: one node's semantics (an OpSpec, all that shape
// inference sees) plus how to execute it: the layouts its inputs are stored in, the precision, the
// fused post-ops and which of the backend's implementations (autotune's alternatives).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "backends/base/layout.h"
#include "backends/base/post_op.h"
#include "ops/einsum_path.h"
#include "ops/op_spec.h"

namespace kiln {

// The arithmetic a convolution or matrix product may use. bf16: weights converted once at plan
// time, activations stored as bfloat16 between such ops, accumulation in float32.
enum class Precision : uint8_t { fp32, bf16 };
const char* precision_name(Precision precision);

// Which algorithm a 3x3 convolution may use (the conv_algorithm setting's choices, in this order):
// auto lets Winograd take a layer where it stays within its error bound and is predicted faster,
// direct never, winograd wherever it can (backends/winograd/winograd_backend.h).
enum class ConvAlgorithm : uint8_t { automatic, direct, winograd };
inline constexpr std::string_view kConvAlgorithmChoices[] = {"auto", "direct", "winograd"};

// The blas_threshold setting's default: where one BLAS thread stops beating oneDNN's per-call
// set-up on this project's machines (bench/blas_crossover.py).
inline constexpr int64_t kDefaultSmallProductLimit = 32 * 32 * 32;

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
  // Products of at most this many multiply-adds count as small (the blas_threshold setting, set by
  // the planner): the BLAS backend takes only those.
  int64_t small_product_limit = kDefaultSmallProductLimit;
  // How an Einsum orders its pairwise products (the einsum_optimize and einsum_strategy settings,
  // set by the planner): left to right when not optimizing.
  bool einsum_optimize = true;
  EinsumStrategy einsum_strategy = EinsumStrategy::automatic;
  ConvAlgorithm conv_algorithm = ConvAlgorithm::automatic;  // the conv_algorithm setting
  bool rnn_fastpath = true;  // the rnn_fastpath setting: recurrent layers may run on a fast backend
  // Set when the offers will be timed against each other (autotune): a backend that would refuse a
  // kernel its own rule predicts slower than the next candidate's offers it, to be measured.
  bool timed = false;
  // Set by selection when a later candidate other than the reference fallback (native) may take the
  // node: enabled, built, available and allowed in deterministic mode. A backend whose rule weighs its
  // kernel against an optimized one (Winograd against oneDNN's direct convolution) applies the rule
  // only then; against the reference kernels it takes every node it can.
  bool optimized_candidate_follows = false;
  // For ops whose kernels users choose by name (attention: "math", "flash", "onednn"; see
  // backends/registry.h), the one asked for; empty otherwise.
  std::string_view variant;

  Layout input_layout(size_t index) const {
    return index < input_layouts.size() ? input_layouts[index] : Layout::plain;
  }
  bool wants_output_layout(size_t index) const { return index < output_layouts.size(); }
};

}  // namespace kiln
