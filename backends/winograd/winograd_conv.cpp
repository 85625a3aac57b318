#include "backends/winograd/winograd_conv.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "backends/native/isa_variant.h"
#include "backends/native/simd.h"
#include "backends/native/thread_scratch.h"
#include "backends/winograd/transforms.h"
#include "core/error.h"
#include "runtime/parallel.h"
#include "runtime/threads.h"

namespace kiln::winograd {
namespace {

// A task's transformed input and products together stay under this, so the products read the
// input from L2 and the output transform reads the products from L2 (L2 is 1-2 MiB per core on
// the machines measured; half leaves room for the filters streaming through).
constexpr int64_t kBlockBytes = 512 * 1024;
// Filters up to this size stay in L2 across blocks; larger ones are read from memory once per
// block, so their blocks are made as large as kLargeBlockBytes allows and the output channels are
// split between the threads instead.
constexpr int64_t kSmallFilterBytes = 1024 * 1024;
constexpr int64_t kLargeBlockBytes = 2 * 1024 * 1024;
// Row strides of the per-task matrices are multiples of this many floats (one zmm).
constexpr int64_t kRowAlignment = 16;

int64_t ceil_div(int64_t value, int64_t divisor) {
  return (value + divisor - 1) / divisor;
}
int64_t round_up(int64_t value, int64_t multiple) {
  return ceil_div(value, multiple) * multiple;
}

template <typename T>
[[gnu::always_inline]] inline T load_value(const float* src) {
  T value;
  std::memcpy(&value, src, sizeof(T));
  return value;
}
template <typename T>
[[gnu::always_inline]] inline void store_value(float* dst, T value) {
  std::memcpy(dst, &value, sizeof(T));
}

// Where one tile's inputs and outputs are: tile index -> image, top-left output and the distance
// between the tile's elements (the dilation).
struct TileGrid {
  TileAxis h;
  TileAxis w;
  int m = 0;
  int64_t step_h = 1;
  int64_t step_w = 1;
  void locate(int64_t tile, int64_t& image, int64_t& row, int64_t& column) const {
    const int64_t per_image = h.tiles() * w.tiles();
    image = tile / per_image;
    row = origin(tile % per_image / w.tiles(), h, step_h);
    column = origin(tile % w.tiles(), w, step_w);
  }
  // Phase p's i-th tile starts at output p + i m d.
  int64_t origin(int64_t index, const TileAxis& axis, int64_t step) const {
    return index / axis.per_phase + index % axis.per_phase * m * step;
  }
};

// What the transforms of one task need.
struct TaskArgs {
  const ConvShape* shape;
  TileGrid grid;
  int64_t first_tile;
  int64_t tile_count;
  float* matrices;          // the task's transformed inputs (V) or products (M): alpha^2 of them
  int64_t position_stride;  // floats between positions' matrices
  int64_t ld;               // floats between tiles' rows of one matrix
  // Input transform:
  const float* x;
  const float* zeros;  // in_channels zeros, read where a tile overhangs the input
  // Output transform:
  int64_t k0;
  int64_t k_count;
  const float* bias;  // null: none
  const OutputStep* steps;
  int64_t step_count;
  const float* residual;
  float* y;
};

// V[position][tile][c] = (B^T d B)[position] for channels c .. c + lanes(T) of one tile, whose
// alpha x alpha input pixels start at src[i][j].
template <int kM, typename T>
[[gnu::always_inline]] inline void input_tile(const float* const* src, int64_t c, float* dst,
                                              int64_t position_stride) {
  using F = Transforms<kM>;
  constexpr int kA = F::kAlpha;
  T d[kA][kA];
  T column[kA];
  T transformed[kA];
#pragma GCC unroll 8
  for (int i = 0; i < kA; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < kA; ++j) d[i][j] = load_value<T>(src[i * kA + j] + c);
  }
  // Columns (B^T d), then rows ((B^T d) B).
#pragma GCC unroll 8
  for (int j = 0; j < kA; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < kA; ++i) column[i] = d[i][j];
    F::input(column, transformed);
#pragma GCC unroll 8
    for (int i = 0; i < kA; ++i) d[i][j] = transformed[i];
  }
#pragma GCC unroll 8
  for (int i = 0; i < kA; ++i) {
    F::input(d[i], transformed);
#pragma GCC unroll 8
    for (int j = 0; j < kA; ++j) store_value(dst + (i * kA + j) * position_stride, transformed[j]);
  }
}

