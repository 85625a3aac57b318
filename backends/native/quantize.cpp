// Native QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and the integer products
// (ConvInteger, QLinearConv, MatMulInteger, QLinearMatMul, QGemm), and QLinearAdd / QLinearMul.
//
// The products accumulate exactly in int32, as ONNX defines them, on every CPU: each operand minus
// its zero point is an int16 in [-255, 255], and int16 dot products (vpmaddwd, whose pair sums are at
// most 2 * 255 * 255) sum them. vpmaddubsw, the u8 x s8 instruction of AVX2 and of AVX-512 without
// VNNI, saturates its 16-bit pair sums and is never used. ConvInteger and MatMulInteger are the
// accumulators the QLinear forms requantize (ops/quantize_math.h), so tests compare both.
#include "ops/quantize.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <mutex>
#include <type_traits>

#include "backends/base/function_kernel.h"
#include "backends/native/broadcast_loop.h"
#include "backends/native/element_math.h"
#include "backends/native/isa_variant.h"
#include "backends/native/native_backend.h"
#include "backends/native/thread_scratch.h"
#include "ops/quantize_math.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

// ---- Scales and zero points ----------------------------------------------------------------------

// The value a scale or zero point holds for index i (its only value when per tensor).
float scale_at(const Tensor& scale, int64_t i) {
  return scale.data<float>()[scale.numel() == 1 ? 0 : i];
}

// An absent optional zero point is zero.
int32_t zero_point_at(std::span<const Tensor> inputs, int input, int64_t i) {
  if (input >= static_cast<int>(inputs.size()) || !inputs[input].defined()) return 0;
  const Tensor& zero_point = inputs[input];
  const int64_t at = zero_point.numel() == 1 ? 0 : i;
  return zero_point.dtype() == DType::u8 ? zero_point.data<uint8_t>()[at] : zero_point.data<int8_t>()[at];
}

// Calls fn(T{}) for int8 or uint8.
template <typename Fn>
auto visit_int8(DType dtype, Fn&& fn) {
  return dtype == DType::u8 ? fn(uint8_t{}) : fn(int8_t{});
}

// ---- QuantizeLinear, DequantizeLinear ------------------------------------------------------------

// Calls fn(first, count, index) over runs of elements sharing scale `index`, in parallel: chunks of
// the whole tensor when per tensor, else the `inner` elements of each index of the axis.
template <typename Fn>
void for_each_run(const QuantAxis& axis, int64_t total, const Fn& fn) {
  if (axis.per_tensor()) {
    parallel_for(0, total, 1, [&](int64_t begin, int64_t end) { fn(begin, end - begin, 0); });
    return;
  }
  parallel_for(0, total / axis.inner, axis.inner, [&](int64_t begin, int64_t end) {
    for (int64_t run = begin; run < end; ++run) fn(run * axis.inner, axis.inner, run % axis.count);
  });
}

// quantize_value over a float32 run, written to vectorize (the division, the rounding, NaN to the
// zero point, the saturation): the same values, since the rounded quotient and the zero point sum
// exactly in float wherever the result is not saturated anyway.
template <typename Y>
[[gnu::always_inline]] inline void quantize_floats(const float* x, int64_t n, float scale, int32_t zero_point,
                                                   Y* y) {
  const auto low = static_cast<float>(std::numeric_limits<Y>::min());
  const auto high = static_cast<float>(std::numeric_limits<Y>::max());
  const auto zero = static_cast<float>(zero_point);
  for (int64_t i = 0; i < n; ++i) {
    float q = std::nearbyint(x[i] / scale) + zero;
    q = q == q ? q : zero;
    q = q < low ? low : q;
    q = q > high ? high : q;
    y[i] = static_cast<Y>(static_cast<int32_t>(q));
  }
}

template <typename Y>
using QuantizeFloatsFn = void (*)(const float*, int64_t, float, int32_t, Y*);

template <typename Y>
__attribute__((target("avx512f,avx512bw"))) void quantize_floats_avx512(const float* x, int64_t n,
                                                                        float scale, int32_t zero_point,
                                                                        Y* y) {
  quantize_floats(x, n, scale, zero_point, y);
}
template <typename Y>
__attribute__((target("avx2"))) void quantize_floats_avx2(const float* x, int64_t n, float scale,
                                                          int32_t zero_point, Y* y) {
  quantize_floats(x, n, scale, zero_point, y);
}
template <typename Y>
void quantize_floats_baseline(const float* x, int64_t n, float scale, int32_t zero_point, Y* y) {
  quantize_floats(x, n, scale, zero_point, y);
}

template <typename X, typename Y>
void quantize_run(const X* x, int64_t n, float scale, int32_t zero_point, Y* y) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<X, int32_t>) {
      y[i] = quantize_value<Y>(x[i], scale, zero_point);
    } else {
      y[i] = quantize_value<Y>(static_cast<float>(to_compute(x[i])), scale, zero_point);
    }
  }
}

