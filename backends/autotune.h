// Autotune (off by default, like cuDNN's benchmark mode): kernel selection times up to N kernels a
// node's candidates offer (BLAS, oneDNN and its alternative implementations, native), each with the
// layout conversions it would add, and keeps the fastest. Choices are remembered per node description, so
// another plan with an identical node (same op, attributes, shapes, layouts, fusions, settings and thread
// count) reuses them without timing again.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "backends/kernel.h"
#include "backends/settings.h"

namespace kiln {

// The best of a few runs of `kernel` on zero-filled inputs of `spec`'s shapes, in milliseconds, plus
// the Reorder steps choosing it implies: its inputs converted from the layouts they are stored in,
// its outputs converted to the layouts `preferred` (the first offer) writes.
double time_candidate(const Kernel& kernel, const OpSpec& spec, std::span<const TensorInfo> outputs,
                      const Kernel& preferred);

// What identifies a node for the autotune cache.
std::string autotune_key(const OpSpec& spec, std::span<const TensorInfo> outputs, const Settings& settings);

struct AutotuneChoice {
  int backend = -1;  // kOnednnIndex etc.
  int alternative = 0;
};
std::optional<AutotuneChoice> cached_autotune_choice(const std::string& key);
void remember_autotune_choice(const std::string& key, AutotuneChoice choice);
// Forgets every remembered choice (tests, and after hardware settings change).
void clear_autotune_cache();

}  // namespace kiln