template <int kM, typename Vec>
[[gnu::always_inline]] inline void input_transform_body(const TaskArgs& a) {
  constexpr int kA = kM + 2;
  constexpr int64_t kLanes = sizeof(Vec) / sizeof(float);
  const ConvShape& s = *a.shape;
  const int64_t channels = s.in_channels;
  const float* src[kA * kA];
  for (int64_t t = 0; t < a.tile_count; ++t) {
    int64_t image, row, column;
    a.grid.locate(a.first_tile + t, image, row, column);
    for (int i = 0; i < kA; ++i) {
      const int64_t ih = row - s.pad_top + i * a.grid.step_h;
      for (int j = 0; j < kA; ++j) {
        const int64_t iw = column - s.pad_left + j * a.grid.step_w;
        const bool inside = ih >= 0 && ih < s.in_h && iw >= 0 && iw < s.in_w;
        src[i * kA + j] = inside ? a.x + ((image * s.in_h + ih) * s.in_w + iw) * channels : a.zeros;
      }
    }
    float* dst = a.matrices + t * a.ld;
    int64_t c = 0;
    for (; c + kLanes <= channels; c += kLanes) input_tile<kM, Vec>(src, c, dst + c, a.position_stride);
    for (; c < channels; ++c) input_tile<kM, float>(src, c, dst + c, a.position_stride);
  }
}

template <typename T>
[[gnu::always_inline]] inline T apply_steps(T value, const TaskArgs& a, const float* residual) {
  for (int64_t i = 0; i < a.step_count; ++i) {
    const OutputStep& step = a.steps[i];
    const T zero{};
    switch (step.kind) {
      case PostOp::Kind::relu:
        value = value > zero ? value : zero;
        break;
      case PostOp::Kind::leaky_relu:
        value = value < zero ? value * step.alpha : value;
        break;
      case PostOp::Kind::clip: {
        const T low = zero + step.alpha;
        const T high = zero + step.beta;
        value = value < low ? low : value;
        value = value > high ? high : value;
        break;
      }
      case PostOp::Kind::sum:
        value += load_value<T>(residual);
        break;
      default:
        break;
    }
  }
  return value;
}

// Outputs k .. k + lanes(T) of one tile from its products, with the bias and the steps.
template <int kM, typename T>
[[gnu::always_inline]] inline void output_tile(const TaskArgs& a, const float* products, int64_t k,
                                               float* const* out, const float* const* residual) {
  using F = Transforms<kM>;
  constexpr int kA = F::kAlpha;
  T s[kA][kA];
  T half[kM][kA];
  T column[kA];
  T result[kM];
#pragma GCC unroll 8
  for (int i = 0; i < kA; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < kA; ++j) s[i][j] = load_value<T>(products + (i * kA + j) * a.position_stride + k);
  }
#pragma GCC unroll 8
  for (int j = 0; j < kA; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < kA; ++i) column[i] = s[i][j];
    F::output(column, result);
#pragma GCC unroll 8
    for (int r = 0; r < kM; ++r) half[r][j] = result[r];
  }
  const T bias = a.bias != nullptr ? load_value<T>(a.bias + a.k0 + k) : T{};
#pragma GCC unroll 8
  for (int r = 0; r < kM; ++r) {
    F::output(half[r], result);
#pragma GCC unroll 8
    for (int q = 0; q < kM; ++q) {
      float* dst = out[r * kM + q];
      if (dst == nullptr) continue;  // past the output's edge
      const float* add = residual[r * kM + q];
      store_value(dst + k, apply_steps(result[q] + bias, a, add != nullptr ? add + k : nullptr));
    }
  }
}

