// Native ConvTranspose and Col2Im. ConvTranspose (any spatial rank, groups, dilations,
// output_padding): per image and group, one GEMM gives every input pixel's patch (W^T x X:
// [M/group * kernel, pixels]), and a col2im pass adds each patch into the output at its strided
// place; Col2Im's input already holds the patches. Each output channel's plane is written only by
// its own patch rows, so channels are the unit of parallel work.
#include <algorithm>
#include <cstring>

#include "backends/base/function_kernel.h"
#include "backends/native/element_visit.h"
#include "backends/native/gemm.h"
#include "backends/native/native_backend.h"
#include "backends/native/thread_scratch.h"
#include "ops/conv.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

struct PatchScratch {};

// For every spatial dim, kernel tap k and input coordinate i: the output coordinate the tap lands
// on, or -1 where pads crop it away. Fixed at plan time, with each tap's index per dim.
struct Landing {
  std::vector<std::vector<int64_t>> at;    // [dim][k * in + i]
  std::vector<std::vector<int64_t>> taps;  // [tap][dim]
  std::vector<int64_t> out_strides;
};

Landing make_landing(const ConvTransposeParams& p) {
  Landing landing;
  const size_t rank = p.kernel.size();
  landing.out_strides.assign(rank, 1);
  for (size_t d = rank; d-- > 1;) landing.out_strides[d - 1] = landing.out_strides[d] * p.output[d];
  for (int64_t tap = 0; tap < product(p.kernel, 0, rank); ++tap) {
    std::vector<int64_t> k(rank);
    for (size_t d = rank, rest = static_cast<size_t>(tap); d-- > 0;) {
      k[d] = static_cast<int64_t>(rest) % p.kernel[d];
      rest /= static_cast<size_t>(p.kernel[d]);
    }
    landing.taps.push_back(std::move(k));
  }
  for (size_t d = 0; d < rank; ++d) {
    std::vector<int64_t> at;
    for (int64_t k = 0; k < p.kernel[d]; ++k) {
      for (int64_t i = 0; i < p.input_spatial[d]; ++i) {
        const int64_t o = i * p.strides[d] + k * p.dilations[d] - p.pads_begin[d];
        at.push_back(o >= 0 && o < p.output[d] ? o : -1);
      }
    }
    landing.at.push_back(std::move(at));
  }
  return landing;
}

// Adds patch rows [kernel taps x input pixels] of one output channel into its plane.
void add_patches(float* plane, const float* patches, const ConvTransposeParams& p, const Landing& landing) {
  const size_t rank = p.kernel.size();
  const int64_t taps = product(p.kernel, 0, rank);
  const int64_t pixels = product(p.input_spatial, 0, rank);
  const int64_t in_last = p.input_spatial.back();
  const int64_t in_rows = pixels / in_last;
  for (int64_t tap = 0; tap < taps; ++tap) {
    const std::vector<int64_t>& k = landing.taps[static_cast<size_t>(tap)];
    const int64_t* last = landing.at[rank - 1].data() + k[rank - 1] * in_last;
    for (int64_t row = 0; row < in_rows; ++row) {
      // The output row this input row's tap lands in, unless a leading dim is cropped.
      int64_t offset = 0;
      bool cropped = false;
      for (size_t d = rank - 1, rest = static_cast<size_t>(row); d-- > 0;) {
        const int64_t i = static_cast<int64_t>(rest) % p.input_spatial[d];
        rest /= static_cast<size_t>(p.input_spatial[d]);
        const int64_t o = landing.at[d][static_cast<size_t>(k[d] * p.input_spatial[d] + i)];
        cropped = cropped || o < 0;
        offset += o * landing.out_strides[d];
      }
      if (cropped) continue;
      const float* src = patches + tap * pixels + row * in_last;
      for (int64_t i = 0; i < in_last; ++i) {
        if (last[i] >= 0) plane[offset + last[i]] += src[i];
      }
    }
  }
}

KernelOrReason make_conv_transpose(const OpSpec& spec, std::span<const TensorInfo>) {
  if (spec.input(0).dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "native ConvTranspose runs float32 only");
  const ConvTransposeParams p = conv_transpose_params(spec);
  const Landing landing = make_landing(p);
  const size_t rank = p.kernel.size();
  const int64_t taps = product(p.kernel, 0, rank);
  const int64_t pixels = product(p.input_spatial, 0, rank);
  const int64_t plane = product(p.output, 0, rank);
  const int64_t in_per_group = p.in_channels / p.group;
  const int64_t out_per_group = p.out_channels / p.group;
  return make_kernel("native:conv_transpose", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    const float* x = inputs[0].data<float>();
    const float* w = inputs[1].data<float>();
    const float* bias = inputs.size() > 2 && inputs[2].defined() ? inputs[2].data<float>() : nullptr;
    float* y = dst[0].data<float>();
    const int64_t rows = out_per_group * taps;  // patch rows per group
    float* patches = thread_scratch_floats<PatchScratch>(static_cast<size_t>(rows * pixels));
    for (int64_t n = 0; n < p.batch; ++n) {
      for (int64_t g = 0; g < p.group; ++g) {
        // patches[m * taps + tap, pixel] = sum_c W[c, m, tap] * X[c, pixel] over the group's channels.
        const float* w_group = w + g * in_per_group * rows;
        const float* x_group = x + (n * p.in_channels + g * in_per_group) * pixels;
        sgemm(true, false, {rows, pixels, in_per_group}, 1.0f, w_group, rows, x_group, pixels, 0.0f, patches,
              pixels);
        float* y_group = y + (n * p.out_channels + g * out_per_group) * plane;
        parallel_for(0, out_per_group, taps * pixels, [&](int64_t begin, int64_t end) {
          for (int64_t m = begin; m < end; ++m) {
            float* out = y_group + m * plane;
            std::fill(out, out + plane, bias != nullptr ? bias[g * out_per_group + m] : 0.0f);
            add_patches(out, patches + m * taps * pixels, p, landing);
          }
        });
      }
    }
  });
}

// Col2Im: the input already holds the patches; only the col2im pass remains.
KernelOrReason make_col2im(const OpSpec& spec, std::span<const TensorInfo>) {
  if (spec.input(0).dtype != DType::f32)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "native Col2Im runs float32 only");
  const ConvTransposeParams p = col2im_params(spec);
  const Landing landing = make_landing(p);
  const int64_t patch = product(p.kernel, 0, p.kernel.size()) * product(p.input_spatial, 0, p.kernel.size());
  const int64_t plane = product(p.output, 0, p.output.size());
  return make_kernel("native:col2im", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    const float* x = inputs[0].data<float>();
    float* y = dst[0].data<float>();
    parallel_for(0, p.batch * p.out_channels, patch, [&](int64_t begin, int64_t end) {
      for (int64_t image_channel = begin; image_channel < end; ++image_channel) {
        float* out = y + image_channel * plane;
        std::fill(out, out + plane, 0.0f);
        add_patches(out, x + image_channel * patch, p, landing);
      }
    });
  });
}

constexpr KernelEntry kKernels[] = {
    {"ConvTranspose", make_conv_transpose},
    {"Col2Im", make_col2im},
};

}  // namespace

std::span<const KernelEntry> conv_transpose_kernels() {
  return kKernels;
}

}  // namespace kiln::native