KernelOrReason make_quantize_linear(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const QuantAxis axis = quantize_linear_axis(spec);
  const DType x = spec.input(0).dtype;
  const DType y = outputs[0].dtype;
  if (x == DType::f64)
    return KernelOrReason::rejected(
        RefusalKind::unsupported_dtype,
        "native QuantizeLinear reads float32, float16, bfloat16 or int32, not float64");
  const auto floats_u8 = pick_isa_variant<QuantizeFloatsFn<uint8_t>>(
      quantize_floats_avx512<uint8_t>, quantize_floats_avx2<uint8_t>, quantize_floats_baseline<uint8_t>);
  const auto floats_s8 = pick_isa_variant<QuantizeFloatsFn<int8_t>>(
      quantize_floats_avx512<int8_t>, quantize_floats_avx2<int8_t>, quantize_floats_baseline<int8_t>);
  return make_kernel(
      std::string("native:quantize_linear_") + floats_u8.isa,
      [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
        visit_int8(y, [&](auto out_tag) {
          using Y = decltype(out_tag);
          Y* out = dst[0].data<Y>();
          for_each_run(axis, inputs[0].numel(), [&](int64_t first, int64_t n, int64_t index) {
            const float scale = scale_at(inputs[1], index);
            const int32_t zero_point = zero_point_at(inputs, 2, index);
            switch (x) {
              case DType::f16:
                quantize_run(inputs[0].data<Float16>() + first, n, scale, zero_point, out + first);
                break;
              case DType::bf16:
                quantize_run(inputs[0].data<BFloat16>() + first, n, scale, zero_point, out + first);
                break;
              case DType::i32:
                quantize_run(inputs[0].data<int32_t>() + first, n, scale, zero_point, out + first);
                break;
              default:
                if constexpr (std::is_same_v<Y, uint8_t>) {
                  floats_u8.fn(inputs[0].data<float>() + first, n, scale, zero_point, out + first);
                } else {
                  floats_s8.fn(inputs[0].data<float>() + first, n, scale, zero_point, out + first);
                }
                break;
            }
          });
          return 0;
        });
      });
}

// As ONNX's reference: the value and the zero point in float, their difference scaled.
template <typename X>
void dequantize_run(const X* x, int64_t n, float scale, int32_t zero_point, float* y) {
  const auto zero = static_cast<float>(zero_point);
  for (int64_t i = 0; i < n; ++i) y[i] = (static_cast<float>(x[i]) - zero) * scale;
}

KernelOrReason make_dequantize_linear(const OpSpec& spec, std::span<const TensorInfo>) {
  const QuantAxis axis = quantize_linear_axis(spec);
  const DType x = spec.input(0).dtype;
  return make_kernel("native:dequantize_linear", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    float* out = dst[0].data<float>();
    for_each_run(axis, inputs[0].numel(), [&](int64_t first, int64_t n, int64_t index) {
      const float scale = scale_at(inputs[1], index);
      const int32_t zero_point = zero_point_at(inputs, 2, index);
      if (x == DType::i32) {
        dequantize_run(inputs[0].data<int32_t>() + first, n, scale, zero_point, out + first);
      } else {
        visit_int8(x, [&](auto tag) {
          dequantize_run(inputs[0].data<decltype(tag)>() + first, n, scale, zero_point, out + first);
          return 0;
        });
      }
    });
  });
}

// ---- DynamicQuantizeLinear -----------------------------------------------------------------------

// uint8 over [min(0, min x), max(0, max x)]: scale = range / 255, zero point = round(-min / scale).
// Lowers *low and raises *high to cover x[0, n); a NaN is skipped, as std::min and std::max do.
using RangeFn = void (*)(const float* x, int64_t n, float* low, float* high);
[[gnu::always_inline]] inline void widen_range(const float* x, int64_t n, float* low, float* high) {
  float smallest = *low;
  float largest = *high;
  for (int64_t i = 0; i < n; ++i) {
    smallest = x[i] < smallest ? x[i] : smallest;
    largest = x[i] > largest ? x[i] : largest;
  }
  *low = smallest;
  *high = largest;
}
__attribute__((target("avx512f,avx512bw"))) void widen_range_avx512(const float* x, int64_t n, float* low,
                                                                    float* high) {
  widen_range(x, n, low, high);
}
__attribute__((target("avx2"))) void widen_range_avx2(const float* x, int64_t n, float* low, float* high) {
  widen_range(x, n, low, high);
}
void widen_range_baseline(const float* x, int64_t n, float* low, float* high) {
  widen_range(x, n, low, high);
}