template <int kM, typename Vec>
[[gnu::always_inline]] inline void output_transform_body(const TaskArgs& a) {
  constexpr int64_t kLanes = sizeof(Vec) / sizeof(float);
  const ConvShape& s = *a.shape;
  float* out[kM * kM];
  const float* residual[kM * kM];
  for (int64_t t = 0; t < a.tile_count; ++t) {
    int64_t image, row, column;
    a.grid.locate(a.first_tile + t, image, row, column);
    for (int r = 0; r < kM; ++r) {
      for (int q = 0; q < kM; ++q) {
        const int64_t oh = row + r * a.grid.step_h;
        const int64_t ow = column + q * a.grid.step_w;
        const bool inside = oh < s.out_h && ow < s.out_w;
        const int64_t offset = ((image * s.out_h + oh) * s.out_w + ow) * s.out_channels + a.k0;
        out[r * kM + q] = inside ? a.y + offset : nullptr;
        residual[r * kM + q] = inside && a.residual != nullptr ? a.residual + offset : nullptr;
      }
    }
    const float* products = a.matrices + t * a.ld;
    int64_t k = 0;
    for (; k + kLanes <= a.k_count; k += kLanes) output_tile<kM, Vec>(a, products, k, out, residual);
    for (; k < a.k_count; ++k) output_tile<kM, float>(a, products, k, out, residual);
  }
}

using TransformFn = void (*)(const TaskArgs&);

#define KILN_WINOGRAD_VARIANTS(suffix, target_attribute, vec)          \
  template <int kM>                                                    \
  target_attribute void input_transform_##suffix(const TaskArgs& a) {  \
    input_transform_body<kM, vec>(a);                                  \
  }                                                                    \
  template <int kM>                                                    \
  target_attribute void output_transform_##suffix(const TaskArgs& a) { \
    output_transform_body<kM, vec>(a);                                 \
  }
KILN_WINOGRAD_VARIANTS(avx512, __attribute__((target("avx512f,avx512vl,fma"))), native::Simd<16>::F)
KILN_WINOGRAD_VARIANTS(avx2, __attribute__((target("avx2,fma"))), native::Simd<8>::F)
KILN_WINOGRAD_VARIANTS(baseline, , native::Simd<4>::F)
#undef KILN_WINOGRAD_VARIANTS

struct TransformPair {
  TransformFn input;
  TransformFn output;
};

template <int kM>
native::IsaVariant<TransformPair> transforms_for_cpu() {
  return native::pick_isa_variant<TransformPair>(
      {input_transform_avx512<kM>, output_transform_avx512<kM>},
      {input_transform_avx2<kM>, output_transform_avx2<kM>},
      {input_transform_baseline<kM>, output_transform_baseline<kM>});
}

TransformPair transforms_for(int tile) {
  return tile == 4 ? transforms_for_cpu<4>().fn : transforms_for_cpu<2>().fn;
}

struct InputScratch;
struct ProductScratch;
struct ZeroScratch;

