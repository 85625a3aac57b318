#include "tidy/event_tree.h"

#include <algorithm>

#include "core/error.h"

namespace kiln::tidy {

EventTree::EventTree(const Trace& trace) : trace_(trace) {
  const size_t count = trace.events.size();
  KILN_CHECK(count < kNoEvent, invalid_argument, "tidy: a trace of ", count, " events is more than ",
             kNoEvent - 1, " can be analysed at once");
  parent_.assign(count, kNoEvent);
  uint32_t thread_count = static_cast<uint32_t>(trace.threads.size());
  for (size_t i = 0; i < count; ++i) {
    const TraceEvent& event = trace.events[i];
    thread_count = std::max(thread_count, event.thread + 1);
    if (event.parent_id != 0 && event.parent_id <= count)
      parent_[i] = static_cast<EventIndex>(event.parent_id - 1);
  }
  // Counting sort by parent (and roots by thread): ids are in start order, so every list comes out in
  // start order. begin[p] is where list p starts, begin[p + 1] where it ends.
  child_begin_.assign(count + 1, 0);
  thread_root_begin_.assign(thread_count + 1, 0);
  for (size_t i = 0; i < count; ++i) {
    if (parent_[i] != kNoEvent) {
      ++child_begin_[parent_[i] + 1];
    } else {
      ++thread_root_begin_[trace.events[i].thread + 1];
    }
  }
  for (size_t i = 1; i < child_begin_.size(); ++i) child_begin_[i] += child_begin_[i - 1];
  for (size_t i = 1; i < thread_root_begin_.size(); ++i) thread_root_begin_[i] += thread_root_begin_[i - 1];
  children_.resize(child_begin_.back());
  thread_roots_.resize(thread_root_begin_.back());
  roots_.reserve(thread_roots_.size());
  position_.assign(count, 0);
  std::vector<uint32_t> child_end(child_begin_.begin(), child_begin_.end() - 1);
  std::vector<uint32_t> root_end(thread_root_begin_.begin(), thread_root_begin_.end() - 1);
  for (size_t i = 0; i < count; ++i) {
    const EventIndex index = static_cast<EventIndex>(i);
    if (parent_[i] == kNoEvent) {
      const uint32_t thread = trace.events[i].thread;
      position_[i] = root_end[thread] - thread_root_begin_[thread];
      thread_roots_[root_end[thread]++] = index;
      roots_.push_back(index);
    } else {
      position_[i] = child_end[parent_[i]] - child_begin_[parent_[i]];
      children_[child_end[parent_[i]]++] = index;
    }
  }
  // Parents come first (ids are in start order), so a parent's root is known before its children's.
  root_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    EventIndex at = static_cast<EventIndex>(i);
    if (parent_[i] != kNoEvent && parent_[i] < i) {
      at = root_[parent_[i]];
    } else {
      while (parent_[at] != kNoEvent) at = parent_[at];  // a root, or a trace not numbered in order
    }
    root_[i] = at;
  }
}

std::span<const EventIndex> EventTree::siblings(EventIndex index) const {
  if (parent_[index] != kNoEvent) return children(parent_[index]);
  const uint32_t thread = trace_.events[index].thread;
  return {thread_roots_.data() + thread_root_begin_[thread],
          thread_roots_.data() + thread_root_begin_[thread + 1]};
}

EventIndex EventTree::next(EventIndex index) const {
  const std::span<const EventIndex> list = siblings(index);
  return position_[index] + 1 < list.size() ? list[position_[index] + 1] : kNoEvent;
}

EventIndex EventTree::previous(EventIndex index) const {
  return position_[index] > 0 ? siblings(index)[position_[index] - 1] : kNoEvent;
}

std::vector<EventIndex> EventTree::depth_first(std::span<const EventIndex> from) const {
  std::vector<EventIndex> order;
  std::vector<EventIndex> pending(from.rbegin(), from.rend());
  while (!pending.empty()) {
    const EventIndex index = pending.back();
    pending.pop_back();
    order.push_back(index);
    const std::span<const EventIndex> below = children(index);
    pending.insert(pending.end(), below.rbegin(), below.rend());
  }
  return order;
}

std::vector<EventIndex> EventTree::breadth_first() const {
  std::vector<EventIndex> order(roots_.begin(), roots_.end());
  order.reserve(size());
  for (size_t next = 0; next < order.size(); ++next) {
    const std::span<const EventIndex> below = children(order[next]);
    order.insert(order.end(), below.begin(), below.end());
  }
  return order;
}

}  // namespace kiln::tidy
