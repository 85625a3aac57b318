#include "backends/native/grouped_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "ops/conv.h"
#include "runtime/cpu_info.h"
#include "runtime/parallel.h"

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the merge source of unmasked
// operations, which its own -Wmaybe-uninitialized then reports once inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kiln::native {
namespace {

// Output pixels per block. Four groups of four channels: four pixels' accumulators for the four
// groups (16 vectors) and the three horizontal taps' weights for them (12 vectors) fill the 32
// vector registers. One group of eight: four pixels' four accumulators and the three taps' four
// weight vectors, the same count.
constexpr int kPixels = 4;
// Channels a block of four groups of four covers: one 16-lane vector.
constexpr int64_t kQuad = 16;
// Weight vectors per tap of a group of eight: 64 weights in 16 lanes each.
constexpr int kVectorsPerGroupOf8 = 4;

// Everything fixed at plan time. Four channels per group: weights are packed per quad of groups q,
// tap t and group g of the quad as 16 lanes, lane 4 * o + j holding the weight of output channel o
// and input channel j. Eight per group: per group, tap t and vector v, lane 8 * h + j holding output
// channel v + 4 * h and input channel j.
struct GroupedConv {
  int64_t group_width = 0;  // channels per group: 4 or 8
  int64_t batch = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;  // in = out
  std::vector<float> packed;
  std::vector<float> bias;  // zeros without one
  float low = -std::numeric_limits<float>::infinity();
  float high = std::numeric_limits<float>::infinity();

  void run(const float* src, float* dst) const;
};

// out(g, o) = sum over j of acc_g[4 * o + j], for the four groups of a quad, as one vector with
// lane 4 * g + o: the channels-last order of the quad's outputs.
__attribute__((target("avx512f,avx512dq,fma"))) inline __m512 sum_quarters(__m512 a0, __m512 a1, __m512 a2,
                                                                           __m512 a3) {
  // Within each 128-bit quarter (output channel o): t = [a0j0, a1j0, a0j1, a1j1] and so on.
  const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  // Quarter o now holds [sum a0, sum a1, sum a2, sum a3] over its j: lane 4 * o + g.
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(s01, s23, 0x44), _mm512_shuffle_ps(s01, s23, 0xEE));
  const __m512i transpose = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(transpose, sums);
}

// The eight outputs of a group of eight, out(o) = sum over j of a_v[8 * h + j] for o = v + 4 * h,
// in channel order.
__attribute__((target("avx512f,avx512dq,fma"))) inline __m256 sum_group_of_8(__m512 a0, __m512 a1, __m512 a2,
                                                                             __m512 a3) {
  const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  // Quarter k holds [a0, a1, a2, a3] each summed over the quarter's four j.
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(s01, s23, 0x44), _mm512_shuffle_ps(s01, s23, 0xEE));
  // Quarters 0 and 1 are h = 0's two halves of j, 2 and 3 h = 1's: quarter 0 gets outputs 0-3,
  // quarter 2 outputs 4-7.
  const __m512 halves = _mm512_add_ps(sums, _mm512_shuffle_f32x4(sums, sums, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_castps512_ps256(_mm512_shuffle_f32x4(halves, halves, _MM_SHUFFLE(2, 0, 2, 0)));
}

// kCount (1..kPixels) output pixels of row `oh` from column `ow0`, for the quad of groups of four
// starting at channel `c0`.
template <int kCount>
__attribute__((target("avx512f,avx512dq,fma"), always_inline)) inline void block4(const GroupedConv& conv,
                                                                                  const float* image,
                                                                                  float* out_row, int64_t oh,
                                                                                  int64_t ow0, int64_t c0) {
  __m512 acc[kCount][4];
  for (int p = 0; p < kCount; ++p) {
    for (int g = 0; g < 4; ++g) acc[p][g] = _mm512_setzero_ps();
  }
  const float* quad_weights = conv.packed.data() + (c0 / kQuad) * 9 * 4 * kQuad;
  for (int kh = 0; kh < 3; ++kh) {
    const int64_t ih = oh + kh - 1;
    if (ih < 0 || ih >= conv.height) continue;
    const float* weights = quad_weights + kh * 3 * 4 * kQuad;
    __m512 w[3][4];
    for (int kw = 0; kw < 3; ++kw) {
      for (int g = 0; g < 4; ++g) w[kw][g] = _mm512_loadu_ps(weights + (kw * 4 + g) * kQuad);
    }
    const float* row = image + ih * conv.width * conv.channels + c0;
    // Input column ow0 - 1 + c feeds output pixel p = c - kw through tap kw.
#pragma GCC unroll 8
    for (int c = 0; c < kCount + 2; ++c) {
      const int64_t iw = ow0 - 1 + c;
      if (iw < 0 || iw >= conv.width) continue;
      const float* pixel = row + iw * conv.channels;
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m512 x = _mm512_broadcast_f32x4(_mm_loadu_ps(pixel + 4 * g));
#pragma GCC unroll 3
        for (int kw = 0; kw < 3; ++kw) {
          const int p = c - kw;
          if (p >= 0 && p < kCount) acc[p][g] = _mm512_fmadd_ps(x, w[kw][g], acc[p][g]);
        }
      }
    }
  }
  const __m512 bias = _mm512_loadu_ps(conv.bias.data() + c0);
  const __m512 low = _mm512_set1_ps(conv.low);
  const __m512 high = _mm512_set1_ps(conv.high);
  for (int p = 0; p < kCount; ++p) {
    __m512 result = _mm512_add_ps(sum_quarters(acc[p][0], acc[p][1], acc[p][2], acc[p][3]), bias);
    // The result second: max and min return their second operand for NaN, which passes through as
    // native's Relu and Clip pass it.
    result = _mm512_min_ps(high, _mm512_max_ps(low, result));
    _mm512_storeu_ps(out_row + (ow0 + p) * conv.channels + c0, result);
  }
}

