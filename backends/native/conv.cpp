// Native Conv (float32). Per image and group, an im2col matrix (no copy for pointwise convs)
// multiplied by the weights on the native sgemm, with the bias added as the product is written;
// constant weights are packed for the sgemm once, at plan time. Depthwise convs (one input and one
// output channel per group) run a direct loop, where im2col would cost more than the product.
// Convs whose taps mostly land in the padding run one product per tap over its live positions.
#include "ops/conv.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "backends/base/function_kernel.h"
#include "backends/native/gemm.h"
#include "backends/native/isa_variant.h"
#include "backends/native/native_backend.h"
#include "backends/native/spatial3d.h"
#include "backends/native/thread_scratch.h"
#include "runtime/parallel.h"
#include "runtime/threads.h"

namespace kiln::native {
namespace {

// The calling thread's im2col buffer.
struct Im2colScratch;
float* im2col_scratch(size_t count) {
  return thread_scratch_floats<Im2colScratch>(count);
}

// Rows of `cols` are (channel, kd, kh, kw); columns are output positions. Out-of-image taps are 0.
void im2col(const float* src, int64_t channels, const Window3d& w, float* cols) {
  const int64_t positions = w.out_size();
  const int64_t taps = w.kernel_size();
  parallel_for(0, channels * taps, positions, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t c = row / taps;
      const int64_t tap = row % taps;
      const int64_t kd = tap / (w.kernel[1] * w.kernel[2]);
      const int64_t kh = (tap / w.kernel[2]) % w.kernel[1];
      const int64_t kw = tap % w.kernel[2];
      const float* channel = src + c * w.in_size();
      float* dst = cols + row * positions;
      int64_t d_lo, d_hi, h_lo, h_hi, w_lo, w_hi;
      valid_output_range(w.in[0], w.out[0], w.stride[0], w.pad[0], kd * w.dilation[0], d_lo, d_hi);
      valid_output_range(w.in[1], w.out[1], w.stride[1], w.pad[1], kh * w.dilation[1], h_lo, h_hi);
      valid_output_range(w.in[2], w.out[2], w.stride[2], w.pad[2], kw * w.dilation[2], w_lo, w_hi);
      // Zero only what the copies below leave untouched when the tap is inside for every position.
      const bool full = d_lo == 0 && d_hi == w.out[0] && h_lo == 0 && h_hi == w.out[1] && w_lo == 0 &&
                        w_hi == w.out[2];
      if (!full) std::memset(dst, 0, static_cast<size_t>(positions) * sizeof(float));
      for (int64_t od = d_lo; od < d_hi; ++od) {
        const int64_t id = od * w.stride[0] - w.pad[0] + kd * w.dilation[0];
        for (int64_t oh = h_lo; oh < h_hi; ++oh) {
          const int64_t ih = oh * w.stride[1] - w.pad[1] + kh * w.dilation[1];
          const float* in_row = channel + (id * w.in[1] + ih) * w.in[2] - w.pad[2] + kw * w.dilation[2];
          float* out_row = dst + (od * w.out[1] + oh) * w.out[2];
          if (w.stride[2] == 1) {
            std::memcpy(out_row + w_lo, in_row + w_lo, static_cast<size_t>(w_hi - w_lo) * sizeof(float));
          } else {
            for (int64_t ow = w_lo; ow < w_hi; ++ow) out_row[ow] = in_row[ow * w.stride[2]];
          }
        }
      }
    }
  });
}

// Depthwise: each output channel reads one input channel with its own kernel. Each input plane is
// first copied into a zero-bordered scratch plane, so the taps need no bounds checks. Outputs are
// computed kDepthwiseBlock columns at a time in a small accumulator array, which GCC vectorizes,
// and each block reads past the row's end into zeroed slack instead of taking a scalar tail. The
// common 3x3 kernels at stride 1 and 2 get compile-time sizes so their taps unroll; the loops are
// compiled for AVX-512, AVX2 and baseline x86-64 and the widest the CPU runs is picked at start-up.
constexpr int64_t kDepthwiseBlock = 16;

