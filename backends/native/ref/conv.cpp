#include <cmath>

#include "backends/native/ref/reference.h"

namespace kiln::native::ref {

Values conv(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p) {
  const WindowParams& window = p.window;
  const int64_t batch = x.dim(0), channels = x.dim(1), height = x.dim(2), width = x.dim(3);
  const int64_t out_h = window.output[0], out_w = window.output[1];
  const int64_t in_per_group = channels / p.group, out_per_group = p.out_channels / p.group;
  const float* in = x.data<float>();
  const float* weights = w.data<float>();
  Values result;
  result.value.assign(static_cast<size_t>(batch * p.out_channels * out_h * out_w), 0.0);
  result.magnitude = result.value;
  size_t index = 0;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t oc = 0; oc < p.out_channels; ++oc) {
      const int64_t g = oc / out_per_group;
      for (int64_t oh = 0; oh < out_h; ++oh) {
        for (int64_t ow = 0; ow < out_w; ++ow, ++index) {
          double sum = bias.defined() ? bias.data<float>()[oc] : 0.0;
          double size = std::abs(sum);
          for (int64_t ic = 0; ic < in_per_group; ++ic) {
            for (int64_t kh = 0; kh < window.kernel[0]; ++kh) {
              for (int64_t kw = 0; kw < window.kernel[1]; ++kw) {
                const int64_t ih = oh * window.strides[0] - window.pads_begin[0] + kh * window.dilations[0];
                const int64_t iw = ow * window.strides[1] - window.pads_begin[1] + kw * window.dilations[1];
                if (ih < 0 || ih >= height || iw < 0 || iw >= width) continue;
                const double term =
                    static_cast<double>(
                        in[((n * channels + g * in_per_group + ic) * height + ih) * width + iw]) *
                    weights[((oc * in_per_group + ic) * window.kernel[0] + kh) * window.kernel[1] + kw];
                sum += term;
                size += std::abs(term);
              }
            }
          }
          result.value[index] = sum;
          result.magnitude[index] = size;
        }
      }
    }
  }
  return result;
}

}  // namespace kiln::native::ref
