// ChannelShuffle (ops/channel_shuffle.h) in the layout its input is stored in: plain values move
// whole channel planes, channels-last values permute each pixel's channels, so neither needs a
// Reorder. Bytes are copied, so one kernel serves every 4-byte dtype.
#include "ops/channel_shuffle.h"

#include <cstring>
#include <memory>

#include "backends/native/native_backend.h"
#include "backends/native/strided_copy.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

class ChannelShuffleKernel final : public Kernel {
 public:
  ChannelShuffleKernel(const Shape& shape, int64_t groups, Layout layout)
      : images_(shape[0]),
        channels_(shape[1]),
        positions_(shape[2] * shape[3]),
        groups_(groups),
        layout_(layout) {
    name_ = std::string("native:channel_shuffle_") + layout_name(layout);
  }

  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    const auto* src = static_cast<const uint32_t*>(inputs[0].raw_data());
    auto* dst = static_cast<uint32_t*>(outputs[0].raw_data());
    const int64_t per_group = channels_ / groups_;
    if (layout_ == Layout::plain) {
      // One plane per output channel: dst plane a * g + b is src plane b * per_group + a.
      const size_t plane_bytes = static_cast<size_t>(positions_) * sizeof(uint32_t);
      parallel_for(0, images_ * channels_, copy_cost(positions_ * static_cast<int64_t>(sizeof(uint32_t))),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t i = begin; i < end; ++i) {
                       const int64_t n = i / channels_, out = i % channels_;
                       const int64_t in = (out % groups_) * per_group + out / groups_;
                       std::memcpy(dst + i * positions_, src + (n * channels_ + in) * positions_,
                                   plane_bytes);
                     }
                   });
      return;
    }
    // Channels-last: every pixel's channels are a [g, C/g] matrix, transposed to [C/g, g].
    const int64_t groups = groups_;
    const int64_t channels = channels_;
    parallel_for(
        0, images_ * positions_, copy_cost(channels_ * static_cast<int64_t>(sizeof(uint32_t))),
        [&](int64_t begin, int64_t end) {
          for (int64_t pixel = begin; pixel < end; ++pixel) {
            const uint32_t* in = src + pixel * channels;
            uint32_t* out = dst + pixel * channels;
            if (groups == 2) {  // ShuffleNet v2's; the fixed stride lets the compiler interleave in vectors
              const uint32_t* second = in + per_group;
              for (int64_t a = 0; a < per_group; ++a) {
                out[2 * a] = in[a];
                out[2 * a + 1] = second[a];
              }
              continue;
            }
            for (int64_t a = 0; a < per_group; ++a) {
              for (int64_t b = 0; b < groups; ++b) out[a * groups + b] = in[b * per_group + a];
            }
          }
        });
  }
  std::string_view name() const override { return name_; }
  Layout input_layout(size_t) const override { return layout_; }
  Layout output_layout(size_t) const override { return layout_; }

 private:
  int64_t images_, channels_, positions_, groups_;
  Layout layout_;
  std::string name_;
};

}  // namespace

KernelOrReason create_channel_shuffle_kernel(const KernelRequest& request, std::span<const TensorInfo>) {
  const TensorInfo& x = request.op.input(0);
  const int64_t groups = request.op.attrs().require_int("groups");
  if (x.shape.size() != 4)
    return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                    "ChannelShuffle reads [N, C, H, W] values");
  if (groups <= 0 || x.shape[1] % groups != 0)
    return KernelOrReason::rejected(
        RefusalKind::unsupported_attribute,
        str_cat("ChannelShuffle's groups (", groups, ") must divide the channels (", x.shape[1], ")"));
  if (dtype_size(x.dtype) != sizeof(uint32_t))
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                    "native ChannelShuffle moves 4-byte elements only");
  const Layout layout = request.input_layout(0) == Layout::nhwc ? Layout::nhwc : Layout::plain;
  return {std::make_unique<ChannelShuffleKernel>(x.shape, groups, layout), {}, {}};
}

}  // namespace kiln::native