struct DepthwiseGeometry {
  Window3d w;
  int64_t padded_d = 0;  // scratch plane dims: every window fits inside
  int64_t padded_h = 0;
  int64_t padded_w = 0;
  int64_t row_stride = 0;  // padded_w plus zeroed slack for the last block of a row

  explicit DepthwiseGeometry(const Window3d& window) : w(window) {
    padded_d = (w.out[0] - 1) * w.stride[0] + (w.kernel[0] - 1) * w.dilation[0] + 1;
    padded_h = (w.out[1] - 1) * w.stride[1] + (w.kernel[1] - 1) * w.dilation[1] + 1;
    padded_w = (w.out[2] - 1) * w.stride[2] + (w.kernel[2] - 1) * w.dilation[2] + 1;
    row_stride = padded_w + kDepthwiseBlock * w.stride[2];
  }
  int64_t padded_size() const { return padded_d * padded_h * row_stride; }
};

// Copies one input plane into `padded` (padded_d x padded_h rows of row_stride), shifted by the
// begin pads, zeros around it.
void pad_plane(const float* src, const DepthwiseGeometry& g, float* padded) {
  const Window3d& w = g.w;
  for (int64_t pd = 0; pd < g.padded_d; ++pd) {
    const int64_t id = pd - w.pad[0];
    for (int64_t ph = 0; ph < g.padded_h; ++ph) {
      const int64_t ih = ph - w.pad[1];
      float* dst = padded + (pd * g.padded_h + ph) * g.row_stride;
      if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1]) {
        std::fill(dst, dst + g.row_stride, 0.0f);
        continue;
      }
      const float* row = src + (id * w.in[1] + ih) * w.in[2];
      const int64_t lo = std::min(w.pad[2], g.padded_w);                  // first column inside
      const int64_t hi = std::clamp(w.pad[2] + w.in[2], lo, g.padded_w);  // past the last one
      std::fill(dst, dst + lo, 0.0f);
      std::memcpy(dst + lo, row + (lo - w.pad[2]), static_cast<size_t>(hi - lo) * sizeof(float));
      std::fill(dst + hi, dst + g.row_stride, 0.0f);
    }
  }
}

// One output plane from its padded input plane. kKernel and kStride, when nonzero, fix a 2-D
// kernel's size and stride (square, no dilation) at compile time; 0 reads them from the geometry.
template <int64_t kKernel, int64_t kStride>
[[gnu::always_inline]] inline void depthwise_plane_body(const float* __restrict padded, const float* __restrict weights,
                                                        float bias, float* __restrict dst, const DepthwiseGeometry& g) {
  const Window3d& w = g.w;
  const int64_t kernel_h = kKernel != 0 ? kKernel : w.kernel[1];
  const int64_t kernel_w = kKernel != 0 ? kKernel : w.kernel[2];
  const int64_t dilation_h = kKernel != 0 ? 1 : w.dilation[1];
  const int64_t dilation_w = kKernel != 0 ? 1 : w.dilation[2];
  const int64_t stride_h = kStride != 0 ? kStride : w.stride[1];
  const int64_t stride_w = kStride != 0 ? kStride : w.stride[2];
  for (int64_t od = 0; od < w.out[0]; ++od) {
    for (int64_t oh = 0; oh < w.out[1]; ++oh) {
      float* out = dst + (od * w.out[1] + oh) * w.out[2];
      for (int64_t ow0 = 0; ow0 < w.out[2]; ow0 += kDepthwiseBlock) {
        float acc[kDepthwiseBlock];
        for (int64_t i = 0; i < kDepthwiseBlock; ++i) acc[i] = bias;
        for (int64_t kd = 0; kd < w.kernel[0]; ++kd) {
          const float* plane = padded + (od * w.stride[0] + kd * w.dilation[0]) * g.padded_h * g.row_stride;
          const float* k = weights + kd * kernel_h * kernel_w;
#pragma GCC unroll 8
          for (int64_t kh = 0; kh < kernel_h; ++kh) {
            const float* row = plane + (oh * stride_h + kh * dilation_h) * g.row_stride + ow0 * stride_w;
#pragma GCC unroll 8
            for (int64_t kw = 0; kw < kernel_w; ++kw) {
              const float weight = k[kh * kernel_w + kw];
              const float* src = row + kw * dilation_w;
              for (int64_t i = 0; i < kDepthwiseBlock; ++i) acc[i] += weight * src[i * stride_w];
            }
          }
        }
        // A whole block may be stored while it stays inside the plane: columns past this row's end
        // belong to later rows of the plane, which are written after this one.
        if (out + ow0 + kDepthwiseBlock <= dst + w.out_size()) {
          for (int64_t i = 0; i < kDepthwiseBlock; ++i) out[ow0 + i] = acc[i];
        } else {
          const int64_t valid = std::min(kDepthwiseBlock, w.out[2] - ow0);
          for (int64_t i = 0; i < valid; ++i) out[ow0 + i] = acc[i];
        }
      }
    }
  }
}

