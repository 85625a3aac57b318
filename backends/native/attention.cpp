// Native scaled dot-product attention (ops/attention.h), two kernels users choose between by name:
//   math   per batch entry, the L x S scores in full: scale * Q K^T on the packed GEMM, the mask,
//          a softmax over whole rows, then P V on the GEMM. The unfused graph's arithmetic in one
//          step; the reference the other attention kernels are tested against.
//   flash  per (batch entry, block of queries), key blocks one after another with an online softmax
//          (running row maxima and sums; earlier partial outputs rescaled when the maximum grows),
//          so the scores exist only as one block per thread: memory O(block), not O(L x S). K^T and
//          V are packed for the GEMM once per batch entry and thread (O(S x E)), not per query block.
// Both compute in float32 on the GEMM of gemm.h and the vector exp of softmax_math.h (one variant
// per ISA tier), and split work over batch entries (and for flash query blocks) with parallel_for.
// Under matmul_precision bf16 on a CPU with AVX512_BF16, flash's products run in bf16 with float32
// accumulation (bf16_gemm.h); its softmax and output stay float32.
// A row whose every key is masked gives NaN, as the unfused graph's softmax does.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "backends/base/function_kernel.h"
#include "backends/native/bf16_gemm.h"
#include "backends/native/gemm.h"
#include "backends/native/isa_variant.h"
#include "backends/native/native_backend.h"
#include "backends/native/softmax_math.h"
#include "backends/native/thread_scratch.h"
#include "runtime/parallel.h"
#include "runtime/threads.h"

namespace kiln::native {
namespace {

using namespace softmax_math;

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();
// Keys per flash block: the scores block (query rows x kKeyBlock floats) and a K and a V block of
// kKeyBlock rows stay in L2 for head dims up to 128. One GEMM depth block, so that a key block of
// the prepacked V is a slice of it.
constexpr int64_t kKeyBlock = kGemmDepthBlock;
// Query rows per flash block, before rounding to the GEMM's register block.
constexpr int64_t kQueryBlock = 64;
// math refuses to materialize more scores than this over its threads (bytes).
constexpr int64_t kMathScoresLimit = int64_t{1} << 30;

// ---- masking -----------------------------------------------------------------------------------

// What the kernels read of a mask at run time.
struct MaskView {
  const float* additive = nullptr;
  const uint8_t* boolean = nullptr;
  bool drop_when_true = false;  // masked_fill form: true removes the key
};

MaskView mask_view(const AttentionParams& p, std::span<const Tensor> inputs) {
  MaskView view;
  if (p.mask == AttentionMask::none) return view;
  if (p.mask == AttentionMask::additive) {
    view.additive = inputs[3].data<float>();
  } else {
    view.boolean = static_cast<const uint8_t*>(inputs[3].raw_data());
    view.drop_when_true = p.mask == AttentionMask::drop;
  }
  return view;
}

// Applies the mask and causality to scores[r * ld + c], the scores of queries i0 + r and keys
// j0 + c of batch entry n.
void mask_scores(const AttentionParams& p, const MaskView& mask, int64_t n, int64_t i0, int64_t rows,
                 int64_t j0, int64_t cols, float* scores, int64_t ld) {
  const int64_t base = p.mask == AttentionMask::none ? 0 : p.mask_offsets[static_cast<size_t>(n)];
  for (int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * ld;
    const int64_t i = i0 + r;
    const int64_t offset = base + i * p.mask_row_stride + j0 * p.mask_column_stride;
    if (mask.additive != nullptr) {
      const float* values = mask.additive + offset;
      if (p.mask_column_stride == 1) {
        for (int64_t c = 0; c < cols; ++c) row[c] += values[c];
      } else {
        for (int64_t c = 0; c < cols; ++c) row[c] += values[c * p.mask_column_stride];
      }
    } else if (mask.boolean != nullptr) {
      const uint8_t* values = mask.boolean + offset;
      for (int64_t c = 0; c < cols; ++c) {
        const bool is_true = values[c * p.mask_column_stride] != 0;
        if (is_true == mask.drop_when_true) row[c] = kMinusInfinity;
      }
    }
    // Keys after the query: j0 + c > i.
    if (p.causal) {
      for (int64_t c = std::max<int64_t>(0, i - j0 + 1); c < cols; ++c) row[c] = kMinusInfinity;
    }
  }
}

// ---- online softmax over blocks of rows --------------------------------------------------------

// For each of `rows` rows of `cols` scores (stride ld), with the row's running maximum m and sum l
// over earlier blocks: the new maximum m', the row replaced by e^(s - m'), l = l * e^(m - m') + the
// row's sum, and rescale[r] = e^(m - m') (what earlier partial outputs must be multiplied by). A
// row with no unmasked key so far (m' = -inf) becomes zeros and keeps l = 0.
template <typename S>
[[gnu::always_inline]] inline void online_softmax_rows_simd(float* scores, int64_t rows, int64_t cols,
                                                            int64_t ld, float* maxima, float* sums,
                                                            float* rescale) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * ld;
    const float previous = maxima[r];
    const float maximum = std::max(previous, row_max_simd<S>(row, cols));
    if (maximum == kMinusInfinity) {
      std::fill(row, row + cols, 0.0f);
      rescale[r] = 1.0f;
      continue;
    }
    rescale[r] = previous == kMinusInfinity ? 0.0f : exp_nonpositive(previous - maximum);
    const double sum = exp_sum_simd<S, true>(row, row, cols, maximum);
    sums[r] = static_cast<float>(sums[r] * rescale[r] + sum);
    maxima[r] = maximum;
  }
}

