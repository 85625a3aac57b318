#include "backends/winograd/accuracy.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

namespace kiln::winograd {
namespace {

constexpr int64_t kProbeChannels = 64;

// A fixed sequence (xorshift), so a plan's choice does not change from run to run.
std::vector<float> uniform_inputs(int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  uint32_t state = 0x9e3779b9u;
  for (float& value : values) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    value = static_cast<float>(state >> 8) / static_cast<float>(1u << 24);
  }
  return values;
}

}  // namespace

double probe_error(int tile, int64_t in_channels, int64_t out_channels, const float* weights) {
  // The probed output channels' filters, transformed on their own: a fraction of the layer's.
  const int64_t step = std::max<int64_t>(1, out_channels / kProbeChannels);
  const int64_t filter_size = in_channels * 9;
  std::vector<float> probed;
  for (int64_t k = 0; k < out_channels; k += step)
    probed.insert(probed.end(), weights + k * filter_size, weights + (k + 1) * filter_size);
  const int64_t probed_channels = static_cast<int64_t>(probed.size()) / filter_size;

  const int64_t side = 2 * tile;
  ConvShape shape;
  shape.in_channels = in_channels;
  shape.out_channels = probed_channels;
  shape.in_h = shape.in_w = side + 2;
  shape.out_h = shape.out_w = side;
  const std::vector<float> x = uniform_inputs(shape.in_h * shape.in_w * in_channels);
  std::vector<float> y(static_cast<size_t>(side * side * probed_channels));
  auto filters =
      std::make_shared<const TransformedFilters>(tile, in_channels, probed_channels, probed.data());
  WinogradConv(std::move(filters), shape, {}, {}).run(x.data(), nullptr, y.data());

  double max_error = 0;
  double max_value = 0;
  for (int64_t k = 0; k < probed_channels; ++k) {
    const float* w = probed.data() + k * filter_size;
    for (int64_t oh = 0; oh < side; ++oh) {
      for (int64_t ow = 0; ow < side; ++ow) {
        double exact = 0;
        for (int64_t kh = 0; kh < 3; ++kh) {
          for (int64_t kw = 0; kw < 3; ++kw) {
            const float* pixel = x.data() + ((oh + kh) * shape.in_w + ow + kw) * in_channels;
            for (int64_t c = 0; c < in_channels; ++c)
              exact += static_cast<double>(w[(c * 3 + kh) * 3 + kw]) * static_cast<double>(pixel[c]);
          }
        }
        const double got = y[static_cast<size_t>((oh * side + ow) * probed_channels + k)];
        const double error = std::abs(got - exact);
        if (std::isnan(error)) return INFINITY;
        max_error = std::max(max_error, error);
        max_value = std::max(max_value, std::abs(exact));
      }
    }
  }
  if (!std::isfinite(max_error) || !std::isfinite(max_value)) return INFINITY;
  return max_value == 0 ? (max_error == 0 ? 0 : INFINITY) : max_error / max_value;
}

}  // namespace kiln::winograd
