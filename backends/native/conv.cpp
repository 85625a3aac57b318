// Native Conv (float32): im2col + sgemm per image and group, no im2col for pointwise convs, and a
// direct loop for depthwise convs (one input channel per group), where im2col would dominate.
#include <cstring>
#include <memory>

#include "backends/native/gemm.h"
#include "backends/native/kernel_util.h"
#include "backends/native/native_backend.h"
#include "backends/native/spatial3d.h"
#include "ops/conv.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

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
      std::memset(dst, 0, static_cast<size_t>(positions) * sizeof(float));
      int64_t d_lo, d_hi, h_lo, h_hi, w_lo, w_hi;
      valid_output_range(w.in[0], w.out[0], w.stride[0], w.pad[0], kd * w.dilation[0], d_lo, d_hi);
      valid_output_range(w.in[1], w.out[1], w.stride[1], w.pad[1], kh * w.dilation[1], h_lo, h_hi);
      valid_output_range(w.in[2], w.out[2], w.stride[2], w.pad[2], kw * w.dilation[2], w_lo, w_hi);
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

// Depthwise: each output channel reads one input channel with its own kernel.
void depthwise(const float* src, const float* weights, const float* bias, float* dst, int64_t images,
               int64_t channels, const Window3d& w) {
  parallel_for(0, images * channels, w.out_size() * w.kernel_size() * 2, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t c = plane % channels;
      const float* x = src + plane * w.in_size();
      const float* k = weights + c * w.kernel_size();
      float* y = dst + plane * w.out_size();
      std::fill(y, y + w.out_size(), bias ? bias[c] : 0.0f);
      for (int64_t kd = 0; kd < w.kernel[0]; ++kd) {
        for (int64_t kh = 0; kh < w.kernel[1]; ++kh) {
          for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
            const float weight = k[(kd * w.kernel[1] + kh) * w.kernel[2] + kw];
            int64_t d_lo, d_hi, h_lo, h_hi, w_lo, w_hi;
            valid_output_range(w.in[0], w.out[0], w.stride[0], w.pad[0], kd * w.dilation[0], d_lo, d_hi);
            valid_output_range(w.in[1], w.out[1], w.stride[1], w.pad[1], kh * w.dilation[1], h_lo, h_hi);
            valid_output_range(w.in[2], w.out[2], w.stride[2], w.pad[2], kw * w.dilation[2], w_lo, w_hi);
            for (int64_t od = d_lo; od < d_hi; ++od) {
              const int64_t id = od * w.stride[0] - w.pad[0] + kd * w.dilation[0];
              for (int64_t oh = h_lo; oh < h_hi; ++oh) {
                const int64_t ih = oh * w.stride[1] - w.pad[1] + kh * w.dilation[1];
                const float* in_row = x + (id * w.in[1] + ih) * w.in[2] - w.pad[2] + kw * w.dilation[2];
                float* out_row = y + (od * w.out[1] + oh) * w.out[2];
                const int64_t stride = w.stride[2];
                for (int64_t ow = w_lo; ow < w_hi; ++ow) out_row[ow] += weight * in_row[ow * stride];
              }
            }
          }
        }
      }
    }
  });
}

KernelOrReason make_conv(const OpSpec& spec, std::span<const TensorInfo>) {
  if (spec.input(0).dtype != DType::f32) return KernelOrReason::rejected("native Conv supports float32 only");
  const ConvParams params = conv_params(spec);
  Window3d w;
  if (!lift_to_3d(params.input_spatial, params.window, w)) {
    return KernelOrReason::rejected("native Conv supports up to 3 spatial dims");
  }
  const int64_t group = params.group;
  const int64_t in_per_group = params.in_channels / group;
  const int64_t out_per_group = params.out_channels / group;
  const int64_t images = params.batch;
  const int64_t in_channels = params.in_channels;
  const int64_t out_channels = params.out_channels;
  const bool has_bias = params.has_bias;
  if (in_per_group == 1 && out_per_group == 1) {
    return make_kernel("native:conv_depthwise_direct", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
      depthwise(inputs[0].data<float>(), inputs[1].data<float>(), has_bias ? inputs[2].data<float>() : nullptr,
                outputs[0].data<float>(), images, out_channels, w);
    });
  }
  const bool pointwise = w.kernel_size() == 1 && w.stride == std::array<int64_t, 3>{1, 1, 1} &&
                         w.pad == std::array<int64_t, 3>{0, 0, 0} && w.pad_end == std::array<int64_t, 3>{0, 0, 0};
  const int64_t k = in_per_group * w.kernel_size();
  const int64_t positions = w.out_size();
  return make_kernel(pointwise ? "native:conv_1x1_sgemm" : "native:conv_im2col_sgemm",
                     [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
                       const float* x = inputs[0].data<float>();
                       const float* weights = inputs[1].data<float>();
                       const float* bias = has_bias ? inputs[2].data<float>() : nullptr;
                       float* y = outputs[0].data<float>();
                       std::unique_ptr<float[]> cols(pointwise ? nullptr : new float[static_cast<size_t>(k * positions)]);
                       for (int64_t n = 0; n < images; ++n) {
                         for (int64_t g = 0; g < group; ++g) {
                           const float* src = x + (n * in_channels + g * in_per_group) * w.in_size();
                           float* dst = y + (n * out_channels + g * out_per_group) * positions;
                           if (bias != nullptr) {
                             for (int64_t co = 0; co < out_per_group; ++co) {
                               std::fill(dst + co * positions, dst + (co + 1) * positions, bias[g * out_per_group + co]);
                             }
                           }
                           if (!pointwise) im2col(src, in_per_group, w, cols.get());
                           sgemm(false, false, {out_per_group, positions, k}, 1.0f, weights + g * out_per_group * k, k,
                                 pointwise ? src : cols.get(), positions, bias ? 1.0f : 0.0f, dst, positions);
                         }
                       }
                     });
}

constexpr KernelEntry kKernels[] = {
    {"Conv", make_conv},
};

}  // namespace

std::span<const KernelEntry> conv_kernels() { return kKernels; }

}  // namespace kiln::native