using OnlineSoftmaxFn = void (*)(float*, int64_t, int64_t, int64_t, float*, float*, float*);

__attribute__((target("avx512f"))) void online_softmax_avx512(float* s, int64_t rows, int64_t cols,
                                                              int64_t ld, float* m, float* l,
                                                              float* rescale) {
  online_softmax_rows_simd<Simd<16>>(s, rows, cols, ld, m, l, rescale);
}
__attribute__((target("avx2,fma"))) void online_softmax_avx2(float* s, int64_t rows, int64_t cols, int64_t ld,
                                                             float* m, float* l, float* rescale) {
  online_softmax_rows_simd<Simd<8>>(s, rows, cols, ld, m, l, rescale);
}
void online_softmax_baseline(float* s, int64_t rows, int64_t cols, int64_t ld, float* m, float* l,
                             float* rescale) {
  online_softmax_rows_simd<Simd<4>>(s, rows, cols, ld, m, l, rescale);
}

IsaVariant<OnlineSoftmaxFn> online_softmax_variant() {
  return pick_isa_variant<OnlineSoftmaxFn>(online_softmax_avx512, online_softmax_avx2,
                                           online_softmax_baseline);
}

void scale_rows(float* rows_data, int64_t rows, int64_t cols, int64_t ld, const float* factors) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = rows_data + r * ld;
    const float factor = factors[r];
    for (int64_t c = 0; c < cols; ++c) row[c] *= factor;
  }
}

// math's scores[rows x cols] = scale * Q[i0 .., :] K[j0 .., :]^T for batch entry n.
void score_block(const AttentionParams& p, const float* q, const float* k, int64_t n, int64_t i0,
                 int64_t rows, int64_t j0, int64_t cols, float* scores, int64_t ld) {
  const float* q_rows = q + (n * p.l + i0) * p.e;
  if (p.k_transposed) {
    const float* kt = k + n * p.e * p.s + j0;  // [E, S]
    sgemm(false, false, {rows, cols, p.e}, p.scale, q_rows, p.e, kt, p.s, 0.0f, scores, ld);
  } else {
    const float* k_rows = k + (n * p.s + j0) * p.e;  // [S, E]
    sgemm(false, true, {rows, cols, p.e}, p.scale, q_rows, p.e, k_rows, p.e, 0.0f, scores, ld);
  }
}

// Each kernel's own per-thread buffers, so flash never holds math's L x S.
struct MathScores;
struct MathStatistics;
struct FlashScores;
struct FlashStatistics;
struct FlashPanels;

// ---- math --------------------------------------------------------------------------------------

