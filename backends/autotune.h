// Autotune (off by default, like cuDNN's benchmark mode): kernel selection times up to N kernels a
// node's candidates offer (Winograd's tiles, BLAS, oneDNN and its alternative implementations,
// native), each with the layout conversions it would add, and keeps the fastest; autotune_limit caps
// the candidates (0: all), as cuDNN's benchmark_limit does. Decisions are kept in the process's
// choice cache (backends/choice_cache.h) under choice_key, so a plan of an identical node, in any
// session, reuses them without timing again.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "backends/base/kernel.h"
#include "backends/base/kernel_request.h"
#include "backends/settings.h"

namespace kiln {

// The best of a few runs of `kernel` on zero-filled inputs of the request's shapes, in milliseconds,
// plus the Reorder steps choosing it implies (the kernels `settings` select for them): its inputs
// converted from the layouts they are stored in, its outputs converted to the layouts `preferred`
// (the first offer) writes. With a `sweep` buffer, every timed run starts from cold caches: the
// buffer is written on every thread first, so weights come from memory as they do in a model
// whose weights do not fit the caches (what decides between kernels that trade flops for bytes).
double time_candidate(const Kernel& kernel, const KernelRequest& request, std::span<const TensorInfo> outputs,
                      const Kernel& preferred, const Settings& settings, std::span<char> sweep = {});

// The sweep's size: past the last-level cache of the machines kiln is measured on.
inline constexpr size_t kColdCacheSweepBytes = size_t{64} << 20;

// What identifies a node for the choice cache: its op, attributes, input dtypes, shapes, layouts
// and the values of its constant inputs (weights: a kernel's offer may depend on them, as
// Winograd's accuracy does), its output shapes, fused post-ops, and the plan settings (thread count
// included).
std::string choice_key(const KernelRequest& request, std::span<const TensorInfo> outputs,
                       const Settings& settings);

}  // namespace kiln
