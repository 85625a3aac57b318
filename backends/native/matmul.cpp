#include "backends/native/native_backend.h"

namespace kiln::native {

std::span<const KernelEntry> matmul_kernels() { return {}; }

}  // namespace kiln::native
