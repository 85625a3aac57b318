// The native backend: portable reference kernels for every op kiln knows, always available, and the
// oracle every faster kernel is tested against. It links neither oneDNN nor BLAS.
#pragma once

#include <span>
#include <string_view>

#include "backends/backend.h"

namespace kiln {

const Backend& native_backend();

namespace native {

using KernelFactory = KernelOrReason (*)(const OpSpec& spec, std::span<const TensorInfo> outputs);

struct KernelEntry {
  std::string_view op_type;
  KernelFactory create;
};

// A backend's kernels as family tables (also the shape of the oneDNN backend's).
using FamilyTable = std::span<const KernelEntry> (*)();

// The factory of the first entry for `op_type` across `families`, or null.
KernelFactory find_kernel_factory(std::span<const FamilyTable> families, std::string_view op_type);

// Family tables, one per file under backends/native/ (mirroring ops/).
std::span<const KernelEntry> conv_kernels();
std::span<const KernelEntry> pool_kernels();
std::span<const KernelEntry> matmul_kernels();
std::span<const KernelEntry> elementwise_kernels();
std::span<const KernelEntry> normalization_kernels();
std::span<const KernelEntry> softmax_kernels();
std::span<const KernelEntry> reduce_kernels();
std::span<const KernelEntry> shape_kernels();
std::span<const KernelEntry> data_movement_kernels();

}  // namespace native
}  // namespace kiln
