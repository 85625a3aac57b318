#include "backends/native/ref/reference.h"

namespace kiln::native::ref {
namespace {

int32_t int8_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::u8 ? t.data<uint8_t>()[i] : t.data<int8_t>()[i];
}

int32_t zero_point(std::span<const int32_t> values, int64_t i) {
  return values.size() == 1 ? values[0] : values[i];
}

int32_t wrap_to_int32(int64_t sum) {
  return static_cast<int32_t>(static_cast<uint32_t>(sum));
}

}  // namespace

std::vector<int32_t> conv_integer(const Tensor& x, const Tensor& w, int32_t x_zero_point,
                                  std::span<const int32_t> w_zero_points, const ConvParams& p) {
  const WindowParams& window = p.window;
  const int64_t batch = x.dim(0), channels = x.dim(1), height = x.dim(2), width = x.dim(3);
  const int64_t out_h = window.output[0], out_w = window.output[1];
  const int64_t in_per_group = channels / p.group, out_per_group = p.out_channels / p.group;
  std::vector<int32_t> result;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t oc = 0; oc < p.out_channels; ++oc) {
      const int64_t g = oc / out_per_group;
      for (int64_t oh = 0; oh < out_h; ++oh) {
        for (int64_t ow = 0; ow < out_w; ++ow) {
          int64_t sum = 0;
          for (int64_t ic = 0; ic < in_per_group; ++ic) {
            for (int64_t kh = 0; kh < window.kernel[0]; ++kh) {
              for (int64_t kw = 0; kw < window.kernel[1]; ++kw) {
                const int64_t ih = oh * window.strides[0] - window.pads_begin[0] + kh * window.dilations[0];
                const int64_t iw = ow * window.strides[1] - window.pads_begin[1] + kw * window.dilations[1];
                if (ih < 0 || ih >= height || iw < 0 || iw >= width) continue;
                const int64_t xv =
                    int8_at(x, ((n * channels + g * in_per_group + ic) * height + ih) * width + iw);
                const int64_t wv =
                    int8_at(w, ((oc * in_per_group + ic) * window.kernel[0] + kh) * window.kernel[1] + kw);
                sum += (xv - x_zero_point) * (wv - zero_point(w_zero_points, oc));
              }
            }
          }
          result.push_back(wrap_to_int32(sum));
        }
      }
    }
  }
  return result;
}

std::vector<int32_t> matmul_integer(const Tensor& a, const Tensor& b, std::span<const int32_t> a_zero_points,
                                    std::span<const int32_t> b_zero_points) {
  const int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
  std::vector<int32_t> result;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t sum = 0;
      for (int64_t l = 0; l < k; ++l) {
        sum += static_cast<int64_t>(int8_at(a, i * k + l) - zero_point(a_zero_points, i)) *
               (int8_at(b, l * n + j) - zero_point(b_zero_points, j));
      }
      result.push_back(wrap_to_int32(sum));
    }
  }
  return result;
}

}  // namespace kiln::native::ref
