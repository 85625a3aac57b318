// Autotune (off by default, like cuDNN's benchmark mode): kernel selection times up to N kernels a
// node's candidates offer (BLAS, oneDNN and its alternative implementations, native), each with the
// layout conversions it would add, and keeps the fastest; autotune_limit caps the candidates (0: all),
// as cuDNN's benchmark_limit does. Choices are remembered per node description in the session's
// cache, so another plan of that session with an identical node (same op, attributes, shapes,
// layouts, fusions, settings and thread count) reuses them without timing again.
#pragma once

#include <deque>
#include <map>
#include <mutex>
#include <optional>
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

// What identifies a node for the autotune cache.
std::string autotune_key(const KernelRequest& request, std::span<const TensorInfo> outputs,
                         const Settings& settings);

struct AutotuneChoice {
  int backend = -1;  // position in all_backends()
  int alternative = 0;
  std::string_view variant;  // a named kernel of it (registry_data::kSdpaKernels), or empty
};

// Remembered choices, bounded: past kMaxEntries the oldest is forgotten. Thread-safe.
class AutotuneCache {
 public:
  static constexpr size_t kMaxEntries = 4096;

  std::optional<AutotuneChoice> find(const std::string& key) const;
  void remember(const std::string& key, AutotuneChoice choice);
  // Forgets every choice: plans built afterwards time their candidates again.
  void clear();
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, AutotuneChoice> choices_;
  std::deque<std::string> order_;  // oldest first
};

}  // namespace kiln