void run_math(const AttentionParams& p, OnlineSoftmaxFn softmax_rows, std::span<const Tensor> inputs,
              std::span<Tensor> outputs) {
  const float* q = inputs[0].data<float>();
  const float* k = inputs[1].data<float>();
  const float* v = inputs[2].data<float>();
  float* out = outputs[0].data<float>();
  const MaskView mask = mask_view(p, inputs);
  const int64_t cost = p.l * p.s * (p.e + p.ev) * 2;
  parallel_for(0, p.batch, cost, [&](int64_t begin, int64_t end) {
    float* scores = thread_scratch_floats<MathScores>(static_cast<size_t>(p.l * p.s));
    float* statistics = thread_scratch_floats<MathStatistics>(static_cast<size_t>(3 * p.l));
    float* maxima = statistics;
    float* sums = statistics + p.l;
    float* rescale = statistics + 2 * p.l;
    for (int64_t n = begin; n < end; ++n) {
      score_block(p, q, k, n, 0, p.l, 0, p.s, scores, p.s);
      mask_scores(p, mask, n, 0, p.l, 0, p.s, scores, p.s);
      std::fill(maxima, maxima + p.l, kMinusInfinity);
      std::fill(sums, sums + p.l, 0.0f);
      softmax_rows(scores, p.l, p.s, p.s, maxima, sums, rescale);
      // Normalized probabilities first, as Softmax then MatMul compute them (0 / 0 is NaN).
      for (int64_t i = 0; i < p.l; ++i) rescale[i] = 1.0f / sums[i];
      scale_rows(scores, p.l, p.s, p.s, rescale);
      sgemm(false, false, {p.l, p.ev, p.s}, 1.0f, scores, p.s, v + n * p.s * p.ev, p.ev, 0.0f,
            out + n * p.l * p.ev, p.ev);
    }
  });
}

// ---- flash -------------------------------------------------------------------------------------

struct FlashGeometry {
  int64_t query_block = 0;
  int64_t query_blocks = 0;
  int64_t key_block = 0;
};

FlashGeometry flash_geometry(const AttentionParams& p) {
  FlashGeometry g;
  const int64_t mr = gemm_kernel_info().mr;
  // Whole register blocks of the GEMM; not shaped by the thread count, so that each output row is
  // computed the same way on any number of threads (the native backend's determinism).
  g.query_block = std::max<int64_t>(mr, kQueryBlock / mr * mr);
  g.query_blocks = (p.l + g.query_block - 1) / g.query_block;
  g.key_block = std::min(kKeyBlock, p.s);
  return g;
}

// The products of one (batch entry, query block) in float32: K^T and V of the entry packed for the
// GEMM once per thread and entry (PackedB), shared by its query blocks.
class Fp32Products {
 public:
  static size_t scratch_floats(const AttentionParams& p) {
    return static_cast<size_t>(PackedB::floats(p.e, p.s) + PackedB::floats(p.s, p.ev));
  }
  Fp32Products(const AttentionParams& p, const float* k, const float* v, int64_t n, float* storage)
      : p_(p),
        kt_(p.k_transposed ? PackedB(false, p.e, p.s, k + n * p.e * p.s, p.s, storage)
                           : PackedB(true, p.e, p.s, k + n * p.s * p.e, p.e, storage)),
        v_(false, p.s, p.ev, v + n * p.s * p.ev, p.ev, storage + PackedB::floats(p.e, p.s)) {}

  void start_queries(const float* q_rows, int64_t rows) {
    q_rows_ = q_rows;
    rows_ = rows;
  }
  // scores[rows x cols] = scale * Q K^T over keys [j0, j0 + cols).
  void scores(int64_t j0, int64_t cols, float* scores, int64_t ld) const {
    sgemm(false, rows_, q_rows_, p_.e, kt_.slice(0, p_.e, j0, cols), scores, ld, GemmEpilogue{p_.scale});
  }
  // out (+)= P V over keys [j0, j0 + depth): V is packed in whole depth blocks.
  void accumulate(int64_t j0, int64_t depth, const float* probabilities, int64_t ld, float* out,
                  bool first) const {
    sgemm(false, rows_, probabilities, ld, v_.slice(j0, depth, 0, p_.ev), out, p_.ev,
          GemmEpilogue{1.0f, first ? 0.0f : 1.0f});
  }

 private:
  const AttentionParams& p_;
  PackedB kt_;
  PackedB v_;
  const float* q_rows_ = nullptr;
  int64_t rows_ = 0;
};

struct FlashQueryPairs;
struct FlashProbabilityPairs;

