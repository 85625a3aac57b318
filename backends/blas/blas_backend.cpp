#include "backends/blas/blas_backend.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "backends/base/function_kernel.h"
#include "runtime/call_log.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace kiln {
namespace {

// BLAS takes only tiny products (the blas_threshold setting), which one thread runs fastest. The
// count is set once, and the calling thread's OpenMP team size, which openblas_set_num_threads
// also sets, is put back.
void use_one_blas_thread() {
  static const bool once = [] {
#ifdef _OPENMP
    const int team = omp_get_max_threads();
#endif
    openblas_set_num_threads(1);
#ifdef _OPENMP
    omp_set_num_threads(team);
#endif
    return true;
  }();
  (void)once;
}

// MKL_VERBOSE's SGEMM line, as kiln's: one per cblas_sgemm call.
void log_sgemm(const CallLog& log, bool trans_a, bool trans_b, blasint m, blasint n, blasint k, blasint lda,
               blasint ldb, blasint ldc, double milliseconds) {
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.4f", milliseconds);
  log.write(str_cat("kiln_verbose,call,blas,cblas_sgemm,float32,trans:", trans_a ? 'T' : 'N',
                    trans_b ? 'T' : 'N', ",m:", m, " n:", n, " k:", k, ",ld:", lda, ";", ldb, ";", ldc,
                    ",threads:", openblas_get_num_threads(), ",", ms));
}

// C[M, N] = alpha * op(A) x op(B) (+ beta * C) for `batch` products; A and B advance by their
// batch strides (0 for a shared operand).
struct GemmShape {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t a_batch_stride = 0, b_batch_stride = 0;
  float alpha = 1;
};

void run_gemm(const GemmShape& g, const float* a, const float* b, float* c) {
  const blasint m = static_cast<blasint>(g.m), n = static_cast<blasint>(g.n), k = static_cast<blasint>(g.k);
  const blasint lda = static_cast<blasint>(g.trans_a ? g.m : g.k);
  const blasint ldb = static_cast<blasint>(g.trans_b ? g.k : g.n);
  const CallLog* log = call_log();
  if (log != nullptr && !log->wants("blas")) log = nullptr;
  for (int64_t i = 0; i < g.batch; ++i) {
    const auto start =
        log != nullptr ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
                m, n, k, g.alpha, a + i * g.a_batch_stride, lda, b + i * g.b_batch_stride, ldb, 0.0f,
                c + i * g.m * g.n, n);
    if (log != nullptr) {
      log_sgemm(*log, g.trans_a, g.trans_b, m, n, k, lda, ldb, n,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
  }
}

std::optional<Refusal> check_size(const GemmShape& g, int64_t limit) {
  const int64_t multiply_adds = g.m * g.n * g.k;
  if (multiply_adds > limit) {
    return Refusal{{},
                   {},
                   RefusalKind::above_threshold,
                   str_cat("M x N x K = ", g.m, " x ", g.n, " x ", g.k, " is above blas_threshold ", limit,
                           " (oneDNN is faster on larger products)")};
  }
  if (multiply_adds == 0) return Refusal{{}, {}, RefusalKind::unsupported_shape, "empty product"};
  return std::nullopt;
}

KernelOrReason make_matmul(const OpSpec& spec, std::span<const TensorInfo> outputs, int64_t limit) {
  const TensorInfo& a = spec.input(0);
  const TensorInfo& b = spec.input(1);
  if (a.dtype != DType::f32 || b.dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "BLAS MatMul runs float32 only");
  if (a.shape.size() < 2 || b.shape.size() < 2)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape, "1-D operands are not supported");
  GemmShape g;
  g.m = a.shape[a.shape.size() - 2];
  g.k = a.shape.back();
  g.n = b.shape.back();
  g.batch = checked_numel(std::span(a.shape).first(a.shape.size() - 2));
  g.a_batch_stride = g.m * g.k;
  if (b.shape.size() == 2) {
    g.b_batch_stride = 0;  // one B for every batch
  } else if (b.shape.size() == a.shape.size() &&
             std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin(), b.shape.end() - 2)) {
    g.b_batch_stride = g.k * g.n;
  } else {
    return KernelOrReason::rejected(
        RefusalKind::unsupported_shape,
        "batch dims differ between the operands (broadcast batches are not supported)");
  }
  if (std::optional<Refusal> refusal = check_size(g, limit))
    return KernelOrReason::rejected(std::move(*refusal));
  return make_kernel("blas:sgemm", [g](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
    run_gemm(g, inputs[0].data<float>(), inputs[1].data<float>(), outputs[0].data<float>());
  });
}

