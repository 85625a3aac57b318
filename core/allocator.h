// Where tensor bytes come from. Allocators are registered by name; the default one returns
// 64-byte-aligned blocks (a cache line, and the widest vector register kiln's kernels use).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

inline constexpr size_t kDefaultAlignment = 64;

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual std::string_view name() const = 0;
  // Returns a block of at least `bytes` bytes aligned to kDefaultAlignment; throws kiln::Error
  // (kind runtime) when memory is exhausted. allocate(0) returns a valid, unique pointer.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* pointer, size_t bytes) noexcept = 0;
};

// The process-wide default: aligned operator new.
Allocator& default_allocator();

// Registers `allocator` under its name (it must outlive every tensor it allocates); a second
// registration of the same name replaces the first.
void register_allocator(Allocator& allocator);
// Throws kiln::Error (invalid_argument) naming the registered allocators when `name` is unknown.
Allocator& find_allocator(std::string_view name);
std::vector<std::string> registered_allocators();

}  // namespace kiln