using DepthwisePlaneFn = void (*)(const float*, const float*, float, float*, const DepthwiseGeometry&);

#define KILN_DEPTHWISE_VARIANTS(suffix, target_attribute)                                                        \
  template <int64_t kKernel, int64_t kStride>                                                                    \
  target_attribute void depthwise_plane_##suffix(const float* padded, const float* weights, float bias, float* dst, \
                                                 const DepthwiseGeometry& g) {                                   \
    depthwise_plane_body<kKernel, kStride>(padded, weights, bias, dst, g);                                       \
  }
KILN_DEPTHWISE_VARIANTS(avx512, __attribute__((target("avx512f,avx512vl,fma"))))
KILN_DEPTHWISE_VARIANTS(avx2, __attribute__((target("avx2,fma"))))
KILN_DEPTHWISE_VARIANTS(baseline, )
#undef KILN_DEPTHWISE_VARIANTS

template <int64_t kKernel, int64_t kStride>
IsaVariant<DepthwisePlaneFn> depthwise_for_cpu() {
  return pick_isa_variant<DepthwisePlaneFn>(depthwise_plane_avx512<kKernel, kStride>,
                                            depthwise_plane_avx2<kKernel, kStride>,
                                            depthwise_plane_baseline<kKernel, kStride>);
}

IsaVariant<DepthwisePlaneFn> choose_depthwise_plane(const Window3d& w) {
  const bool square_3x3 = w.kernel[0] == 1 && w.kernel[1] == 3 && w.kernel[2] == 3 && w.dilation[1] == 1 &&
                          w.dilation[2] == 1;
  if (square_3x3 && w.stride[1] == 1 && w.stride[2] == 1) return depthwise_for_cpu<3, 1>();
  if (square_3x3 && w.stride[1] == 2 && w.stride[2] == 2) return depthwise_for_cpu<3, 2>();
  return depthwise_for_cpu<0, 0>();
}

void depthwise(const float* src, const float* weights, const float* bias, float* dst, int64_t images,
               int64_t channels, const DepthwiseGeometry& g, DepthwisePlaneFn plane_fn) {
  const Window3d& w = g.w;
  parallel_for(0, images * channels, w.out_size() * w.kernel_size() * 2, [&](int64_t begin, int64_t end) {
    float* padded = im2col_scratch(static_cast<size_t>(g.padded_size()));
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t c = plane % channels;
      pad_plane(src + plane * w.in_size(), g, padded);
      plane_fn(padded, weights + c * w.kernel_size(), bias != nullptr ? bias[c] : 0.0f, dst + plane * w.out_size(),
               g);
    }
  });
}

// One kernel tap (kd, kh, kw) of an im2col matrix: where it reads relative to an output position,
// and the output positions for which it lands inside the image along each dim.
struct Tap {
  std::array<int64_t, 3> offset{};  // kernel index * dilation - begin pad
  std::array<int64_t, 3> lo{};
  std::array<int64_t, 3> hi{};
};

std::vector<Tap> make_taps(const Window3d& w) {
  std::vector<Tap> taps;
  for (int64_t kd = 0; kd < w.kernel[0]; ++kd) {
    for (int64_t kh = 0; kh < w.kernel[1]; ++kh) {
      for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
        const std::array<int64_t, 3> index{kd, kh, kw};
        Tap tap;
        for (int d = 0; d < 3; ++d) {
          tap.offset[d] = index[d] * w.dilation[d] - w.pad[d];
          valid_output_range(w.in[d], w.out[d], w.stride[d], w.pad[d], index[d] * w.dilation[d], tap.lo[d], tap.hi[d]);
        }
        taps.push_back(tap);
      }
    }
  }
  return taps;
}

