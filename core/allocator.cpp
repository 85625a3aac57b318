#include "core/allocator.h"

#include <algorithm>
#include <mutex>
#include <new>

#include "core/error.h"

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

struct Registry {
  std::mutex mutex;
  std::vector<Allocator*> allocators{&default_allocator()};
};

Registry& registry() {
  static Registry instance;
  return instance;
}

}  // namespace

Allocator& default_allocator() {
  static AlignedAllocator instance;
  return instance;
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

std::vector<std::string> registered_allocators() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  std::vector<std::string> names;
  for (Allocator* allocator : reg.allocators) names.emplace_back(allocator->name());
  return names;
}

}  // namespace kiln
