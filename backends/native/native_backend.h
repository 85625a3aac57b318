// The native backend: portable reference kernels for every op kiln knows, always available, and the
// oracle every faster kernel is tested against. It links neither oneDNN nor BLAS.
#pragma once

#include <span>
#include <string_view>

#include "backends/base/backend.h"
#include "backends/base/kernel_request.h"
#include "backends/base/kernel_table.h"
#include "ops/einsum_path.h"

namespace kiln {

const Backend& native_backend();

// Its options: how an Einsum orders its pairwise products (the einsum_optimize and einsum_strategy
// settings; left to right when not optimizing).
struct NativeOptions final : BackendOptions {
  bool einsum_optimize = true;
  EinsumStrategy einsum_strategy = EinsumStrategy::automatic;
};

namespace native {

// Native kernels need only the node: their factories take its OpSpec.
using KernelEntry = kiln::KernelEntry<OpSpec>;

// Family tables, one per file under backends/native/ (mirroring ops/).
std::span<const KernelEntry> conv_kernels();
std::span<const KernelEntry> conv_transpose_kernels();
std::span<const KernelEntry> pool_kernels();
std::span<const KernelEntry> matmul_kernels();
std::span<const KernelEntry> elementwise_kernels();
std::span<const KernelEntry> normalization_kernels();
std::span<const KernelEntry> softmax_kernels();
std::span<const KernelEntry> reduce_kernels();
std::span<const KernelEntry> shape_kernels();
std::span<const KernelEntry> data_movement_kernels();
std::span<const KernelEntry> resize_kernels();
std::span<const KernelEntry> indexing_kernels();
std::span<const KernelEntry> data_dependent_kernels();
std::span<const KernelEntry> roi_kernels();
std::span<const KernelEntry> grid_sample_kernels();
std::span<const KernelEntry> recurrent_kernels();
std::span<const KernelEntry> signal_kernels();
std::span<const KernelEntry> random_kernels();
std::span<const KernelEntry> sequence_kernels();
std::span<const KernelEntry> control_flow_kernels();
std::span<const KernelEntry> quantize_kernels();

// Attention's kernels are chosen by name (request.variant: "math" or "flash", attention.cpp), so
// their factory takes the whole request.
KernelOrReason create_attention_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs);
// Layout conversions (kiln's Reorder op) between plain and nhwc float32 values (reorder.cpp).
KernelOrReason create_reorder_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs);
// ChannelShuffle (ops/channel_shuffle.h) in its input's layout, plain or nhwc (channel_shuffle.cpp).
KernelOrReason create_channel_shuffle_kernel(const KernelRequest& request,
                                             std::span<const TensorInfo> outputs);
// Ops whose first input is stored nhwc and that run on it as stored (Slice, Concat), or a refusal: the
// other ops are asked in plain layout (data_movement.cpp).
KernelOrReason create_channels_last_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs);
// Einsum's contraction order follows the request's NativeOptions (einsum.cpp).
KernelOrReason create_einsum_kernel(const KernelRequest& request, std::span<const TensorInfo> outputs);

}  // namespace native
}  // namespace kiln
