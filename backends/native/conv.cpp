#include "backends/native/native_backend.h"

namespace kiln::native {

std::span<const KernelEntry> conv_kernels() { return {}; }

}  // namespace kiln::native
