// A stride-1 3 x 3 convolution, channels-last in and out, by Winograd's F(m x m, 3 x 3)
// (backends/winograd/transforms.h). The filters are transformed once, when the plan is built, into
// alpha^2 matrices of C x K packed for the native sgemm. A run walks blocks of tiles (sized so a
// block's transformed input and products stay in L2) times chunks of output channels, on kiln's
// threads; per task it transforms the block's input tiles (vectors of channels), runs the alpha^2
// products [tiles x C] x [C x K-chunk] on the native sgemm's micro-kernels, and transforms the
// products back into outputs, adding the bias and applying the fused post-ops as they are stored.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/base/post_op.h"
#include "backends/native/gemm.h"
#include "core/allocator.h"

namespace kiln::winograd {

// One convolution's sizes: x [N, in_h, in_w, C] -> y [N, out_h, out_w, K], zero padding before
// (pad_top, pad_left) and wherever the 3 x 3 window leaves the input after. A dilated kernel (taps
// d apart) is the same F(m x m, 3 x 3) over each of the d x d phases (the outputs whose row and
// column are the same modulo d): a tile's m x m outputs and (m + 2)^2 inputs are d apart.
struct ConvShape {
  int64_t batch = 1;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t in_h = 0;
  int64_t in_w = 0;
  int64_t out_h = 0;
  int64_t out_w = 0;
  int64_t pad_top = 0;
  int64_t pad_left = 0;
  int64_t dilation_h = 1;
  int64_t dilation_w = 1;
};

// How a convolution's outputs split into tiles along one axis: `phases` interleaved grids of
// `per_phase` tiles each (one grid when undilated); the last tile of a grid may overhang.
struct TileAxis {
  int64_t phases = 1;
  int64_t per_phase = 0;
  int64_t tiles() const { return phases * per_phase; }
};
TileAxis tile_axis(int64_t outputs, int64_t dilation, int tile);

// How a run splits a convolution's tiles into blocks (a task transforms one block's input and
// multiplies it by the filters). Every block reads the transformed filters; filters larger than L2
// are read from memory once per block, which the cost model counts.
struct TileBlocking {
  int64_t tile_block = 1;  // tiles per block
  int64_t blocks = 1;
  bool filters_from_memory = false;
};
TileBlocking tile_blocking(const ConvShape& shape, int tile);

// U = G g G^T for every (output, input) channel pair, as alpha^2 packed C x K matrices: computed in
// double, stored in float. Immutable, so one set serves every run and every thread.
class TransformedFilters {
 public:
  // `weights` is ONNX's [K, C, 3, 3]; `tile` is m (2 or 4).
  TransformedFilters(int tile, int64_t in_channels, int64_t out_channels, const float* weights);

  int tile() const { return tile_; }
  int alpha() const { return tile_ + 2; }
  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  const native::PackedB& position(int index) const { return positions_[static_cast<size_t>(index)]; }
  // The packed matrices' size: (m + 2)^2 / 9 of the filters', plus the sgemm's column padding.
  int64_t bytes() const { return static_cast<int64_t>(storage_.size()); }

 private:
  int tile_;
  int64_t in_channels_;
  int64_t out_channels_;
  AllocatedBlock storage_;
  std::vector<native::PackedB> positions_;  // views into storage_, one per element-wise position
};

// A post-op as the output transform applies it, in order, after the bias.
struct OutputStep {
  PostOp::Kind kind = PostOp::Kind::relu;  // relu, leaky_relu, clip or sum
  float alpha = 0;
  float beta = 0;
};

// Whether the output transform applies `kind`.
bool output_transform_applies(PostOp::Kind kind);

class WinogradConv {
 public:
  WinogradConv(std::shared_ptr<const TransformedFilters> filters, const ConvShape& shape,
               std::vector<float> bias, std::vector<OutputStep> steps);

  // y = conv(x) + bias, then the steps; `residual` ([N, out_h, out_w, K]) is what a sum step adds
  // and may be y itself (each element is read before it is written, by the same thread).
  void run(const float* x, const float* residual, float* y) const;

  // Tiles per image along each axis; the last ones overhang the output where m does not divide it.
  int64_t tiles_h() const { return tile_axis(shape_.out_h, shape_.dilation_h, filters_->tile()).tiles(); }
  int64_t tiles_w() const { return tile_axis(shape_.out_w, shape_.dilation_w, filters_->tile()).tiles(); }

 private:
  std::shared_ptr<const TransformedFilters> filters_;
  ConvShape shape_;
  std::vector<float> bias_;  // empty: none
  std::vector<OutputStep> steps_;
  TileBlocking blocking_;
};

// Which vector variant the transforms run in ("avx512", "avx2" or "baseline"), for kernel names.
const char* transforms_isa();

}  // namespace kiln::winograd
