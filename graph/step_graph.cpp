#include "graph/step_graph.h"

#include <algorithm>
#include <unordered_map>

#include "graph/plan.h"

namespace kiln {
namespace {

bool test_bit(const uint64_t* row, size_t bit) {
  return (row[bit / 64] >> (bit % 64)) & 1;
}
void set_bit(uint64_t* row, size_t bit) {
  row[bit / 64] |= uint64_t{1} << (bit % 64);
}

}  // namespace

StepGraph::StepGraph(const std::vector<PlanStep>& steps) {
  const size_t count = steps.size();
  successors_.resize(count);
  predecessors_.resize(count);
  std::unordered_map<int, int> producer;  // slot -> step writing it
  for (size_t s = 0; s < count; ++s) {
    for (int slot : steps[s].inputs) {
      auto it = producer.find(slot);
      if (slot < 0 || it == producer.end()) continue;
      std::vector<int>& before = predecessors_[s];
      if (std::find(before.begin(), before.end(), it->second) == before.end()) {
        before.push_back(it->second);
        successors_[it->second].push_back(static_cast<int>(s));
      }
    }
    for (int slot : steps[s].outputs) {
      if (slot >= 0) producer[slot] = static_cast<int>(s);
    }
  }
  words_ = (count + 63) / 64;
  ancestors_.assign(count * words_, 0);
  for (size_t s = 0; s < count; ++s) {
    uint64_t* row = &ancestors_[s * words_];
    for (int before : predecessors_[s]) {
      const uint64_t* theirs = &ancestors_[static_cast<size_t>(before) * words_];
      for (size_t w = 0; w < words_; ++w) row[w] |= theirs[w];
      set_bit(row, static_cast<size_t>(before));
    }
  }
}

bool StepGraph::precedes(int a, int b) const {
  return test_bit(&ancestors_[static_cast<size_t>(b) * words_], static_cast<size_t>(a));
}

std::vector<std::vector<int>> StepGraph::fork_join_groups() const {
  const size_t count = size();
  // Post-dominators as bit rows over steps plus a virtual exit (bit `count`) every output reaches.
  const size_t words = (count + 1 + 63) / 64;
  std::vector<uint64_t> post(count * words, 0);
  for (size_t v = count; v-- > 0;) {
    uint64_t* row = &post[v * words];
    if (successors_[v].empty()) {
      set_bit(row, count);
    } else {
      std::fill(row, row + words, ~uint64_t{0});
      for (int next : successors_[v]) {
        const uint64_t* theirs = &post[static_cast<size_t>(next) * words];
        for (size_t w = 0; w < words; ++w) row[w] &= theirs[w];
      }
    }
    set_bit(row, v);
  }
  std::vector<std::vector<int>> groups;
  for (size_t fork = 0; fork < count; ++fork) {
    if (successors_[fork].size() < 2) continue;
    // The nearest post-dominator is the first one in plan order after the fork.
    const uint64_t* row = &post[fork * words];
    size_t join = fork + 1;
    while (join < count && !test_bit(row, join)) ++join;
    if (join >= count) continue;  // the branches end at different outputs: no join to balance at
    std::vector<int> group;
    for (size_t s = fork + 1; s < join; ++s) {
      if (precedes(static_cast<int>(fork), static_cast<int>(s)) &&
          precedes(static_cast<int>(s), static_cast<int>(join)))
        group.push_back(static_cast<int>(s));
    }
    if (group.size() >= 2) groups.push_back(std::move(group));
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const std::vector<int>& a, const std::vector<int>& b) { return a.size() > b.size(); });
  return groups;
}

}  // namespace kiln