// uint8 over the run's own range, which always holds 0: two parallel passes (the range, then the
// values through QuantizeLinear's vector loop), the ISA tier's variants of both.
KernelOrReason make_dynamic_quantize_linear(const OpSpec&, std::span<const TensorInfo>) {
  const auto range = pick_isa_variant<RangeFn>(widen_range_avx512, widen_range_avx2, widen_range_baseline);
  const auto quantize = pick_isa_variant<QuantizeFloatsFn<uint8_t>>(
      quantize_floats_avx512<uint8_t>, quantize_floats_avx2<uint8_t>, quantize_floats_baseline<uint8_t>);
  return make_kernel(std::string("native:dynamic_quantize_linear_") + range.isa,
                     [range, quantize](std::span<const Tensor> inputs, std::span<Tensor> dst) {
                       const float* x = inputs[0].data<float>();
                       const int64_t count = inputs[0].numel();
                       float low = 0;
                       float high = 0;
                       std::mutex combine;
                       parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
                         float part_low = 0;
                         float part_high = 0;
                         range.fn(x + begin, end - begin, &part_low, &part_high);
                         const std::lock_guard<std::mutex> lock(combine);
                         low = std::min(low, part_low);
                         high = std::max(high, part_high);
                       });
                       const float scale = (high - low) / 255.0f;
                       // An all-zero input has scale 0: every value is then the zero point 0.
                       const uint8_t zero_point =
                           scale == 0 ? 0 : saturate_rounded<uint8_t>(std::nearbyint(0.0f - low / scale));
                       dst[1].data<float>()[0] = scale;
                       dst[2].data<uint8_t>()[0] = zero_point;
                       uint8_t* y = dst[0].data<uint8_t>();
                       if (scale == 0) {
                         std::fill(y, y + count, uint8_t{0});
                         return;
                       }
                       parallel_for(0, count, 4, [&](int64_t begin, int64_t end) {
                         quantize.fn(x + begin, end - begin, scale, zero_point, y + begin);
                       });
                     });
}

// ---- Exact int16 dot products ---------------------------------------------------------------------

// Terms one int32 partial sum may take without overflowing: 32768 * 255 * 255 < 2^31. Longer dot
// products add their partial sums modulo 2^32, as int32 accumulation wraps.
constexpr int64_t kExactTerms = 32768;

// acc[c * rows + r] = dot(a + r * k, b + c * k) over k terms, for r < rows and c < columns.
using DotRowsFn = void (*)(const int16_t* a, int64_t rows, const int16_t* b, int64_t columns, int64_t k,
                           int32_t* acc);

[[gnu::always_inline]] inline void dot_rows(const int16_t* a, int64_t rows, const int16_t* b, int64_t columns,
                                            int64_t k, int32_t* acc) {
  for (int64_t c = 0; c < columns; ++c) {
    const int16_t* column = b + c * k;
    for (int64_t r = 0; r < rows; ++r) {
      const int16_t* row = a + r * k;
      uint32_t total = 0;
      for (int64_t begin = 0; begin < k; begin += kExactTerms) {
        const int64_t end = std::min(k, begin + kExactTerms);
        int32_t sum = 0;
        for (int64_t i = begin; i < end; ++i) sum += static_cast<int32_t>(row[i]) * column[i];
        total += static_cast<uint32_t>(sum);
      }
      acc[c * rows + r] = static_cast<int32_t>(total);
    }
  }
}

__attribute__((target("avx512f,avx512bw"))) void dot_rows_avx512(const int16_t* a, int64_t rows,
                                                                 const int16_t* b, int64_t columns, int64_t k,
                                                                 int32_t* acc) {
  dot_rows(a, rows, b, columns, k, acc);
}
__attribute__((target("avx2"))) void dot_rows_avx2(const int16_t* a, int64_t rows, const int16_t* b,
                                                   int64_t columns, int64_t k, int32_t* acc) {
  dot_rows(a, rows, b, columns, k, acc);
}
void dot_rows_baseline(const int16_t* a, int64_t rows, const int16_t* b, int64_t columns, int64_t k,
                       int32_t* acc) {
  dot_rows(a, rows, b, columns, k, acc);
}

IsaVariant<DotRowsFn> pick_dot_rows() {
  return pick_isa_variant<DotRowsFn>(dot_rows_avx512, dot_rows_avx2, dot_rows_baseline);
}

// How an accumulator becomes an output: as it is (ConvInteger, MatMulInteger: int32) or plus the bias
// and requantized (QLinearConv, QLinearMatMul).
struct OutputRule {
  IntegerOperands at;
  DType output = DType::i32;
};

// ---- ConvInteger, QLinearConv ---------------------------------------------------------------------

// Conv's geometry with 1 to 3 spatial dims, as 3 (leading dims of size 1).
struct Geometry3d {
  int64_t in[3] = {1, 1, 1};
  int64_t out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1};
  int64_t dilation[3] = {1, 1, 1};
  int64_t pad[3] = {0, 0, 0};
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t taps() const { return kernel[0] * kernel[1] * kernel[2]; }
};

Geometry3d geometry_3d(const ConvParams& p) {
  Geometry3d g;
  const size_t rank = p.input_spatial.size();
  for (size_t d = 0; d < rank; ++d) {
    const size_t at = 3 - rank + d;
    g.in[at] = p.input_spatial[d];
    g.out[at] = p.window.output[d];
    g.kernel[at] = p.window.kernel[d];
    g.stride[at] = p.window.strides[d];
    g.dilation[at] = p.window.dilations[d];
    g.pad[at] = p.window.pads_begin[d];
  }
  return g;
}

// Output positions one work item takes: its patches (positions x K int16) stay in L2.
constexpr int64_t kPositionsPerItem = 32;

