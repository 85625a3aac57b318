// The backends kiln knows, one row each: everything kernel selection, the fusion pass, deterministic
// mode and autotune need to know about a backend besides its kernels. Selection walks these rows and
// never names a backend; the settings table expands its per-backend rows over them. Adding a backend
// is a folder under backends/ (its kernels, its entry point, its CMake options) and one row here:
// docs/adding_a_backend.md.
#pragma once

#include <array>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <span>
#include <string_view>

#include "backends/base/backend.h"
#include "backends/base/post_op.h"

namespace kiln {

// Each backend's entry point, defined in its folder. A backend left out at configure time
// (KILN_WITH_<NAME>=OFF) gets a generated one whose backend is not built and refuses every node
// (backends/not_built.h), so its row, its settings and its name in messages stay the same.
const Backend& onednn_backend();
const Backend& blas_backend();
const Backend& native_backend();
const Backend& winograd_backend();

// Post-op kinds as a bit set.
using PostOpKinds = uint32_t;
constexpr PostOpKinds post_op_kinds(std::initializer_list<PostOp::Kind> kinds) {
  PostOpKinds bits = 0;
  for (PostOp::Kind kind : kinds) bits |= PostOpKinds{1} << static_cast<int>(kind);
  return bits;
}
constexpr bool has_post_op_kind(PostOpKinds kinds, PostOp::Kind kind) {
  return (kinds >> static_cast<int>(kind)) & 1;
}

// What a backend's kernels for one op type (a product) can take from the fusion pass.
struct FusionRule {
  std::string_view op_type;
  PostOpKinds post_ops = 0;
  bool folds_batch_norm = false;  // a following inference BatchNormalization folded into the weights
};

// Whether a backend's kernels give the same result on any thread count.
enum class Determinism : uint8_t {
  exact,         // always (plain loops with a fixed order)
  listed_exact,  // only for `exact_ops` without post-ops
  never,         // no kernel of it may run in deterministic mode
};

// Implementations autotune may ask a backend for, per node: every one the backend lists.
inline constexpr int kEveryAlternative = INT_MAX;

struct BackendRow {
  std::string_view name;     // settings' prefix and the CLI's --disable value: "onednn"
  std::string_view library;  // what it wraps, as messages name it: "oneDNN"
  const Backend& (*instance)();
  // Candidate order: lower ranks are asked first, equal ranks in table order.
  int rank = 0;
  // ONNX-domain op types it is a candidate for; empty: every op.
  std::span<const std::string_view> ops = {};
  std::span<const FusionRule> fuses = {};
  Determinism determinism = Determinism::exact;
  std::span<const std::string_view> exact_ops = {};
  std::string_view nondeterminism = {};  // why not, completing "deterministic mode: ..."
  // Implementations autotune may time for the ops in `tuned_ops` (1: only the backend's first choice).
  int alternatives = 1;
  std::span<const std::string_view> tuned_ops = {};
  // The attention kernels (kSdpaKernels) that are kernels of this backend. Attention's candidates
  // are these kernels in the order of the sdpa_kernels setting, not backends in rank order.
  std::span<const std::string_view> sdpa_kernels = {};
};

namespace registry_data {

inline constexpr std::string_view kProducts[] = {"MatMul", "Gemm"};
inline constexpr std::string_view kConvAndProducts[] = {"Conv", "MatMul", "Gemm"};

inline constexpr PostOpKinds kActivations =
    post_op_kinds({PostOp::Kind::relu, PostOp::Kind::leaky_relu, PostOp::Kind::clip, PostOp::Kind::sigmoid,
                   PostOp::Kind::tanh, PostOp::Kind::gelu_erf});
inline constexpr FusionRule kOnednnFusions[] = {
    {"Conv", kActivations | post_op_kinds({PostOp::Kind::sum}), true},
    {"MatMul", kActivations | post_op_kinds({PostOp::Kind::sum, PostOp::Kind::bias})},
    {"Gemm", kActivations},
};
// Exact elementwise arithmetic, copies, layout conversions and max pooling: no sum to reorder.
inline constexpr std::string_view kOnednnExactOps[] = {
    "Relu", "LeakyRelu", "Clip", "Add", "Sub", "Mul", "Div", "Concat", "MaxPool", "Reorder", "GlobalMaxPool"};

// Winograd's convolutions apply a bias, these activations and a residual sum in their output
// transform (backends/winograd/winograd_conv.h), and take batch-normalized weights like any Conv.
inline constexpr std::string_view kWinogradOps[] = {"Conv"};
inline constexpr FusionRule kWinogradFusions[] = {
    {"Conv",
     post_op_kinds({PostOp::Kind::relu, PostOp::Kind::leaky_relu, PostOp::Kind::clip, PostOp::Kind::sum}),
     true},
};

// Scaled dot-product attention kernels, by the names users choose them with (the sdpa_kernels
// setting's choices, in this order): math materializes the scores, flash never does (tiles with
// an online softmax), onednn runs oneDNN's matmul and softmax primitives.
inline constexpr std::string_view kSdpaKernels[] = {"math", "flash", "onednn"};
inline constexpr std::string_view kNativeSdpaKernels[] = {"math", "flash"};
inline constexpr std::string_view kOnednnSdpaKernels[] = {"onednn"};

// Op families, for choosing backends per family (the prefer_* settings, backends/prefer.h). Each
// op type belongs to the first family listing it; "other" takes every op type no family lists.
// kiln's Reorder (a conversion between layouts) belongs to none: no preference may leave a value
// stranded in a layout nothing can convert.
inline constexpr std::string_view kConvFamily[] = {"Conv", "ConvTranspose"};
inline constexpr std::string_view kMatmulFamily[] = {"MatMul", "Gemm", "Einsum"};
inline constexpr std::string_view kAttentionFamily[] = {"ScaledDotProductAttention"};  // kAttentionOp
// The int8 ops: the integer products (oneDNN's exact VNNI kernels or native's), the quantized
// elementwise ops and the conversions (kiln.backends.quantized.engine chooses among them).
inline constexpr std::string_view kQuantizedFamily[] = {
    "QLinearConv", "ConvInteger", "QLinearMatMul",  "MatMulInteger",    "QGemm",
    "QLinearAdd",  "QLinearMul",  "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"};
struct OpFamily {
  std::string_view name;
  std::span<const std::string_view> ops;  // empty: every op type no other family lists
};
inline constexpr OpFamily kOpFamilies[] = {{"conv", kConvFamily},
                                           {"matmul", kMatmulFamily},
                                           {"attention", kAttentionFamily},
                                           {"quantized", kQuantizedFamily},
                                           {"other", {}}};
inline constexpr int kOpFamilyCount = static_cast<int>(std::size(kOpFamilies));

// What a preference lists, the unit of choice: a backend (every kernel of it), or one named kernel
// (attention's math and flash; "onednn" is both its backend and its one attention kernel). The
// backends come first, in kBackendRows' order (checked in selection.cpp).
inline constexpr std::string_view kKernelChoices[] = {"onednn", "blas", "winograd",
                                                      "native", "math", "flash"};

}  // namespace registry_data

// The rows, in the order settings list backends. The native reference comes last: every op has a
// native kernel, and it cannot be disabled (Backend::can_be_disabled).
inline constexpr std::array kBackendRows = {
    BackendRow{.name = "onednn",
               .library = "oneDNN",
               .instance = onednn_backend,
               .rank = 1,
               .fuses = registry_data::kOnednnFusions,
               .determinism = Determinism::listed_exact,
               .exact_ops = registry_data::kOnednnExactOps,
               .nondeterminism = "may sum in another order on another thread count",
               .alternatives = kEveryAlternative,
               .tuned_ops = registry_data::kConvAndProducts,
               .sdpa_kernels = registry_data::kOnednnSdpaKernels},
    // BLAS is asked first for products: it takes the tiny ones, where oneDNN's per-call overhead
    // dominates, and refuses the rest with that reason.
    BackendRow{.name = "blas",
               .library = "BLAS",
               .instance = blas_backend,
               .rank = 0,
               .ops = registry_data::kProducts,
               .determinism = Determinism::never,
               .nondeterminism = "BLAS splits products by thread count"},
    // Winograd is asked first for convolutions: it refuses those it cannot run and, under
    // conv_algorithm auto, those it would run less accurately than its bound (or the layer's share of
    // the model's error budget) or that its cost model predicts slower than a direct kernel
    // (oneDNN's, next).
    BackendRow{.name = "winograd",
               .library = "kiln",
               .instance = winograd_backend,
               .rank = 0,
               .ops = registry_data::kWinogradOps,
               .fuses = registry_data::kWinogradFusions,
               .alternatives = 2,  // its tiles, F(4x4, 3x3) and F(2x2, 3x3)
               .tuned_ops = registry_data::kWinogradOps},
    BackendRow{.name = "native",
               .library = "kiln",
               .instance = native_backend,
               .rank = 2,
               .sdpa_kernels = registry_data::kNativeSdpaKernels},
};
inline constexpr int kBackendCount = static_cast<int>(kBackendRows.size());

// The rows' names, for the settings table's per-backend rows.
inline constexpr std::array<std::string_view, kBackendCount> kBackendNames = [] {
  std::array<std::string_view, kBackendCount> names{};
  for (int i = 0; i < kBackendCount; ++i) names[i] = kBackendRows[i].name;
  return names;
}();

// A backend's row position, named at compile time (settings' per-backend slots, tests).
consteval int backend_position(std::string_view name) {
  for (int i = 0; i < kBackendCount; ++i) {
    if (kBackendNames[i] == name) return i;
  }
  throw "no such backend in kBackendRows";
}

}  // namespace kiln