// Packed B panels hold `cols` columns in slivers of nr: the last sliver's columns past `cols` are
// zeros, which the micro-kernel multiplies like the rest.
void zero_last_sliver_padding(int64_t kc, int64_t cols, int64_t nr, float* dst) {
  const int64_t slivers = (cols + nr - 1) / nr;
  const int64_t tail = cols - (slivers - 1) * nr;
  if (tail == nr) return;
  float* last = dst + (slivers - 1) * kc * nr;
  for (int64_t p = 0; p < kc; ++p) std::fill(last + p * nr + tail, last + (p + 1) * nr, 0.0f);
}

// im2col written straight into the sgemm's packed B panels, so the matrix is never materialized:
// row p of B is (input channel, tap), column j an output position (od, oh, ow); taps that fall in
// the padding read as zero.
class Im2colB final : public PackedBSource {
 public:
  Im2colB(const float* src, const Window3d& w, const std::vector<Tap>& taps) : src_(src), w_(w), taps_(taps) {}

  void pack(int64_t p0, int64_t kc, int64_t j0, int64_t cols, int64_t nr, float* dst) const override {
    const int64_t tap_count = static_cast<int64_t>(taps_.size());
    const int64_t out_h = w_.out[1];
    const int64_t out_w = w_.out[2];
    const int64_t plane = out_h * out_w;
    zero_last_sliver_padding(kc, cols, nr, dst);
    for (int64_t p = 0; p < kc; ++p) {
      const int64_t row = p0 + p;
      const Tap& tap = taps_[static_cast<size_t>(row % tap_count)];
      const float* channel = src_ + row / tap_count * w_.in_size();
      float* out = dst + p * nr;
      int64_t od = j0 / plane;
      int64_t oh = j0 % plane / out_w;
      int64_t ow = j0 % out_w;
      for (int64_t j = 0; j < cols;) {
        // One output row at a time: positions (od, oh, ow .. ow + count).
        const int64_t count = std::min(out_w - ow, cols - j);
        const bool inside = od >= tap.lo[0] && od < tap.hi[0] && oh >= tap.lo[1] && oh < tap.hi[1];
        const float* in_row = nullptr;
        if (inside) {
          const int64_t id = od * w_.stride[0] + tap.offset[0];
          const int64_t ih = oh * w_.stride[1] + tap.offset[1];
          in_row = channel + (id * w_.in[1] + ih) * w_.in[2] + tap.offset[2];  // + ow * stride
        }
        // Split at sliver boundaries: each piece is contiguous in dst.
        for (int64_t q = 0; q < count;) {
          const int64_t column = j + q;
          const int64_t lane = column % nr;
          const int64_t run = std::min(nr - lane, count - q);
          write_run(in_row, ow + q, run, tap, out + column / nr * kc * nr + lane);
          q += run;
        }
        j += count;
        ow = 0;
        if (++oh == out_h) {
          oh = 0;
          ++od;
        }
      }
    }
  }

 private:
  // dst[0 .. count) = input at output columns ow_begin .. ow_begin + count of one row (null: all
  // padding), zero where the tap falls outside the row.
  void write_run(const float* in_row, int64_t ow_begin, int64_t count, const Tap& tap, float* dst) const {
    const int64_t ow_end = ow_begin + count;
    if (in_row == nullptr) {
      std::fill(dst, dst + count, 0.0f);
      return;
    }
    const int64_t lo = std::clamp(tap.lo[2], ow_begin, ow_end);
    const int64_t hi = std::clamp(tap.hi[2], lo, ow_end);
    std::fill(dst, dst + (lo - ow_begin), 0.0f);
    const int64_t stride = w_.stride[2];
    if (stride == 1) {
      std::memcpy(dst + (lo - ow_begin), in_row + lo, static_cast<size_t>(hi - lo) * sizeof(float));
    } else {
      for (int64_t ow = lo; ow < hi; ++ow) dst[ow - ow_begin] = in_row[ow * stride];
    }
    std::fill(dst + (hi - ow_begin), dst + count, 0.0f);
  }

