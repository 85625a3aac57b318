// Conv and pooling kernels work on up to three spatial dims; 1-D and 2-D problems are lifted to
// 3-D with leading dims of size 1, so one loop nest serves all of them.
#pragma once

#include <array>
#include <vector>

#include "ops/window.h"

namespace kiln::native {

struct Window3d {
  std::array<int64_t, 3> in{1, 1, 1};
  std::array<int64_t, 3> out{1, 1, 1};
  std::array<int64_t, 3> kernel{1, 1, 1};
  std::array<int64_t, 3> stride{1, 1, 1};
  std::array<int64_t, 3> dilation{1, 1, 1};
  std::array<int64_t, 3> pad{0, 0, 0};      // begin padding
  std::array<int64_t, 3> pad_end{0, 0, 0};  // end padding

  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t kernel_size() const { return kernel[0] * kernel[1] * kernel[2]; }
};

// Returns false when there are more than three spatial dims.
inline bool lift_to_3d(const std::vector<int64_t>& spatial, const WindowParams& window, Window3d& result) {
  const size_t rank = spatial.size();
  if (rank > 3) return false;
  const size_t offset = 3 - rank;
  for (size_t d = 0; d < rank; ++d) {
    result.in[offset + d] = spatial[d];
    result.out[offset + d] = window.output[d];
    result.kernel[offset + d] = window.kernel[d];
    result.stride[offset + d] = window.strides[d];
    result.dilation[offset + d] = window.dilations[d];
    result.pad[offset + d] = window.pads_begin[d];
    result.pad_end[offset + d] = window.pads_end[d];
  }
  return true;
}

// Output positions [lo, hi) along one dim whose input index o*stride - pad + offset is in [0, in).
inline void valid_output_range(int64_t in, int64_t out, int64_t stride, int64_t pad, int64_t offset, int64_t& lo,
                               int64_t& hi) {
  const int64_t shift = offset - pad;  // input index = o * stride + shift
  lo = shift >= 0 ? 0 : (-shift + stride - 1) / stride;
  hi = in - shift <= 0 ? 0 : (in - 1 - shift) / stride + 1;
  lo = std::min(lo, out);
  hi = std::max(lo, std::min(hi, out));
}

}  // namespace kiln::native