struct PatchTag {};
struct WeightTag {};
struct AccumulatorTag {};

// Rows [first, first + rows) of one image's and group's patch matrix: for each output position, its
// window over the group's channels minus x's zero point (0 where the window leaves the input).
template <typename X>
void gather_patches(const X* channels, int64_t group_channels, const Geometry3d& g, int32_t zero_point,
                    int64_t first, int64_t rows, int16_t* patches) {
  const int64_t k = group_channels * g.taps();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t position = first + r;
    const int64_t o0 = position / (g.out[1] * g.out[2]);
    const int64_t o1 = position / g.out[2] % g.out[1];
    const int64_t o2 = position % g.out[2];
    int16_t* row = patches + r * k;
    for (int64_t c = 0; c < group_channels; ++c) {
      const X* channel = channels + c * g.in_size();
      for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
        const int64_t i0 = o0 * g.stride[0] - g.pad[0] + k0 * g.dilation[0];
        for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
          const int64_t i1 = o1 * g.stride[1] - g.pad[1] + k1 * g.dilation[1];
          for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2, ++row) {
            const int64_t i2 = o2 * g.stride[2] - g.pad[2] + k2 * g.dilation[2];
            const bool inside = i0 >= 0 && i0 < g.in[0] && i1 >= 0 && i1 < g.in[1] && i2 >= 0 && i2 < g.in[2];
            *row =
                inside ? static_cast<int16_t>(channel[(i0 * g.in[1] + i1) * g.in[2] + i2] - zero_point) : 0;
          }
        }
      }
    }
  }
}

// The weights of every output channel minus its zero point, [M, K] int16 in W's own order.
template <typename W>
void widen_weights(const W* w, int64_t out_channels, int64_t k, std::span<const Tensor> inputs,
                   int zero_point_input, int16_t* dst) {
  for (int64_t m = 0; m < out_channels; ++m) {
    const int32_t zero_point = zero_point_at(inputs, zero_point_input, m);
    for (int64_t i = 0; i < k; ++i) dst[m * k + i] = static_cast<int16_t>(w[m * k + i] - zero_point);
  }
}

// Writes accumulators acc[c * rows + r] of rows [first_row, + rows) and output channels (columns)
// [first_channel, + channels) to out at out_offset(c, r), as the rule says. x's scale may be per row,
// w's per channel.
template <typename OffsetFn>
void write_outputs(const int32_t* acc, int64_t rows, int64_t first_row, int64_t first_channel,
                   int64_t channels, const OutputRule& rule, std::span<const Tensor> inputs, Tensor& out,
                   OffsetFn&& out_offset) {
  if (!rule.at.requantized()) {
    int32_t* y = out.data<int32_t>();
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t r = 0; r < rows; ++r) y[out_offset(c, r)] = acc[c * rows + r];
    }
    return;
  }
  const bool has_bias =
      rule.at.bias >= 0 && rule.at.bias < static_cast<int>(inputs.size()) && inputs[rule.at.bias].defined();
  const Tensor& x_scale = inputs[rule.at.x_scale];
  const float y_scale = scale_at(inputs[rule.at.y_scale], 0);
  const int32_t y_zero_point = zero_point_at(inputs, rule.at.y_zero_point, 0);
  visit_int8(rule.output, [&](auto tag) {
    using Y = decltype(tag);
    Y* y = out.data<Y>();
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t channel = first_channel + c;
      const float w_scale = scale_at(inputs[rule.at.w_scale], channel);
      const int32_t bias = has_bias ? inputs[rule.at.bias].data<int32_t>()[channel] : 0;
      for (int64_t r = 0; r < rows; ++r) {
        const float multiplier = requantize_multiplier(scale_at(x_scale, first_row + r), w_scale, y_scale);
        y[out_offset(c, r)] = requantize<Y>(acc[c * rows + r], bias, multiplier, y_zero_point);
      }
    }
    return 0;
  });
}

// Weights minus their zero points as int16 (`count` values written by widen(inputs, into)): widened
// once at plan time when the weights and their zero points are constants, else every run into this
// thread's scratch.
template <typename Widen>
class WidenedWeights {
 public:
  WidenedWeights(const OpSpec& spec, int weights, int zero_point, size_t count, Widen widen)
      : count_(count), widen_(std::move(widen)) {
    const bool zero_point_constant = !spec.has_input(zero_point) || spec.input(zero_point).is_constant();
    if (!spec.input(weights).is_constant() || !zero_point_constant) return;
    std::vector<Tensor> constants(static_cast<size_t>(spec.num_inputs()));
    for (int input : {weights, zero_point}) {
      if (spec.has_input(input)) constants[static_cast<size_t>(input)] = spec.input(input).value;
    }
    auto widened = std::make_shared<std::vector<int16_t>>(count);
    widen_(constants, widened->data());
    prepacked_ = std::move(widened);
  }

  const int16_t* get(std::span<const Tensor> inputs) const {
    if (prepacked_) return prepacked_->data();
    int16_t* scratch = thread_scratch<WeightTag, int16_t>(count_);
    widen_(inputs, scratch);
    return scratch;
  }