  const float* src_;
  const Window3d& w_;
  const std::vector<Tap>& taps_;
};

// Everything the im2col + sgemm kernel needs, fixed at plan time.
struct GemmConv {
  Window3d window;
  std::vector<Tap> taps;
  int64_t images = 0;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t group = 1;
  bool pointwise = false;       // 1x1, stride 1, no padding: the input is the im2col matrix
  std::vector<PackedA> packed;  // per group, when the weights are plan-time constants

  int64_t in_per_group() const { return in_channels / group; }
  int64_t out_per_group() const { return out_channels / group; }
  int64_t depth() const { return in_per_group() * window.kernel_size(); }  // K of each product
  // Few output channels per group: sgemm's unpacked small-m path over a materialized im2col.
  bool small() const { return out_per_group() <= kGemmSmallRows; }

  // Output channels of image n, group g: [out_per_group, positions] = W_g x im2col(x_n,g) + bias.
  void run_one(const float* x, const float* weights, const float* bias, float* y, int64_t n, int64_t g,
               const std::vector<PackedA>& packed_weights) const {
    const int64_t positions = window.out_size();
    const int64_t k = depth();
    const int64_t rows = out_per_group();
    const float* src = x + (n * in_channels + g * in_per_group()) * window.in_size();
    float* dst = y + (n * out_channels + g * rows) * positions;
    const GemmEpilogue epilogue{1.0f, 0.0f, bias != nullptr ? bias + g * rows : nullptr};
    if (small()) {
      const float* cols = src;
      if (!pointwise) {
        float* scratch = im2col_scratch(static_cast<size_t>(k * positions));
        im2col(src, in_per_group(), window, scratch);
        cols = scratch;
      }
      sgemm(false, false, {rows, positions, k}, weights + g * rows * k, k, cols, positions, dst, positions, epilogue);
      return;
    }
    const PackedA& a = packed_weights[static_cast<size_t>(g)];
    if (pointwise) {
      sgemm_packed(a, MatrixB(src, positions, false), positions, dst, positions, epilogue);
    } else {
      sgemm_packed(a, Im2colB(src, window, taps), positions, dst, positions, epilogue);
    }
  }

  void run(const float* x, const float* weights, const float* bias, float* y) const {
    // Weights only known at run time are packed here, once per run.
    std::vector<PackedA> packed_now;
    if (packed.empty() && !small()) {
      for (int64_t g = 0; g < group; ++g) {
        packed_now.emplace_back(false, out_per_group(), depth(), weights + g * out_per_group() * depth(), depth());
      }
    }
    const std::vector<PackedA>& packed_weights = packed.empty() ? packed_now : packed;
    // Many independent (image, group) products: one per worker, each running inline. Otherwise
    // one product at a time, each parallel inside.
    if (images * group > 1 && images * group >= intra_op_threads()) {
      const int64_t cost = 2 * out_per_group() * window.out_size() * depth();
      parallel_for(0, images * group, cost, [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
          run_one(x, weights, bias, y, item / group, item % group, packed_weights);
        }
      });
      return;
    }
    for (int64_t n = 0; n < images; ++n) {
      for (int64_t g = 0; g < group; ++g) run_one(x, weights, bias, y, n, g, packed_weights);
    }
  }
};

// A convolution whose taps mostly read padding (a dilation wide against the map: DeepLab's ASPP runs
// dilation 12 on 14x14, where 82% of im2col's rows would be zeros): each tap instead multiplies its
// own [K, C] weights by the input at the output positions where it lands inside the image, and the
// products are added into the output, which starts as the bias.
class TapRegionB final : public PackedBSource {
 public:
  // Row p of B is input channel p; column j the j-th output position of the tap's live region.
  TapRegionB(const float* src, const Window3d& w, const Tap& tap) : src_(src), w_(w), tap_(tap) {}

  static int64_t positions(const Tap& tap) {
    return (tap.hi[0] - tap.lo[0]) * (tap.hi[1] - tap.lo[1]) * (tap.hi[2] - tap.lo[2]);
  }

