#include "core/allocator.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>

#include "core/error.h"
#include "core/events.h"

namespace kiln {
namespace {

class AlignedAllocator final : public Allocator {
 public:
  std::string_view name() const override { return "default"; }

  void* allocate(size_t bytes) override {
    void* pointer = ::operator new(std::max<size_t>(bytes, 1), std::align_val_t{kDefaultAlignment},
                                   std::nothrow);
    if (pointer == nullptr) {
      fail(ErrorKind::runtime, "out of memory allocating ", bytes, " bytes");
    }
    return pointer;
  }

  void deallocate(void* pointer, size_t) noexcept override {
    ::operator delete(pointer, std::align_val_t{kDefaultAlignment});
  }
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