 private:
  size_t count_;
  Widen widen_;
  std::shared_ptr<const std::vector<int16_t>> prepacked_;
};

KernelOrReason make_integer_conv(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const ConvParams p = integer_conv_params(spec);
  if (p.input_spatial.size() > 3) {
    return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                    "native " + spec.op_type + " takes 1 to 3 spatial dims, got " +
                                        std::to_string(p.input_spatial.size()));
  }
  const OutputRule rule{integer_operands(spec), outputs[0].dtype};
  const Geometry3d g = geometry_3d(p);
  const DType x_type = spec.input(rule.at.x).dtype;
  const DType w_type = spec.input(rule.at.w).dtype;
  const int64_t group_channels = p.in_channels / p.group;
  const int64_t group_outputs = p.out_channels / p.group;
  const int64_t k = group_channels * g.taps();
  const int64_t positions = g.out_size();
  const int64_t items_per_image_group = (positions + kPositionsPerItem - 1) / kPositionsPerItem;
  const IsaVariant<DotRowsFn> dot = pick_dot_rows();
  const WidenedWeights weights(spec, rule.at.w, rule.at.w_zero_point, static_cast<size_t>(p.out_channels * k),
                               [=](std::span<const Tensor> inputs, int16_t* into) {
                                 visit_int8(w_type, [&](auto tag) {
                                   widen_weights(inputs[rule.at.w].data<decltype(tag)>(), p.out_channels, k,
                                                 inputs, rule.at.w_zero_point, into);
                                   return 0;
                                 });
                               });
  return make_kernel(
      std::string("native:") + (rule.at.requantized() ? "qlinear_conv_" : "conv_integer_") + dot.isa,
      [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
        const Tensor& x = inputs[rule.at.x];
        const int16_t* widened = weights.get(inputs);
        const int32_t x_zero_point = zero_point_at(inputs, rule.at.x_zero_point, 0);
        const int64_t items = p.batch * p.group * items_per_image_group;
        parallel_for(0, items, kPositionsPerItem * group_outputs * k, [&](int64_t begin, int64_t end) {
          int16_t* patches = thread_scratch<PatchTag, int16_t>(static_cast<size_t>(kPositionsPerItem * k));
          int32_t* acc =
              thread_scratch<AccumulatorTag, int32_t>(static_cast<size_t>(kPositionsPerItem * group_outputs));
          for (int64_t item = begin; item < end; ++item) {
            const int64_t n = item / (p.group * items_per_image_group);
            const int64_t group = item / items_per_image_group % p.group;
            const int64_t first = item % items_per_image_group * kPositionsPerItem;
            const int64_t rows = std::min(kPositionsPerItem, positions - first);
            const int64_t channel_offset = (n * p.in_channels + group * group_channels) * g.in_size();
            visit_int8(x_type, [&](auto tag) {
              gather_patches(x.data<decltype(tag)>() + channel_offset, group_channels, g, x_zero_point, first,
                             rows, patches);
              return 0;
            });
            dot.fn(patches, rows, widened + group * group_outputs * k, group_outputs, k, acc);
            const int64_t out_base = (n * p.out_channels + group * group_outputs) * positions + first;
            write_outputs(acc, rows, first, group * group_outputs, group_outputs, rule, inputs, dst[0],
                          [&](int64_t c, int64_t r) { return out_base + c * positions + r; });
          }
        });
      });
}

// ---- MatMulInteger, QLinearMatMul -----------------------------------------------------------------

struct RowsTag {};
struct ColumnsTag {};

// The element offset of batch `b`'s matrix in an operand of batch dims `own` broadcast to `batch`.
int64_t broadcast_offset(const Shape& own, const Shape& batch, int64_t b, int64_t matrix) {
  int64_t offset = 0;
  int64_t stride = matrix;
  int64_t rest = b;
  for (size_t d = batch.size(); d-- > 0;) {
    const int64_t index = rest % batch[d];
    rest /= batch[d];
    const size_t lead = batch.size() - own.size();
    if (d >= lead) {
      const int64_t dim = own[d - lead];
      offset += (dim == 1 ? 0 : index) * stride;
      stride *= dim;
    }
  }
  return offset;
}

