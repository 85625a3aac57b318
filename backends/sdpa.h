// kiln::backends::sdpa: choosing the kernel that runs scaled dot-product attention, in the shape of
// PyTorch's torch.backends.cuda SDPA controls. The planner turns the attention nodes of an exported
// model into one step (graph/passes/attention_fusion.cpp); these calls choose, for the plans built
// after them, which kernels may run it and in which order (the sdpa_kernels setting: the first that
// can take a step runs it). Kernels: "math" (native, the scores materialized), "flash" (native, tiled
// with an online softmax, memory O(L)), "onednn" (oneDNN matmul, softmax, matmul primitives).
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/settings.h"
#include "core/tensor.h"

namespace kiln::backends::sdpa {

// The calling thread's list, in priority order.
std::vector<std::string> kernels();
// The settings change naming `kernels`: in the order given with set_priority, else in the default
// order (onednn, flash, math) restricted to them. Throws kiln::Error (invalid_argument) naming an
// unknown or repeated kernel.
Settings kernels_setting(std::span<const std::string_view> kernels, bool set_priority = false);

// Only `kernels` for this thread's plans until destroyed (torch.nn.attention.sdpa_kernel).
class ScopedKernels : public ScopedSettings {
 public:
  ScopedKernels(std::initializer_list<std::string_view> kernels, bool set_priority = false)
      : ScopedSettings(kernels_setting(std::span(kernels.begin(), kernels.size()), set_priority)) {}
  ScopedKernels(std::span<const std::string_view> kernels, bool set_priority = false)
      : ScopedSettings(kernels_setting(kernels, set_priority)) {}
};

// One kernel on or off in the global list (enable_flash_sdp): off removes it, on adds it back at
// its place in the default order. enabled() reads the calling thread's list.
void set_enabled(std::string_view kernel, bool enabled);
bool enabled(std::string_view kernel);

// What a call would attend over, for asking whether a kernel can take it (SDPAParams).
struct Params {
  Shape query;                    // [..., L, E]
  Shape key;                      // [..., S, E]
  Shape value;                    // [..., S, Ev]
  DType dtype = DType::f32;       // of query, key and value
  std::optional<Shape> mask = std::nullopt;  // broadcasts to [..., L, S]
  DType mask_dtype = DType::f32;  // f32: added to the scores; boolean: true takes part
  bool is_causal = false;
  std::optional<float> scale = std::nullopt;  // default 1 / sqrt(E)
};

// Why `kernel` cannot take `params` under the calling thread's settings (its backend disabled, not
// built, deterministic mode, the shapes or dtypes it does not take), or nothing when it can. An
// invalid `params` (shapes that do not fit) is one reason for every kernel.
std::vector<std::string> why_not(std::string_view kernel, const Params& params);
inline bool can_use(std::string_view kernel, const Params& params) {
  return why_not(kernel, params).empty();
}

// softmax(scale * Q K^T + mask) V on the calling thread's settings: the first kernel of its list
// that takes it runs it (with its threads). `mask` may be undefined; a boolean mask keeps the keys
// where it is true. Throws kiln::Error naming each listed kernel's reason when none can. `kernel`,
// when given, receives the name of the kernel that ran ("native:flash_attention:avx512").
Tensor attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& mask = {},
                 bool is_causal = false, std::optional<float> scale = std::nullopt,
                 std::string* kernel = nullptr);

}  // namespace kiln::backends::sdpa