// The same in bf16 (matmul_precision bf16 on AVX512_BF16): K^T and V packed once per thread and
// entry as bf16 pairs, the queries once per block, the probabilities once per key block; float32
// accumulation, softmax in float32 (bf16_gemm.h).
class Bf16Products {
 public:
  static size_t scratch_floats(const AttentionParams& p) {
    return static_cast<size_t>(bf16_pairs_b_size(p.e, p.s) + bf16_pairs_b_size(p.s, p.ev));
  }
  Bf16Products(const AttentionParams& p, const float* k, const float* v, int64_t n, float* storage)
      : p_(p),
        kt_(reinterpret_cast<uint32_t*>(storage)),
        v_(reinterpret_cast<uint32_t*>(storage) + bf16_pairs_b_size(p.e, p.s)),
        kt_stride_(bf16_pairs_b_size(2, p.s)),
        v_stride_(bf16_pairs_b_size(2, p.ev)) {
    if (p.k_transposed) {
      pack_bf16_pairs_b(false, p.e, p.s, k + n * p.e * p.s, p.s, kt_);
    } else {
      pack_bf16_pairs_b(true, p.e, p.s, k + n * p.s * p.e, p.e, kt_);
    }
    pack_bf16_pairs_b(false, p.s, p.ev, v + n * p.s * p.ev, p.ev, v_);
  }

  void start_queries(const float* q_rows, int64_t rows) {
    rows_ = rows;
    q_pairs_ = reinterpret_cast<uint32_t*>(
        thread_scratch_floats<FlashQueryPairs>(static_cast<size_t>(rows * ((p_.e + 1) / 2))));
    pack_bf16_pairs_a(rows, p_.e, q_rows, p_.e, q_pairs_);
  }
  void scores(int64_t j0, int64_t cols, float* scores, int64_t ld) const {
    bf16_gemm(rows_, cols, p_.e, q_pairs_, kt_ + j0, kt_stride_, scores, ld, p_.scale, 0.0f);
  }
  void accumulate(int64_t j0, int64_t depth, const float* probabilities, int64_t ld, float* out,
                  bool first) const {
    uint32_t* pairs = reinterpret_cast<uint32_t*>(
        thread_scratch_floats<FlashProbabilityPairs>(static_cast<size_t>(rows_ * ((depth + 1) / 2))));
    pack_bf16_pairs_a(rows_, depth, probabilities, ld, pairs);
    bf16_gemm(rows_, p_.ev, depth, pairs, v_ + j0 / 2 * v_stride_, v_stride_, out, p_.ev, 1.0f,
              first ? 0.0f : 1.0f);
  }

 private:
  const AttentionParams& p_;
  uint32_t* kt_;
  uint32_t* v_;
  int64_t kt_stride_;
  int64_t v_stride_;
  uint32_t* q_pairs_ = nullptr;
  int64_t rows_ = 0;
};

// One (batch entry, query block): the output rows written directly, rescaled as blocks of keys come.
template <typename Products>
void flash_task(const AttentionParams& p, const FlashGeometry& g, OnlineSoftmaxFn softmax_rows,
                const float* q, Products& products, const MaskView& mask, int64_t n, int64_t i0, float* out) {
  const int64_t rows = std::min(g.query_block, p.l - i0);
  float* scores = thread_scratch_floats<FlashScores>(static_cast<size_t>(g.query_block * g.key_block));
  float* statistics = thread_scratch_floats<FlashStatistics>(static_cast<size_t>(3 * g.query_block));
  float* maxima = statistics;
  float* sums = statistics + g.query_block;
  float* rescale = statistics + 2 * g.query_block;
  std::fill(maxima, maxima + rows, kMinusInfinity);
  std::fill(sums, sums + rows, 0.0f);
  products.start_queries(q + (n * p.l + i0) * p.e, rows);
  float* out_rows = out + (n * p.l + i0) * p.ev;
  // Causal: keys after the block's last query are masked for all of its rows.
  const int64_t key_end = p.causal ? std::min(p.s, i0 + rows) : p.s;
  bool first = true;
  for (int64_t j0 = 0; j0 < key_end; j0 += g.key_block) {
    const int64_t cols = std::min(g.key_block, key_end - j0);
    products.scores(j0, cols, scores, g.key_block);
    mask_scores(p, mask, n, i0, rows, j0, cols, scores, g.key_block);
    softmax_rows(scores, rows, cols, g.key_block, maxima, sums, rescale);
    if (!first) scale_rows(out_rows, rows, p.ev, p.ev, rescale);
    // V is packed in whole depth blocks: a block cut short by causality multiplies zeros past `cols`.
    const int64_t depth = std::min(g.key_block, p.s - j0);
    for (int64_t r = 0; r < rows && depth > cols; ++r)
      std::fill(scores + r * g.key_block + cols, scores + r * g.key_block + depth, 0.0f);
    products.accumulate(j0, depth, scores, g.key_block, out_rows, first);
    first = false;
  }
  for (int64_t r = 0; r < rows; ++r) rescale[r] = 1.0f / sums[r];
  scale_rows(out_rows, rows, p.ev, p.ev, rescale);
}

