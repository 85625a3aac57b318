#include "backends/native/native_backend.h"

namespace kiln::native {

std::span<const KernelEntry> data_movement_kernels() { return {}; }

}  // namespace kiln::native