// How many chunks the output channels are split into: the fewest that keep every thread busy,
// weighing a chunk's products against the input transform each task repeats.
int64_t choose_channel_chunks(int64_t blocks, int64_t out_channels, int64_t threads) {
  const int64_t nr = native::gemm_kernel_info().nr;
  const int64_t max_chunks = std::max<int64_t>(1, std::min<int64_t>(8, ceil_div(out_channels, nr)));
  int64_t best = 1;
  double best_cost = 0;
  for (int64_t chunks = 1; chunks <= max_chunks; ++chunks) {
    const int64_t width = round_up(ceil_div(out_channels, chunks), nr);
    const int64_t rounds = ceil_div(blocks * chunks, threads);
    const double cost = static_cast<double>(rounds) * static_cast<double>(width + 16);
    if (chunks == 1 || cost < best_cost * 0.97) {
      best = chunks;
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace

TileAxis tile_axis(int64_t outputs, int64_t dilation, int tile) {
  // Phases past the output (dilation wider than it) have no outputs and get no tiles.
  const int64_t phases = std::max<int64_t>(1, std::min(dilation, outputs));
  return {phases, ceil_div(ceil_div(outputs, dilation), tile)};
}

bool output_transform_applies(PostOp::Kind kind) {
  return kind == PostOp::Kind::relu || kind == PostOp::Kind::leaky_relu || kind == PostOp::Kind::clip ||
         kind == PostOp::Kind::sum;
}

const char* transforms_isa() {
  return transforms_for_cpu<4>().isa;
}

TransformedFilters::TransformedFilters(int tile, int64_t in_channels, int64_t out_channels,
                                       const float* weights)
    : tile_(tile), in_channels_(in_channels), out_channels_(out_channels) {
  KILN_CHECK(tile == 2 || tile == 4, invalid_argument, "Winograd tile F(", tile, "x", tile,
             ", 3x3) is not built");
  const int alpha = tile + 2;
  const int positions = alpha * alpha;
  const int64_t per_position = native::PackedB::floats(in_channels, out_channels);
  storage_ =
      AllocatedBlock(static_cast<size_t>(positions * per_position) * sizeof(float), "winograd filters");
  // G g G^T per (k, c) in double, into row-major C x K matrices, one per position (k innermost, so
  // each position's matrix is written sequentially).
  std::array<std::array<double, 3>, 6> g_matrix{};
  for (int i = 0; i < alpha; ++i) g_matrix[i] = tile == 4 ? Transforms<4>::kG[i] : Transforms<2>::kG[i];
  std::vector<float> matrices(static_cast<size_t>(positions * in_channels * out_channels));
  for (int64_t c = 0; c < in_channels; ++c) {
    for (int64_t k = 0; k < out_channels; ++k) {
      const float* g = weights + (k * in_channels + c) * 9;
      double gg[6][3];  // G g: alpha x 3
      for (int i = 0; i < alpha; ++i) {
        for (int b = 0; b < 3; ++b)
          gg[i][b] = g_matrix[i][0] * g[b] + g_matrix[i][1] * g[3 + b] + g_matrix[i][2] * g[6 + b];
      }
      float* out = matrices.data() + c * out_channels + k;
      for (int i = 0; i < alpha; ++i) {
        for (int j = 0; j < alpha; ++j) {
          const double value =
              gg[i][0] * g_matrix[j][0] + gg[i][1] * g_matrix[j][1] + gg[i][2] * g_matrix[j][2];
          out[(i * alpha + j) * in_channels * out_channels] = static_cast<float>(value);
        }
      }
    }
  }
  float* packed = static_cast<float*>(storage_.data());
  positions_.reserve(static_cast<size_t>(positions));
  for (int p = 0; p < positions; ++p) {
    positions_.emplace_back(false, in_channels, out_channels,
                            matrices.data() + p * in_channels * out_channels, out_channels,
                            packed + p * per_position);
  }
}

TileBlocking tile_blocking(const ConvShape& shape, int tile) {
  const int64_t alpha = tile + 2;
  const int64_t mr = native::gemm_kernel_info().mr;
  const int64_t tiles = shape.batch * tile_axis(shape.out_h, shape.dilation_h, tile).tiles() *
                        tile_axis(shape.out_w, shape.dilation_w, tile).tiles();
  const int64_t in_ld = round_up(shape.in_channels, kRowAlignment);
  const int64_t out_ld = round_up(shape.out_channels, kRowAlignment);
  const int64_t filter_bytes = alpha * alpha *
                               native::PackedB::floats(shape.in_channels, shape.out_channels) *
                               static_cast<int64_t>(sizeof(float));
  TileBlocking blocking;
  blocking.filters_from_memory = filter_bytes > kSmallFilterBytes;
  int64_t blocks = 1;
  if (!blocking.filters_from_memory) {
    // The filters stay in L2 while every block reads them: blocks small enough for their
    // transformed input and products to stay there too.
    const int64_t per_tile = alpha * alpha * (in_ld + out_ld) * static_cast<int64_t>(sizeof(float));
    blocks = std::max<int64_t>(1, ceil_div(tiles, std::max<int64_t>(mr, kBlockBytes / per_tile / mr * mr)));
  } else {
    // Every block streams the filters from memory: as few blocks as keep a task's input and its
    // share of the products (half the channels) within kLargeBlockBytes.
    const int64_t per_tile = alpha * alpha * (in_ld + out_ld / 2) * static_cast<int64_t>(sizeof(float));
    blocks = std::max<int64_t>(1, ceil_div(tiles * per_tile, kLargeBlockBytes));
  }
  // Whole micro-kernel row blocks, so the products compute no padding rows but the last block's.
  blocking.tile_block =
      std::max<int64_t>(1, std::min(round_up(ceil_div(tiles, blocks), mr), round_up(tiles, mr)));
  blocking.blocks = std::max<int64_t>(1, ceil_div(tiles, blocking.tile_block));
  return blocking;
}

WinogradConv::WinogradConv(std::shared_ptr<const TransformedFilters> filters, const ConvShape& shape,
                           std::vector<float> bias, std::vector<OutputStep> steps)
    : filters_(std::move(filters)),
      shape_(shape),
      bias_(std::move(bias)),
      steps_(std::move(steps)),
      blocking_(tile_blocking(shape_, filters_->tile())) {}

void WinogradConv::run(const float* x, const float* residual, float* y) const {
  const int tile = filters_->tile();
  const TileGrid grid{tile_axis(shape_.out_h, shape_.dilation_h, tile),
                      tile_axis(shape_.out_w, shape_.dilation_w, tile), tile, shape_.dilation_h,
                      shape_.dilation_w};
  const int64_t tiles = shape_.batch * grid.h.tiles() * grid.w.tiles();
  if (tiles == 0 || shape_.out_channels == 0) return;
  const int64_t alpha = filters_->alpha();
  const int positions = static_cast<int>(alpha * alpha);
  const int64_t tile_block = blocking_.tile_block;
  const int64_t blocks = blocking_.blocks;
  const int64_t chunks = choose_channel_chunks(blocks, shape_.out_channels, intra_op_threads());
  const int64_t nr = native::gemm_kernel_info().nr;
  const int64_t chunk_width = round_up(ceil_div(shape_.out_channels, chunks), nr);
  const int64_t input_ld = round_up(shape_.in_channels, kRowAlignment);
  const int64_t product_ld = round_up(chunk_width, kRowAlignment);
  const TransformPair transforms = transforms_for(filters_->tile());
  const int64_t task_cost = 2 * tile_block * positions * shape_.in_channels * chunk_width;

  parallel_for(0, blocks * chunks, task_cost, [&](int64_t begin, int64_t end) {
    const int64_t input_stride = tile_block * input_ld;
    const int64_t product_stride = tile_block * product_ld;
    float* inputs =
        native::thread_scratch_floats<InputScratch>(static_cast<size_t>(positions * input_stride));
    float* products =
        native::thread_scratch_floats<ProductScratch>(static_cast<size_t>(positions * product_stride));
    float* zeros = native::thread_scratch_floats<ZeroScratch>(static_cast<size_t>(input_ld));
    std::fill(zeros, zeros + input_ld, 0.0f);
    int64_t transformed_block = -1;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t block = task / chunks;
      const int64_t first_tile = block * tile_block;
      const int64_t tile_count = std::min(tile_block, tiles - first_tile);
      TaskArgs args{};
      args.shape = &shape_;
      args.grid = grid;
      args.first_tile = first_tile;
      args.tile_count = tile_count;
      // A thread's consecutive tasks share their block: its input is transformed once.
      if (block != transformed_block) {
        args.matrices = inputs;
        args.position_stride = input_stride;
        args.ld = input_ld;
        args.x = x;
        args.zeros = zeros;
        transforms.input(args);
        transformed_block = block;
      }
      const int64_t k0 = task % chunks * chunk_width;
      if (k0 >= shape_.out_channels) continue;
      const int64_t k_count = std::min(chunk_width, shape_.out_channels - k0);
      for (int p = 0; p < positions; ++p) {
        const native::PackedB filter = filters_->position(p).slice(0, shape_.in_channels, k0, k_count);
        native::sgemm_rows(inputs + p * input_stride, input_ld, tile_count, shape_.in_channels, filter,
                           filter.columns(), products + p * product_stride, product_ld,
                           native::GemmEpilogue{});
      }
      args.matrices = products;
      args.position_stride = product_stride;
      args.ld = product_ld;
      args.k0 = k0;
      args.k_count = k_count;
      args.bias = bias_.empty() ? nullptr : bias_.data();
      args.steps = steps_.data();
      args.step_count = static_cast<int64_t>(steps_.size());
      args.residual = residual;
      args.y = y;
      transforms.output(args);
    }
  });
}

}  // namespace kiln::winograd