KernelOrReason make_integer_matmul(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const MatMulParams p = integer_matmul_params(spec);
  const OutputRule rule{integer_operands(spec), outputs[0].dtype};
  const DType a_type = spec.input(rule.at.x).dtype;
  const DType b_type = spec.input(rule.at.w).dtype;
  int64_t batches = 1;
  for (int64_t dim : p.batch) batches *= dim;
  const IsaVariant<DotRowsFn> dot = pick_dot_rows();
  return make_kernel(
      std::string("native:") + (rule.at.requantized() ? "qlinear_matmul_" : "matmul_integer_") + dot.isa,
      [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
        parallel_for(0, batches * p.m, p.n * p.k, [&](int64_t begin, int64_t end) {
          for (int64_t item = begin; item < end;) {
            // Rows [row, row + rows) of batch b.
            const int64_t b = item / p.m;
            const int64_t row = item % p.m;
            const int64_t rows = std::min(end - item, p.m - row);
            item += rows;
            int16_t* a = thread_scratch<RowsTag, int16_t>(static_cast<size_t>(rows * p.k));
            int16_t* columns = thread_scratch<ColumnsTag, int16_t>(static_cast<size_t>(p.n * p.k));
            int32_t* acc = thread_scratch<AccumulatorTag, int32_t>(static_cast<size_t>(rows * p.n));
            const int64_t a_offset = broadcast_offset(p.a_batch, p.batch, b, p.m * p.k) + row * p.k;
            visit_int8(a_type, [&](auto tag) {
              const auto* src = inputs[rule.at.x].data<decltype(tag)>() + a_offset;
              for (int64_t r = 0; r < rows; ++r) {
                const int32_t zero_point = zero_point_at(inputs, rule.at.x_zero_point, row + r);
                for (int64_t i = 0; i < p.k; ++i)
                  a[r * p.k + i] = static_cast<int16_t>(src[r * p.k + i] - zero_point);
              }
              return 0;
            });
            const int64_t b_offset = broadcast_offset(p.b_batch, p.batch, b, p.k * p.n);
            visit_int8(b_type, [&](auto tag) {
              const auto* src = inputs[rule.at.w].data<decltype(tag)>() + b_offset;
              for (int64_t j = 0; j < p.n; ++j) {
                const int32_t zero_point = zero_point_at(inputs, rule.at.w_zero_point, j);
                for (int64_t i = 0; i < p.k; ++i)
                  columns[j * p.k + i] = static_cast<int16_t>(src[i * p.n + j] - zero_point);
              }
              return 0;
            });
            dot.fn(a, rows, columns, p.n, p.k, acc);
            const int64_t out_base = (b * p.m + row) * p.n;
            write_outputs(acc, rows, row, 0, p.n, rule, inputs, dst[0],
                          [&](int64_t c, int64_t r) { return out_base + r * p.n + c; });
          }
        });
      });
}

// ---- QGemm ------------------------------------------------------------------------------------------

// Output blocks one work item takes: up to 16 rows of A' times 64 columns of B'. Batch-1 Gemms (one
// row) still split over the columns.
constexpr int64_t kGemmRowsPerItem = 16;
constexpr int64_t kGemmColumnsPerItem = 64;

struct GemmRowsTag {};

// B' minus its zero points, one column of K int16 after another ([N, K]), from B stored [K, N] or,
// transposed, [N, K].
template <typename W>
void widen_gemm_columns(const W* b, const GemmShape& g, std::span<const Tensor> inputs, int zero_point_input,
                        int16_t* columns) {
  for (int64_t j = 0; j < g.n; ++j) {
    const int32_t zero_point = zero_point_at(inputs, zero_point_input, j);
    for (int64_t i = 0; i < g.k; ++i) {
      const W value = g.trans_b ? b[j * g.k + i] : b[i * g.n + j];
      columns[j * g.k + i] = static_cast<int16_t>(value - zero_point);
    }
  }
}

// Where C's element for output (r, c) is: C broadcasts to [M, N] from [], [N], [1, N], [M, 1] or [M, N].
struct BiasStrides {
  int64_t row = 0;
  int64_t column = 0;
};
BiasStrides bias_strides(const Shape& c, const GemmShape& g) {
  BiasStrides strides;
  if (c.empty()) return strides;
  const int64_t columns = c.back();
  strides.column = columns == g.n && g.n > 1 ? 1 : 0;
  strides.row = c.size() == 2 && c[0] == g.m && g.m > 1 ? columns : 0;
  return strides;
}