  void pack(int64_t p0, int64_t kc, int64_t j0, int64_t cols, int64_t nr, float* dst) const override {
    const int64_t rows = tap_.hi[1] - tap_.lo[1];
    const int64_t width = tap_.hi[2] - tap_.lo[2];
    zero_last_sliver_padding(kc, cols, nr, dst);
    for (int64_t p = 0; p < kc; ++p) {
      const float* channel = src_ + (p0 + p) * w_.in_size();
      float* out = dst + p * nr;
      int64_t od = tap_.lo[0] + j0 / (rows * width);
      int64_t oh = tap_.lo[1] + j0 / width % rows;
      int64_t ow = tap_.lo[2] + j0 % width;
      for (int64_t j = 0; j < cols;) {
        // One output row of the region at a time, split where it crosses a sliver.
        const int64_t count = std::min(tap_.hi[2] - ow, cols - j);
        const int64_t id = od * w_.stride[0] + tap_.offset[0];
        const int64_t ih = oh * w_.stride[1] + tap_.offset[1];
        const float* in_row = channel + (id * w_.in[1] + ih) * w_.in[2] + tap_.offset[2];  // + ow * stride
        for (int64_t q = 0; q < count;) {
          const int64_t column = j + q;
          const int64_t run = std::min(nr - column % nr, count - q);
          float* to = out + column / nr * kc * nr + column % nr;
          for (int64_t r = 0; r < run; ++r) to[r] = in_row[(ow + q + r) * w_.stride[2]];
          q += run;
        }
        j += count;
        ow = tap_.lo[2];
        if (++oh == tap_.hi[1]) {
          oh = tap_.lo[1];
          ++od;
        }
      }
    }
  }

 private:
  const float* src_;
  const Window3d& w_;
  const Tap& tap_;
};

struct LiveTapScratch;

struct LiveTapConv {
  Window3d window;
  std::vector<Tap> taps;         // those landing inside the input for some output
  std::vector<PackedA> weights;  // per tap: [K, C]
  int64_t images = 0;
  int64_t in_channels = 0;
  int64_t out_channels = 0;

  LiveTapConv(const Window3d& w, const ConvParams& params, const float* all_weights)
      : window(w), images(params.batch), in_channels(params.in_channels), out_channels(params.out_channels) {
    const int64_t kernel = w.kernel_size();
    std::vector<float> tap_weights(static_cast<size_t>(out_channels * in_channels));
    const std::vector<Tap> all = make_taps(w);
    for (int64_t t = 0; t < kernel; ++t) {
      const Tap& tap = all[static_cast<size_t>(t)];
      if (TapRegionB::positions(tap) == 0) continue;
      for (int64_t k = 0; k < out_channels; ++k) {
        for (int64_t c = 0; c < in_channels; ++c)
          tap_weights[static_cast<size_t>(k * in_channels + c)] =
              all_weights[(k * in_channels + c) * kernel + t];
      }
      taps.push_back(tap);
      weights.emplace_back(false, out_channels, in_channels, tap_weights.data(), in_channels);
    }
  }

  void run(const float* x, const float* bias, float* y) const {
    const int64_t positions = window.out_size();
    for (int64_t n = 0; n < images; ++n) {
      const float* src = x + n * in_channels * window.in_size();
      float* dst = y + n * out_channels * positions;
      for (int64_t k = 0; k < out_channels; ++k)
        std::fill(dst + k * positions, dst + (k + 1) * positions, bias != nullptr ? bias[k] : 0.0f);
      for (size_t t = 0; t < taps.size(); ++t) {
        const Tap& tap = taps[t];
        const TapRegionB region(src, window, tap);
        const int64_t count = TapRegionB::positions(tap);
        if (count == positions) {  // the tap lands inside for every output: add straight into it
          sgemm_packed(weights[t], region, count, dst, positions, GemmEpilogue{1.0f, 1.0f, nullptr});
          continue;
        }
        float* products = thread_scratch_floats<LiveTapScratch>(static_cast<size_t>(out_channels * count));
        sgemm_packed(weights[t], region, count, products, count, GemmEpilogue{});
        add_region(products, tap, dst);
      }
    }
  }

