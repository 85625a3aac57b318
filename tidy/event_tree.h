// The event tree as a pattern walks it: TorchTidy's traversal (torch/profiler/_pattern_matcher.py and
// _utils.py in PyTorch 1.13) over kiln's trace model. Built once per analysis in O(events): children
// and each thread's roots are index ranges, so parent, root, siblings, next and previous are O(1).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "profiler/trace.h"

namespace kiln::tidy {

using profiler::EventKind;
using profiler::Trace;
using profiler::TraceEvent;

// An event's index in Trace::events (its id - 1).
using EventIndex = uint32_t;
constexpr EventIndex kNoEvent = UINT32_MAX;

class EventTree {
 public:
  // Throws invalid_argument if `trace` has more events than an EventIndex can number.
  explicit EventTree(const Trace& trace);

  const Trace& trace() const { return trace_; }
  const TraceEvent& event(EventIndex index) const { return trace_.events[index]; }
  size_t size() const { return parent_.size(); }

  // kNoEvent for a root.
  EventIndex parent(EventIndex index) const { return parent_[index]; }
  // In start order.
  std::span<const EventIndex> children(EventIndex index) const {
    return {children_.data() + child_begin_[index], children_.data() + child_begin_[index + 1]};
  }
  // Every root, in start order (PyTorch's experimental_event_tree()).
  std::span<const EventIndex> roots() const { return roots_; }
  // The list an event is one of: its parent's children, or its thread's roots (TorchTidy's
  // siblings_of keys roots by start_tid). It includes the event, at position(index).
  std::span<const EventIndex> siblings(EventIndex index) const;
  size_t position(EventIndex index) const { return position_[index]; }
  // The sibling after / before it, or kNoEvent.
  EventIndex next(EventIndex index) const;
  EventIndex previous(EventIndex index) const;
  // The root above it (itself for a root).
  EventIndex root(EventIndex index) const { return root_[index]; }

  // Pre-order from the roots (TorchTidy's traverse_dfs), or from `from` (each with its subtree).
  std::vector<EventIndex> depth_first() const { return depth_first(roots_); }
  std::vector<EventIndex> depth_first(std::span<const EventIndex> from) const;
  // Level by level from the roots (traverse_bfs): all roots, then their children in order, ...
  std::vector<EventIndex> breadth_first() const;

 private:
  const Trace& trace_;
  std::vector<EventIndex> parent_;
  std::vector<uint32_t> child_begin_;  // children of i: children_[child_begin_[i], child_begin_[i + 1])
  std::vector<EventIndex> children_;
  std::vector<EventIndex> roots_;
  std::vector<uint32_t> thread_root_begin_;  // roots of thread t, in start order, likewise
  std::vector<EventIndex> thread_roots_;
  std::vector<uint32_t> position_;
  std::vector<EventIndex> root_;
};

}  // namespace kiln::tidy