KernelOrReason make_integer_gemm(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const IntegerGemmParams p = integer_gemm_params(spec);
  const GemmShape g = p.shape;
  const IntegerOperands at = integer_operands(spec);
  const DType a_type = spec.input(at.x).dtype;
  const DType b_type = spec.input(at.w).dtype;
  const DType output = outputs[0].dtype;
  const bool has_bias = spec.has_input(at.bias);
  const BiasStrides bias_at = has_bias ? bias_strides(spec.input(at.bias).shape, g) : BiasStrides{};
  const IsaVariant<DotRowsFn> dot = pick_dot_rows();
  const WidenedWeights widened_columns(spec, at.w, at.w_zero_point, static_cast<size_t>(g.n * g.k),
                                       [=](std::span<const Tensor> inputs, int16_t* into) {
                                         visit_int8(b_type, [&](auto tag) {
                                           widen_gemm_columns(inputs[at.w].data<decltype(tag)>(), g, inputs,
                                                              at.w_zero_point, into);
                                           return 0;
                                         });
                                       });
  const int64_t row_blocks = (g.m + kGemmRowsPerItem - 1) / kGemmRowsPerItem;
  const int64_t column_blocks = (g.n + kGemmColumnsPerItem - 1) / kGemmColumnsPerItem;
  return make_kernel(
      std::string("native:qgemm_") + dot.isa, [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
        const int16_t* columns = widened_columns.get(inputs);
        const int32_t a_zero_point = zero_point_at(inputs, at.x_zero_point, 0);
        // alpha * a_scale, times each column's b_scale (and over y_scale when requantizing).
        const float a_scale = p.alpha * scale_at(inputs[at.x_scale], 0);
        const int32_t* bias = has_bias ? inputs[at.bias].data<int32_t>() : nullptr;
        const float y_scale = at.requantized() ? scale_at(inputs[at.y_scale], 0) : 1;
        const int32_t y_zero_point = at.requantized() ? zero_point_at(inputs, at.y_zero_point, 0) : 0;
        parallel_for(0, row_blocks * column_blocks, kGemmRowsPerItem * kGemmColumnsPerItem * g.k,
                     [&](int64_t begin, int64_t end) {
                       int16_t* a =
                           thread_scratch<GemmRowsTag, int16_t>(static_cast<size_t>(kGemmRowsPerItem * g.k));
                       int32_t* acc = thread_scratch<AccumulatorTag, int32_t>(
                           static_cast<size_t>(kGemmRowsPerItem * kGemmColumnsPerItem));
                       for (int64_t item = begin; item < end; ++item) {
                         const int64_t first_row = item / column_blocks * kGemmRowsPerItem;
                         const int64_t first_column = item % column_blocks * kGemmColumnsPerItem;
                         const int64_t rows = std::min(kGemmRowsPerItem, g.m - first_row);
                         const int64_t count = std::min(kGemmColumnsPerItem, g.n - first_column);
                         visit_int8(a_type, [&](auto tag) {
                           const auto* src = inputs[at.x].data<decltype(tag)>();
                           for (int64_t r = 0; r < rows; ++r) {
                             for (int64_t i = 0; i < g.k; ++i) {
                               const int64_t row = first_row + r;
                               const auto value = g.trans_a ? src[i * g.m + row] : src[row * g.k + i];
                               a[r * g.k + i] = static_cast<int16_t>(value - a_zero_point);
                             }
                           }
                           return 0;
                         });
                         dot.fn(a, rows, columns + first_column * g.k, count, g.k, acc);
                         const auto write_block = [&](auto* y) {
                           using Y = std::remove_pointer_t<decltype(y)>;
                           for (int64_t c = 0; c < count; ++c) {
                             const int64_t column = first_column + c;
                             const float scale = requantize_multiplier(
                                 a_scale, scale_at(inputs[at.w_scale], column), y_scale);
                             for (int64_t r = 0; r < rows; ++r) {
                               const int64_t row = first_row + r;
                               const int32_t b = bias ? bias[row * bias_at.row + column * bias_at.column] : 0;
                               if constexpr (std::is_same_v<Y, float>) {
                                 // Accumulator and C summed in float32, then scaled (requantize's first
                                 // steps).
                                 y[row * g.n + column] =
                                     (static_cast<float>(acc[c * rows + r]) + static_cast<float>(b)) * scale;
                               } else {
                                 y[row * g.n + column] =
                                     requantize<Y>(acc[c * rows + r], b, scale, y_zero_point);
                               }
                             }
                           }
                         };
                         if (output == DType::f32) {
                           write_block(dst[0].data<float>());
                         } else if (output == DType::u8) {
                           write_block(dst[0].data<uint8_t>());
                         } else {
                           write_block(dst[0].data<int8_t>());
                         }
                       }
                     });
      });
}

// ---- QLinearAdd, QLinearMul -------------------------------------------------------------------------

// Elements one pass dequantizes and combines into float32 before quantizing them (a stack buffer).
constexpr int64_t kCombineChunk = 256;

// Operands dequantized as DequantizeLinear does, combined as the float op, quantized as QuantizeLinear:
// the chain's bits. kAStride and kBStride are 0 (one value along the run) or 1.
struct QLinearBinaryParameters {
  float a_scale, b_scale, y_scale;
  int32_t a_zero_point, b_zero_point, y_zero_point;
};
template <bool kMultiply, int kAStride, int kBStride, typename T>
[[gnu::always_inline]] inline void combine_quantized(const T* a, const T* b, int64_t n,
                                                     const QLinearBinaryParameters& p, T* y) {
  const auto a_zero = static_cast<float>(p.a_zero_point);
  const auto b_zero = static_cast<float>(p.b_zero_point);
  float combined[kCombineChunk];
  for (int64_t first = 0; first < n; first += kCombineChunk) {
    const int64_t count = std::min(kCombineChunk, n - first);
    for (int64_t i = 0; i < count; ++i) {
      const float x = (static_cast<float>(a[(first + i) * kAStride]) - a_zero) * p.a_scale;
      const float z = (static_cast<float>(b[(first + i) * kBStride]) - b_zero) * p.b_scale;
      combined[i] = kMultiply ? x * z : x + z;
    }
    quantize_floats(combined, count, p.y_scale, p.y_zero_point, y + first);
  }
}

template <bool kMultiply, typename T>
using CombineFn = void (*)(const T*, int64_t, const T*, int64_t, int64_t, const QLinearBinaryParameters&, T*);

