#include "core/memory_limit.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>

namespace kiln {
namespace {

std::atomic<uint64_t> lowered_limit{0};  // 0: the machine's memory

// The machine's physical memory in bytes (0 when the system does not say).
uint64_t physical_memory_bytes() {
  static const uint64_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    return pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) : 0;
  }();
  return bytes;
}

}  // namespace

uint64_t planning_memory_limit_bytes() {
  const uint64_t lowered = lowered_limit.load(std::memory_order_relaxed);
  const uint64_t physical = physical_memory_bytes();
  if (lowered == 0) return physical;
  return physical == 0 ? lowered : std::min(lowered, physical);
}

void set_planning_memory_limit(uint64_t bytes) {
  lowered_limit.store(bytes, std::memory_order_relaxed);
}

}  // namespace kiln
