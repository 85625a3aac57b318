#include "core/allocator.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <vector>

#include "core/error.h"
#include "core/events.h"

namespace kiln {
namespace {

// Large blocks are kept when freed and handed out again for a request of the same size. A graph
// output the caller frees after every run would otherwise come back from the C library as fresh
// pages each time (glibc unmaps or trims blocks this large), and faulting them in measured 1.1 ms
// of a 44 ms BERT-base-sized encoder run (its 384 KiB output), 3%. Bounded, so a program that
// stops using kiln keeps at most kMaxRecycledBytes.
constexpr size_t kMinRecycledBytes = 64 * 1024;
constexpr size_t kMaxRecycledBlocks = 8;
constexpr size_t kMaxRecycledBytes = 64 * 1024 * 1024;

class AlignedAllocator final : public Allocator {
 public:
  AlignedAllocator() { recycled_.reserve(kMaxRecycledBlocks); }  // deallocate never allocates
  std::string_view name() const override { return "default"; }

  void* allocate(size_t bytes) override {
    if (bytes >= kMinRecycledBytes) {
      std::lock_guard lock(mutex_);
      for (auto it = recycled_.begin(); it != recycled_.end(); ++it) {
        if (it->bytes != bytes) continue;
        void* pointer = it->pointer;
        recycled_bytes_ -= bytes;
        recycled_.erase(it);
        return pointer;
      }
    }
    void* pointer = ::operator new(std::max<size_t>(bytes, 1), std::align_val_t{kDefaultAlignment},
                                   std::nothrow);
    if (pointer == nullptr) {
      fail(ErrorKind::runtime, "out of memory allocating ", bytes, " bytes");
    }
    return pointer;
  }

  void deallocate(void* pointer, size_t bytes) noexcept override {
    if (bytes >= kMinRecycledBytes && bytes <= kMaxRecycledBytes) {
      std::lock_guard lock(mutex_);
      // The oldest blocks go first to make room.
      while (!recycled_.empty() &&
             (recycled_.size() >= kMaxRecycledBlocks || recycled_bytes_ + bytes > kMaxRecycledBytes)) {
        release(recycled_.front().pointer);
        recycled_bytes_ -= recycled_.front().bytes;
        recycled_.erase(recycled_.begin());
      }
      recycled_.push_back({pointer, bytes});
      recycled_bytes_ += bytes;
      return;
    }
    release(pointer);
  }

 private:
  struct Block {
    void* pointer;
    size_t bytes;
  };
  static void release(void* pointer) noexcept {
    ::operator delete (pointer, std::align_val_t{kDefaultAlignment});
  }

  std::mutex mutex_;
  std::vector<Block> recycled_;  // oldest first
  size_t recycled_bytes_ = 0;
};

class CountingAllocator final : public Allocator {
 public:
  std::string_view name() const override { return "counting"; }

  void* allocate(size_t bytes) override {
    void* pointer = default_allocator().allocate(bytes);
    std::lock_guard lock(mutex_);
    ++counts_.allocations;
    counts_.bytes += bytes;
    counts_.live_bytes += bytes;
    counts_.peak_live_bytes = std::max(counts_.peak_live_bytes, counts_.live_bytes);
    return pointer;
  }

  void deallocate(void* pointer, size_t bytes) noexcept override {
    default_allocator().deallocate(pointer, bytes);
    std::lock_guard lock(mutex_);
    counts_.live_bytes -= std::min(bytes, counts_.live_bytes);
  }

  AllocationCounts counts() {
    std::lock_guard lock(mutex_);
    return counts_;
  }
  void reset() {
    std::lock_guard lock(mutex_);
    counts_ = AllocationCounts{.live_bytes = counts_.live_bytes, .peak_live_bytes = counts_.live_bytes};
  }

 private:
  std::mutex mutex_;
  AllocationCounts counts_;
};

CountingAllocator& counting_allocator() {
  static CountingAllocator* const instance = new CountingAllocator;  // never destroyed, as below
  return *instance;
}

struct Registry {
  std::mutex mutex;
  std::vector<Allocator*> allocators{&default_allocator(), &counting_allocator()};
};

std::atomic<Allocator*> current{nullptr};  // null: the default

Registry& registry() {
  static Registry* const instance = new Registry;
  return *instance;
}

}  // namespace

void note_allocation(int64_t bytes, const char* tag) {
  events::record_memory(bytes, tag);
}

Allocator& default_allocator() {
  // Never destroyed: a block may be freed while the process exits (a finished inter-op task drops
  // the last reference to a run's outputs on a pool thread as static destructors run).
  static AlignedAllocator* const instance = new AlignedAllocator;
  return *instance;
}

void register_allocator(Allocator& allocator) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  for (Allocator*& existing : reg.allocators) {
    if (existing->name() == allocator.name()) {
      existing = &allocator;
      return;
    }
  }
  reg.allocators.push_back(&allocator);
}

Allocator& find_allocator(std::string_view name) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  std::string known;
  for (Allocator* allocator : reg.allocators) {
    if (allocator->name() == name) return *allocator;
    known += known.empty() ? "" : ", ";
    known += allocator->name();
  }
  fail(ErrorKind::invalid_argument, "unknown allocator '", name, "' (registered: ", known, ")");
}

Allocator& current_allocator() {
  Allocator* allocator = current.load(std::memory_order_acquire);
  return allocator != nullptr ? *allocator : default_allocator();
}

void set_current_allocator(Allocator& allocator) {
  current.store(&allocator, std::memory_order_release);
}

AllocationCounts counting_allocator_counts() {
  return counting_allocator().counts();
}

void reset_counting_allocator_counts() {
  counting_allocator().reset();
}

std::vector<std::string> registered_allocators() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  std::vector<std::string> names;
  for (Allocator* allocator : reg.allocators) names.emplace_back(allocator->name());
  return names;
}

}  // namespace kiln