// One run of n outputs whose operands step by a_stride and b_stride (0 or 1, not both 0 unless n is 1).
template <bool kMultiply, typename T>
[[gnu::always_inline]] inline void combine_run(const T* a, int64_t a_stride, const T* b, int64_t b_stride,
                                               int64_t n, const QLinearBinaryParameters& p, T* y) {
  if (a_stride == 1 && b_stride == 1) {
    combine_quantized<kMultiply, 1, 1>(a, b, n, p, y);
  } else if (a_stride == 1) {
    combine_quantized<kMultiply, 1, 0>(a, b, n, p, y);
  } else if (b_stride == 1) {
    combine_quantized<kMultiply, 0, 1>(a, b, n, p, y);
  } else {
    combine_quantized<kMultiply, 0, 0>(a, b, n, p, y);
  }
}
template <bool kMultiply, typename T>
__attribute__((target("avx512f,avx512bw"))) void combine_run_avx512(const T* a, int64_t a_stride, const T* b,
                                                                    int64_t b_stride, int64_t n,
                                                                    const QLinearBinaryParameters& p, T* y) {
  combine_run<kMultiply>(a, a_stride, b, b_stride, n, p, y);
}
template <bool kMultiply, typename T>
__attribute__((target("avx2"))) void combine_run_avx2(const T* a, int64_t a_stride, const T* b,
                                                      int64_t b_stride, int64_t n,
                                                      const QLinearBinaryParameters& p, T* y) {
  combine_run<kMultiply>(a, a_stride, b, b_stride, n, p, y);
}
template <bool kMultiply, typename T>
void combine_run_baseline(const T* a, int64_t a_stride, const T* b, int64_t b_stride, int64_t n,
                          const QLinearBinaryParameters& p, T* y) {
  combine_run<kMultiply>(a, a_stride, b, b_stride, n, p, y);
}

template <bool kMultiply, typename T>
IsaVariant<CombineFn<kMultiply, T>> pick_combine_run() {
  return pick_isa_variant<CombineFn<kMultiply, T>>(
      combine_run_avx512<kMultiply, T>, combine_run_avx2<kMultiply, T>, combine_run_baseline<kMultiply, T>);
}

template <bool kMultiply>
KernelOrReason make_qlinear_binary(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const Shape output = outputs[0].shape;
  const BroadcastLoop loop(output, {spec.input(0).shape, spec.input(3).shape});
  const int64_t total = checked_numel(output);
  const DType dtype = outputs[0].dtype;
  const auto u8 = pick_combine_run<kMultiply, uint8_t>();
  const auto s8 = pick_combine_run<kMultiply, int8_t>();
  return make_kernel(std::string("native:") + (kMultiply ? "qlinear_mul_" : "qlinear_add_") + u8.isa,
                     [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
                       const QLinearBinaryParameters p{
                           scale_at(inputs[1], 0),      scale_at(inputs[4], 0),
                           scale_at(inputs[6], 0),      zero_point_at(inputs, 2, 0),
                           zero_point_at(inputs, 5, 0), zero_point_at(inputs, 7, 0)};
                       // Chunks of the output, cut at row ends: within a row each operand steps by 0 or 1.
                       parallel_for(0, total, 4, [&](int64_t begin, int64_t end) {
                         for (int64_t at = begin; at < end;) {
                           const int64_t row = at / loop.row_size();
                           const int64_t column = at % loop.row_size();
                           const int64_t n = std::min(end - at, loop.row_size() - column);
                           const int64_t a_at = loop.offset(0, row) + column * loop.row_stride(0);
                           const int64_t b_at = loop.offset(1, row) + column * loop.row_stride(1);
                           visit_int8(dtype, [&](auto tag) {
                             using T = decltype(tag);
                             const T* a = inputs[0].data<T>() + a_at;
                             const T* b = inputs[3].data<T>() + b_at;
                             T* y = dst[0].data<T>() + at;
                             if constexpr (std::is_same_v<T, uint8_t>) {
                               u8.fn(a, loop.row_stride(0), b, loop.row_stride(1), n, p, y);
                             } else {
                               s8.fn(a, loop.row_stride(0), b, loop.row_stride(1), n, p, y);
                             }
                             return 0;
                           });
                           at += n;
                         }
                       });
                     });
}

constexpr KernelEntry kKernels[] = {
    {"QuantizeLinear", make_quantize_linear},
    {"DequantizeLinear", make_dequantize_linear},
    {"DynamicQuantizeLinear", make_dynamic_quantize_linear},
    {"ConvInteger", make_integer_conv},
    {"QLinearConv", make_integer_conv},
    {"MatMulInteger", make_integer_matmul},
    {"QLinearMatMul", make_integer_matmul},
    {"QGemm", make_integer_gemm},
    {"QLinearAdd", make_qlinear_binary<false>},
    {"QLinearMul", make_qlinear_binary<true>},
};

}  // namespace

std::span<const KernelEntry> quantize_kernels() {
  return kKernels;
}

}  // namespace kiln::native
