// Where kiln's memory comes from: tensors, run arenas and kernel scratch buffers all allocate
// through the current allocator. Allocators are registered by name; "default" returns 64-byte-
// aligned blocks (a cache line, and the widest vector register kiln's kernels use), "counting"
// wraps it and counts. Each block goes back to the allocator it came from, so the current one can
// be replaced at any time (kiln::backends::set_allocator).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
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

// The allocator new tensors, arenas and scratch buffers use (default_allocator() until replaced).
Allocator& current_allocator();
void set_current_allocator(Allocator& allocator);

// "counting": the default allocator plus totals, for seeing what kiln allocates.
struct AllocationCounts {
  size_t allocations = 0;  // blocks handed out since the last reset
  size_t bytes = 0;        // their total size
  size_t live_bytes = 0;   // not yet returned
  size_t peak_live_bytes = 0;
};
AllocationCounts counting_allocator_counts();
void reset_counting_allocator_counts();

// Keeps the process's live byte count and, while a profile records memory, writes a memory event
// (core/events.h): `bytes` allocated (> 0) or freed (< 0), `tag` saying what for ("arena",
// "scratch", "tensor"; a static string). Every allocation through the registry calls it.
void note_allocation(int64_t bytes, const char* tag);

// A block from the current allocator, returned to the same allocator when destroyed. `tag` (a
// static string) says what it is for in the profiler's memory events.
class AllocatedBlock {
 public:
  AllocatedBlock() = default;
  explicit AllocatedBlock(size_t bytes, const char* tag = "scratch")
      : allocator_(&current_allocator()), bytes_(bytes), tag_(tag) {
    data_ = allocator_->allocate(bytes);
    note_allocation(static_cast<int64_t>(bytes), tag_);
  }
  ~AllocatedBlock() { release(); }
  AllocatedBlock(AllocatedBlock&& other) noexcept { *this = std::move(other); }
  AllocatedBlock& operator=(AllocatedBlock&& other) noexcept {
    release();
    allocator_ = other.allocator_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    tag_ = other.tag_;
    other.data_ = nullptr;
    return *this;
  }
  AllocatedBlock(const AllocatedBlock&) = delete;
  AllocatedBlock& operator=(const AllocatedBlock&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  void release() noexcept {
    if (data_ != nullptr) {
      allocator_->deallocate(data_, bytes_);
      note_allocation(-static_cast<int64_t>(bytes_), tag_);
    }
    data_ = nullptr;
  }
  Allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  const char* tag_ = "scratch";
};

}  // namespace kiln
