#include "backends/choice_cache.h"

namespace kiln {

std::optional<KernelDecision> ChoiceCache::find(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto it = decisions_.find(key);
  if (it == decisions_.end()) return std::nullopt;
  return it->second;
}

void ChoiceCache::remember(const std::string& key, KernelDecision decision) {
  std::lock_guard lock(mutex_);
  if (decisions_.insert_or_assign(key, std::move(decision)).second) order_.push_back(key);
  if (order_.size() > kMaxEntries) {
    decisions_.erase(order_.front());
    order_.pop_front();
  }
}

void ChoiceCache::clear() {
  std::lock_guard lock(mutex_);
  decisions_.clear();
  order_.clear();
}

size_t ChoiceCache::size() const {
  std::lock_guard lock(mutex_);
  return decisions_.size();
}

ChoiceCache& choice_cache() {
  static ChoiceCache cache;
  return cache;
}

}  // namespace kiln
