// The choice cache: kernel decisions made by timing (autotune), kept for the process so that no
// identical node is timed twice, whichever session plans it. An entry is a whole KernelDecision
// (chosen kernel, refusals, timings, rule) under a key naming the node's content (op, attributes,
// shapes, layouts, fused post-ops, the values of its constant inputs) and the plan settings it was
// timed under (thread count included: another count may favour another kernel). Entries are plain
// data, so the cache can be written to and read from a file. Thread-safe; bounded: past kMaxEntries
// the oldest is forgotten.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "backends/base/decision.h"

namespace kiln {

class ChoiceCache {
 public:
  static constexpr size_t kMaxEntries = 4096;

  std::optional<KernelDecision> find(const std::string& key) const;
  void remember(const std::string& key, KernelDecision decision);
  // Forgets every decision: plans built afterwards time their candidates again.
  void clear();
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, KernelDecision> decisions_;
  std::deque<std::string> order_;  // oldest first
};

// The process's cache.
ChoiceCache& choice_cache();

}  // namespace kiln