  // dst[k, position] += products[k, j] over the tap's live region.
  void add_region(const float* products, const Tap& tap, float* dst) const {
    const int64_t width = tap.hi[2] - tap.lo[2];
    const int64_t count = TapRegionB::positions(tap);
    for (int64_t k = 0; k < out_channels; ++k) {
      const float* from = products + k * count;
      float* plane = dst + k * window.out_size();
      for (int64_t od = tap.lo[0]; od < tap.hi[0]; ++od) {
        for (int64_t oh = tap.lo[1]; oh < tap.hi[1]; ++oh) {
          float* row = plane + (od * window.out[1] + oh) * window.out[2] + tap.lo[2];
          for (int64_t j = 0; j < width; ++j) row[j] += from[j];
          from += width;
        }
      }
    }
  }
};

KernelOrReason make_conv(const OpSpec& spec, std::span<const TensorInfo>) {
  if (spec.input(0).dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "native Conv supports float32 only");
  const ConvParams params = conv_params(spec);
  Window3d w;
  if (!lift_to_3d(params.input_spatial, params.window, w)) {
    return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                    "native Conv supports up to 3 spatial dims");
  }
  const int64_t group = params.group;
  const bool has_bias = params.has_bias;
  if (params.in_channels == group && params.out_channels == group) {
    const int64_t images = params.batch;
    const int64_t channels = params.out_channels;
    const DepthwiseGeometry geometry(w);
    // Not a structured binding: clang 14 (the fuzz preset) cannot capture one in the lambda below.
    const IsaVariant<DepthwisePlaneFn> plane = choose_depthwise_plane(w);
    const DepthwisePlaneFn plane_fn = plane.fn;
    const std::string name = std::string("native:conv_depthwise_direct:") + plane.isa;
    return make_kernel(name, [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
      depthwise(inputs[0].data<float>(), inputs[1].data<float>(), has_bias ? inputs[2].data<float>() : nullptr,
                outputs[0].data<float>(), images, channels, geometry, plane_fn);
    });
  }
  const TensorInfo& weights = spec.input(1);
  if (group == 1 && weights.is_constant() &&
      live_tap_share(params.input_spatial, params.window) <= kMostlyPaddingShare) {
    auto conv = std::make_shared<const LiveTapConv>(w, params, weights.value.data<float>());
    std::string name = str_cat("native:conv_live_taps_sgemm:", gemm_kernel_info().isa);
    return make_kernel(std::move(name),
                       [conv, has_bias](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
                         conv->run(inputs[0].data<float>(), has_bias ? inputs[2].data<float>() : nullptr,
                                   outputs[0].data<float>());
                       });
  }
  GemmConv conv;
  conv.window = w;
  conv.images = params.batch;
  conv.in_channels = params.in_channels;
  conv.out_channels = params.out_channels;
  conv.group = group;
  const std::array<int64_t, 3> ones{1, 1, 1};
  const std::array<int64_t, 3> zeros{0, 0, 0};
  conv.pointwise = w.kernel_size() == 1 && w.stride == ones && w.pad == zeros && w.pad_end == zeros;
  conv.taps = make_taps(w);
  if (weights.is_constant() && !conv.small()) {
    const int64_t rows = conv.out_per_group();
    const int64_t k = conv.depth();
    for (int64_t g = 0; g < group; ++g) {
      conv.packed.emplace_back(false, rows, k, weights.value.data<float>() + g * rows * k, k);
    }
  }
  std::string name = str_cat(conv.pointwise ? "native:conv_1x1_sgemm" : "native:conv_im2col_sgemm",
                             conv.packed.empty() ? "" : "_prepacked", ":", gemm_kernel_info().isa);
  return make_kernel(std::move(name), [conv = std::move(conv), has_bias](std::span<const Tensor> inputs,
                                                                         std::span<Tensor> outputs) {
    conv.run(inputs[0].data<float>(), inputs[1].data<float>(), has_bias ? inputs[2].data<float>() : nullptr,
             outputs[0].data<float>());
  });
}

constexpr KernelEntry kKernels[] = {
    {"Conv", make_conv},
};

}  // namespace

std::span<const KernelEntry> conv_kernels() { return kKernels; }

}  // namespace kiln::native