// kCount (1..kPixels) output pixels of row `oh` from column `ow0`, for the group of eight starting
// at channel `c0`.
template <int kCount>
__attribute__((target("avx512f,avx512dq,fma"), always_inline)) inline void block8(const GroupedConv& conv,
                                                                                  const float* image,
                                                                                  float* out_row, int64_t oh,
                                                                                  int64_t ow0, int64_t c0) {
  __m512 acc[kCount][kVectorsPerGroupOf8];
  for (int p = 0; p < kCount; ++p) {
    for (int v = 0; v < kVectorsPerGroupOf8; ++v) acc[p][v] = _mm512_setzero_ps();
  }
  const float* group_weights = conv.packed.data() + (c0 / 8) * 9 * kVectorsPerGroupOf8 * 16;
  for (int kh = 0; kh < 3; ++kh) {
    const int64_t ih = oh + kh - 1;
    if (ih < 0 || ih >= conv.height) continue;
    const float* weights = group_weights + kh * 3 * kVectorsPerGroupOf8 * 16;
    __m512 w[3][kVectorsPerGroupOf8];
    for (int kw = 0; kw < 3; ++kw) {
      for (int v = 0; v < kVectorsPerGroupOf8; ++v)
        w[kw][v] = _mm512_loadu_ps(weights + (kw * kVectorsPerGroupOf8 + v) * 16);
    }
    const float* row = image + ih * conv.width * conv.channels + c0;
#pragma GCC unroll 8
    for (int c = 0; c < kCount + 2; ++c) {
      const int64_t iw = ow0 - 1 + c;
      if (iw < 0 || iw >= conv.width) continue;
      // The group's eight input channels in both halves.
      const __m512 x = _mm512_broadcast_f32x8(_mm256_loadu_ps(row + iw * conv.channels));
#pragma GCC unroll 3
      for (int kw = 0; kw < 3; ++kw) {
        const int p = c - kw;
        if (p < 0 || p >= kCount) continue;
#pragma GCC unroll 4
        for (int v = 0; v < kVectorsPerGroupOf8; ++v) acc[p][v] = _mm512_fmadd_ps(x, w[kw][v], acc[p][v]);
      }
    }
  }
  const __m256 bias = _mm256_loadu_ps(conv.bias.data() + c0);
  const __m256 low = _mm256_set1_ps(conv.low);
  const __m256 high = _mm256_set1_ps(conv.high);
  for (int p = 0; p < kCount; ++p) {
    __m256 result = _mm256_add_ps(sum_group_of_8(acc[p][0], acc[p][1], acc[p][2], acc[p][3]), bias);
    // The result second, so that NaN passes through (as in block4).
    result = _mm256_min_ps(high, _mm256_max_ps(low, result));
    _mm256_storeu_ps(out_row + (ow0 + p) * conv.channels + c0, result);
  }
}