template <typename Products>
void run_flash(const AttentionParams& p, OnlineSoftmaxFn softmax_rows, std::span<const Tensor> inputs,
               std::span<Tensor> outputs) {
  const FlashGeometry g = flash_geometry(p);
  const float* q = inputs[0].data<float>();
  const float* k = inputs[1].data<float>();
  const float* v = inputs[2].data<float>();
  float* out = outputs[0].data<float>();
  const MaskView mask = mask_view(p, inputs);
  const int64_t tasks = p.batch * g.query_blocks;
  const int64_t cost = g.query_block * p.s * (p.e + p.ev) * 2;
  parallel_for(0, tasks, cost, [&](int64_t begin, int64_t end) {
    // Tasks are numbered batch entry first, so a thread's share packs each entry's keys once.
    float* panels = thread_scratch_floats<FlashPanels>(Products::scratch_floats(p));
    std::optional<Products> products;
    int64_t packed_entry = -1;
    for (int64_t task = begin; task < end; ++task) {
      // Under causality later query blocks have more keys: alternate late and early blocks so that
      // each thread's contiguous share of tasks holds a mix.
      const int64_t n = task / g.query_blocks;
      const int64_t t = task % g.query_blocks;
      const int64_t block = t % 2 == 0 ? t / 2 : g.query_blocks - 1 - t / 2;
      if (n != packed_entry) {
        products.emplace(p, k, v, n, panels);
        packed_entry = n;
      }
      flash_task(p, g, softmax_rows, q, *products, mask, n, block * g.query_block, out);
    }
  });
}

}  // namespace

KernelOrReason create_attention_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs) {
  const AttentionParams p = attention_params(request.op);
  if (p.s == 0 || p.batch * p.l * p.ev == 0) {
    // No keys: softmax over nothing times nothing, zeros as the exported MatMul gives (or no output).
    return make_kernel("native:attention_without_keys", [](std::span<const Tensor>, std::span<Tensor> out) {
      std::fill_n(out[0].data<float>(), out[0].numel(), 0.0f);
    });
  }
  const IsaVariant<OnlineSoftmaxFn> softmax_rows = online_softmax_variant();
  KernelOrReason offer;
  if (request.variant == "math") {
    // Each thread running a batch entry holds its L x S scores (and keeps the buffer for later runs).
    const int64_t threads = std::min<int64_t>(p.batch, intra_op_threads());
    const int64_t scores_bytes = p.l * p.s * static_cast<int64_t>(sizeof(float)) * threads;
    if (scores_bytes > kMathScoresLimit) {
      return KernelOrReason::rejected(
          RefusalKind::above_threshold,
          str_cat("the L x S = ", p.l, " x ", p.s, " scores on ", threads, " thread(s) (", scores_bytes >> 20,
                  " MiB) exceed math's ", kMathScoresLimit >> 20, " MiB"));
    }
    offer = make_kernel(str_cat("native:math_attention:", softmax_rows.isa),
                        [p, fn = softmax_rows.fn](std::span<const Tensor> in, std::span<Tensor> out) {
                          run_math(p, fn, in, out);
                        });
  } else if (request.variant == "flash") {
    if (request.precision == Precision::bf16 && bf16_gemm_available()) {
      return make_kernel(str_cat("native:flash_attention_bf16:", softmax_rows.isa),
                         [p, fn = softmax_rows.fn](std::span<const Tensor> in, std::span<Tensor> out) {
                           run_flash<Bf16Products>(p, fn, in, out);
                         });
    }
    offer = make_kernel(str_cat("native:flash_attention:", softmax_rows.isa),
                        [p, fn = softmax_rows.fn](std::span<const Tensor> in, std::span<Tensor> out) {
                          run_flash<Fp32Products>(p, fn, in, out);
                        });
  } else {
    return KernelOrReason::rejected(RefusalKind::no_kernel,
                                    str_cat("no native attention kernel named '", request.variant, "'"));
  }
  if (request.precision == Precision::bf16) {
    offer.note = request.variant == "math"
                     ? "precision bf16 requested, float32 used: math is the float32 reference"
                     : "precision bf16 requested, float32 used: the ISA in effect has no bf16 dot products";
  }
  return offer;
}

}  // namespace kiln::native