KernelOrReason make_gemm(const OpSpec& spec, std::span<const TensorInfo> outputs, int64_t limit) {
  const TensorInfo& a = spec.input(0);
  const TensorInfo& b = spec.input(1);
  if (a.dtype != DType::f32 || b.dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "BLAS Gemm runs float32 only");
  GemmShape g;
  g.trans_a = spec.attrs().get_int("transA", 0) != 0;
  g.trans_b = spec.attrs().get_int("transB", 0) != 0;
  g.alpha = spec.attrs().get_float("alpha", 1.0f);
  const float beta = spec.attrs().get_float("beta", 1.0f);
  g.m = outputs[0].shape[0];
  g.n = outputs[0].shape[1];
  g.k = g.trans_a ? a.shape[0] : a.shape[1];
  if (std::optional<Refusal> refusal = check_size(g, limit))
    return KernelOrReason::rejected(std::move(*refusal));
  const bool has_c = spec.has_input(2) && beta != 0.0f;
  if (has_c && spec.input(2).dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "C must be float32");
  const Shape c_shape = has_c ? spec.input(2).shape : Shape{};
  return make_kernel("blas:sgemm",
                     [g, has_c, beta, c_shape](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
                       float* c = outputs[0].data<float>();
                       run_gemm(g, inputs[0].data<float>(), inputs[1].data<float>(), c);
                       if (!has_c) return;
                       // beta * C, broadcast (unidirectionally) to [M, N].
                       const float* bias = inputs[2].data<float>();
                       const int64_t rows = c_shape.size() == 2 ? c_shape[0] : 1;
                       const int64_t cols = c_shape.empty() ? 1 : c_shape.back();
                       for (int64_t i = 0; i < g.m; ++i) {
                         for (int64_t j = 0; j < g.n; ++j)
                           c[i * g.n + j] += beta * bias[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)];
                       }
                     });
}

class BlasBackend final : public Backend {
 public:
  BlasBackend() { use_one_blas_thread(); }
  std::string_view name() const override { return "blas"; }
  bool is_available() const override { return true; }
  std::string version() const override {
    // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64": the first two words.
    const std::string config = openblas_get_config();
    const size_t second_space = config.find(' ', config.find(' ') + 1);
    return config.substr(0, second_space);
  }
  std::shared_ptr<const BackendOptions> read_options(const SettingValues& settings) const override {
    auto options = std::make_shared<BlasOptions>();
    options->small_product_limit = settings.get("blas_threshold");
    return options;
  }
  std::span<const OptionSetting> option_settings() const override {
    static constexpr std::string_view kProducts[] = {"MatMul", "Gemm"};
    static constexpr OptionSetting kSettings[] = {{"blas_threshold", kProducts}};
    return kSettings;
  }
  KernelOrReason create_kernel(const KernelRequest& request,
                               std::span<const TensorInfo> outputs) const override {
    const OpSpec& spec = request.op;
    if (!is_default_domain(spec.domain))
      return KernelOrReason::rejected(RefusalKind::no_kernel, "not an ONNX-domain op");
    if (request.alternative > 0)
      return KernelOrReason::rejected(RefusalKind::no_alternative, "BLAS has one implementation per product");
    if (!request.post_ops.empty())
      return KernelOrReason::rejected(RefusalKind::unsupported_fusion, "BLAS kernels do not fuse post-ops");
    if (request.precision != Precision::fp32)
      return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                      "BLAS computes float32 only (bf16 precision runs on oneDNN)");
    const int64_t limit = options_of<BlasOptions>(request).small_product_limit;
    if (spec.op_type == "MatMul") return make_matmul(spec, outputs, limit);
    if (spec.op_type == "Gemm") return make_gemm(spec, outputs, limit);
    return KernelOrReason::rejected(RefusalKind::no_kernel, "no BLAS kernel for " + spec.op_type);
  }
};

}  // namespace

std::string blas_library() {
  return openblas_get_config();
}

std::string blas_threading() {
  const int parallel = openblas_get_parallel();  // 0 sequential, 1 its own pthreads, 2 OpenMP
  const char* model = parallel == 2 ? "OpenMP" : parallel == 1 ? "pthreads" : "sequential";
  return str_cat(model, "; kiln calls it on 1 thread (it gets only products too small to split)");
}

const Backend& blas_backend() {
  static const BlasBackend instance;
  return instance;
}

}  // namespace kiln