template <int64_t kWidth, int kCount>
__attribute__((target("avx512f,avx512dq,fma"), always_inline)) inline void block(const GroupedConv& conv,
                                                                                 const float* image,
                                                                                 float* out_row, int64_t oh,
                                                                                 int64_t ow0, int64_t c0) {
  if constexpr (kWidth == 4)
    block4<kCount>(conv, image, out_row, oh, ow0, c0);
  else
    block8<kCount>(conv, image, out_row, oh, ow0, c0);
}

// One output row: every block of channels (a quad of groups of four, or one group of eight) across
// the row's pixels.
template <int64_t kWidth>
__attribute__((target("avx512f,avx512dq,fma"))) void run_row(const GroupedConv& conv, const float* image,
                                                             float* out_row, int64_t oh) {
  constexpr int64_t kBlockChannels = kWidth == 4 ? kQuad : 8;
  for (int64_t c0 = 0; c0 < conv.channels; c0 += kBlockChannels) {
    int64_t ow0 = 0;
    for (; ow0 + kPixels <= conv.width; ow0 += kPixels)
      block<kWidth, kPixels>(conv, image, out_row, oh, ow0, c0);
    switch (conv.width - ow0) {
      case 3:
        block<kWidth, 3>(conv, image, out_row, oh, ow0, c0);
        break;
      case 2:
        block<kWidth, 2>(conv, image, out_row, oh, ow0, c0);
        break;
      case 1:
        block<kWidth, 1>(conv, image, out_row, oh, ow0, c0);
        break;
      default:
        break;
    }
  }
}

void GroupedConv::run(const float* src, float* dst) const {
  const int64_t rows = batch * height;
  const int64_t row_size = width * channels;
  // 2 FLOPs per multiply-add, 9 * group_width per output channel and pixel.
  parallel_for(0, rows, row_size * 9 * group_width * 2, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* image = src + r / height * height * row_size;
      if (group_width == 4)
        run_row<4>(*this, image, dst + r * row_size, r % height);
      else
        run_row<8>(*this, image, dst + r * row_size, r % height);
    }
  });
}

}  // namespace

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

std::optional<Refusal> grouped_conv_refusal(const KernelRequest& request) {
  const auto refuse = [](RefusalKind kind, std::string detail) {
    return std::optional<Refusal>(Refusal{{}, {}, kind, std::move(detail)});
  };
  const OpSpec& spec = request.op;
  if (spec.op_type != "Conv" || !is_default_domain(spec.domain))
    return refuse(RefusalKind::no_kernel, "not a Conv");
  if (isa_in_effect() < Isa::avx512)
    return refuse(RefusalKind::unavailable, "the channels-last grouped kernel needs the avx512 tier");
  if (spec.input(0).dtype != DType::f32 || request.precision != Precision::fp32)
    return refuse(RefusalKind::unsupported_dtype, "the channels-last grouped kernel computes float32");
  if (spec.input(0).shape.size() != 4 || request.input_layout(0) != Layout::nhwc)
    return refuse(RefusalKind::unsupported_layout,
                  "the channels-last grouped kernel reads [N, C, H, W] channels-last");
  for (const PostOp& op : request.post_ops) {
    if (op.kind != PostOp::Kind::relu && op.kind != PostOp::Kind::clip)
      return refuse(
          RefusalKind::unsupported_fusion,
          str_cat("the channels-last grouped kernel fuses Relu and Clip, not ", post_op_name(op.kind)));
  }
  const ConvParams params = conv_params(spec);
  const WindowParams& w = params.window;
  // conv_params has checked that the group divides the channels.
  const int64_t width = params.in_channels / params.group;
  if (params.group == 1 || params.in_channels != params.out_channels || (width != 4 && width != 8))
    return refuse(RefusalKind::unsupported_attribute,
                  str_cat("the channels-last grouped kernel takes two or more groups of 4 or 8 input and "
                          "as many output channels, not ",
                          params.group, " with ", width, " input and ", params.out_channels / params.group,
                          " output channels each"));
  if (width == 4 && params.in_channels % kQuad != 0)
    return refuse(RefusalKind::unsupported_shape,
                  "the channels-last grouped kernel needs channels in 16s for groups of 4");
  const std::vector<int64_t> three{3, 3}, one{1, 1};
  if (w.kernel != three || w.strides != one || w.dilations != one || w.pads_begin != one || w.pads_end != one)
    return refuse(RefusalKind::unsupported_attribute,
                  "the channels-last grouped kernel takes a 3x3 window, stride 1, dilation 1, padding 1");
  if (!spec.input(1).is_constant() || (params.has_bias && !spec.input(2).is_constant()))
    return refuse(RefusalKind::not_constant,
                  "the channels-last grouped kernel packs weights and bias at plan time");
  return std::nullopt;
}

