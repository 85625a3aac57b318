#include <cmath>
#include <limits>

#include "backends/native/ref/reference.h"

namespace kiln::native::ref {

Values pool(const Tensor& x, const PoolParams& p, bool is_max) {
  const WindowParams& window = p.window;
  const int64_t planes = x.dim(0) * x.dim(1), height = x.dim(2), width = x.dim(3);
  const int64_t out_h = window.output[0], out_w = window.output[1];
  const float* in = x.data<float>();
  Values result;
  result.value.assign(static_cast<size_t>(planes * out_h * out_w), 0.0);
  result.magnitude = result.value;
  size_t index = 0;
  for (int64_t plane = 0; plane < planes; ++plane) {
    for (int64_t oh = 0; oh < out_h; ++oh) {
      for (int64_t ow = 0; ow < out_w; ++ow, ++index) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0, size = 0;
        int64_t count = 0;
        for (int64_t kh = 0; kh < window.kernel[0]; ++kh) {
          for (int64_t kw = 0; kw < window.kernel[1]; ++kw) {
            const int64_t ih = oh * window.strides[0] - window.pads_begin[0] + kh * window.dilations[0];
            const int64_t iw = ow * window.strides[1] - window.pads_begin[1] + kw * window.dilations[1];
            // Padding is the positions before the input and up to pads_end after it; ceil_mode's
            // extra windows may reach further, and those positions never count.
            const bool in_padding = ih >= -window.pads_begin[0] && ih < height + window.pads_end[0] &&
                                    iw >= -window.pads_begin[1] && iw < width + window.pads_end[1];
            if (ih < 0 || ih >= height || iw < 0 || iw >= width) {
              if (in_padding && p.count_include_pad) ++count;
              continue;
            }
            const double v = in[(plane * height + ih) * width + iw];
            best = std::max(best, v);
            sum += v;
            size += std::abs(v);
            ++count;
          }
        }
        result.value[index] = is_max ? best : sum / static_cast<double>(count);
        result.magnitude[index] = is_max ? std::abs(best) : size / static_cast<double>(count);
      }
    }
  }
  return result;
}

}  // namespace kiln::native::ref
