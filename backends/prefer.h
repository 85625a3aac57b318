// kiln::backends::prefer: naming the backends (and named kernels) that may run an op family, in
// order, instead of switching others off. A preference is a settings row per op family
// (prefer_conv, prefer_matmul, prefer_attention, prefer_quantized, prefer_other; backends/registry.h lists
// which op types each family holds): kernel selection asks the listed candidates in the listed order and no
// other, so a preference may leave out the native fallback that --disable cannot; a node none of
// the listed candidates takes is then a planning error listing every candidate's reason. The unit
// of choice is a backend ("onednn", "blas", "native": every kernel of it) or one named kernel
// ("math", "flash": attention's native kernels). An empty list is no preference: every backend in
// the registry's order.
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/settings.h"

namespace kiln::backends {

// The op families' names, in kOpFamilies' order: {"conv", "matmul", "attention", "quantized", "other"}.
std::vector<std::string> op_families();

// The settings change listing `names` for `families` (empty: every family). Throws kiln::Error
// (invalid_argument) naming an unknown or repeated name, or an unknown family.
Settings prefer_setting(std::span<const std::string_view> names,
                        std::span<const std::string_view> families = {});

// `names` for `families` on this thread's plans until destroyed.
class ScopedPrefer : public ScopedSettings {
 public:
  ScopedPrefer(std::initializer_list<std::string_view> names,
               std::initializer_list<std::string_view> families = {})
      : ScopedSettings(prefer_setting(std::span(names.begin(), names.size()),
                                      std::span(families.begin(), families.size()))) {}
  ScopedPrefer(std::span<const std::string_view> names, std::span<const std::string_view> families = {})
      : ScopedSettings(prefer_setting(names, families)) {}
};

// The same, globally.
void set_prefer(std::span<const std::string_view> names, std::span<const std::string_view> families = {});
// The calling thread's list for `family` (empty: no preference).
std::vector<std::string> preferred(std::string_view family);

// torch.backends.cuda.preferred_linalg_library's form, for products only: "default" (no
// preference) or the backend asked first for MatMul and Gemm (and Einsum nodes, which only native runs), the
// other backends after it in the registry's order. Global, like PyTorch's.
std::string preferred_linalg_library();
void set_preferred_linalg_library(std::string_view library);

}  // namespace kiln::backends