KernelOrReason make_channels_last_grouped_conv(const KernelRequest& request, std::span<const TensorInfo>) {
  if (std::optional<Refusal> refusal = grouped_conv_refusal(request))
    return KernelOrReason::rejected(*refusal);
  const OpSpec& spec = request.op;
  const ConvParams params = conv_params(spec);
  auto conv = std::make_shared<GroupedConv>();
  conv->batch = params.batch;
  conv->height = params.input_spatial[0];
  conv->width = params.input_spatial[1];
  conv->channels = params.in_channels;
  // ONNX weights: [M, C / group, 3, 3], element (m, j, kh, kw).
  const float* weights = spec.input(1).value.data<float>();
  conv->group_width = params.in_channels / params.group;
  if (conv->group_width == 4) {
    conv->packed.resize(static_cast<size_t>(conv->channels / kQuad * 9 * 4 * kQuad));
    for (int64_t q = 0; q < conv->channels / kQuad; ++q) {
      for (int64_t tap = 0; tap < 9; ++tap) {
        for (int64_t g = 0; g < 4; ++g) {
          for (int64_t o = 0; o < 4; ++o) {
            for (int64_t j = 0; j < 4; ++j) {
              const int64_t m = q * kQuad + g * 4 + o;
              conv->packed[static_cast<size_t>(((q * 9 + tap) * 4 + g) * kQuad + o * 4 + j)] =
                  weights[(m * 4 + j) * 9 + tap];
            }
          }
        }
      }
    }
  } else {
    conv->packed.resize(static_cast<size_t>(params.group * 9 * kVectorsPerGroupOf8 * 16));
    for (int64_t g = 0; g < params.group; ++g) {
      for (int64_t tap = 0; tap < 9; ++tap) {
        for (int64_t v = 0; v < kVectorsPerGroupOf8; ++v) {
          for (int64_t h = 0; h < 2; ++h) {
            for (int64_t j = 0; j < 8; ++j) {
              const int64_t m = g * 8 + v + 4 * h;
              conv->packed[static_cast<size_t>(((g * 9 + tap) * kVectorsPerGroupOf8 + v) * 16 + 8 * h + j)] =
                  weights[(m * 8 + j) * 9 + tap];
            }
          }
        }
      }
    }
  }
  conv->bias.assign(static_cast<size_t>(conv->channels), 0.0f);
  if (params.has_bias) {
    const float* bias = spec.input(2).value.data<float>();
    std::copy(bias, bias + conv->channels, conv->bias.begin());
  }
  for (const PostOp& op : request.post_ops) {
    // Relu, then Clip, compose as one clamp.
    if (op.kind == PostOp::Kind::relu) {
      conv->low = std::max(conv->low, 0.0f);
      conv->high = std::max(conv->high, 0.0f);
    }
    if (op.kind == PostOp::Kind::clip) {
      conv->low = std::min(std::max(conv->low, op.alpha), op.beta);
      conv->high = std::min(std::max(conv->high, op.alpha), op.beta);
    }
  }
  std::string name = str_cat("native:conv_grouped", conv->group_width, "_3x3_nhwc:avx512");
  class Kernel final : public kiln::Kernel {
   public:
    Kernel(std::string name, std::shared_ptr<const GroupedConv> conv)
        : name_(std::move(name)), conv_(std::move(conv)) {}
    void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
      conv_->run(inputs[0].data<float>(), outputs[0].data<float>());
    }
    std::string_view name() const override { return name_; }
    Layout input_layout(size_t index) const override { return index == 0 ? Layout::nhwc : Layout::plain; }
    Layout output_layout(size_t) const override { return Layout::nhwc; }
    bool copied_at_plan_time(size_t index) const override { return index == 1 || index == 2; }

   private:
    std::string name_;
    std::shared_ptr<const GroupedConv> conv_;
  };
  return {std::make_unique<Kernel>(std::move(name), std::move(conv)), {}, {}};
}

}  // namespace kiln::native
