// The dependencies between a plan's steps: step b depends on step a when b reads a value a writes
// (directly or through values sharing its storage). A sequential run follows the plan's order; a
// parallel run may start any step whose predecessors are done, so everything that must hold in
// every order (memory reuse, in-place writes) is decided with precedes(), never with the order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln {

struct PlanStep;

class StepGraph {
 public:
  StepGraph() = default;
  // `steps` in plan order (every step's producers come before it).
  explicit StepGraph(const std::vector<PlanStep>& steps);

  size_t size() const { return successors_.size(); }
  const std::vector<int>& successors(int step) const { return successors_[step]; }
  const std::vector<int>& predecessors(int step) const { return predecessors_[step]; }
  // True when `a` finishes before `b` starts in every run: a is an ancestor of b.
  bool precedes(int a, int b) const;
  // True when neither precedes the other: a parallel run may overlap them.
  bool independent(int a, int b) const { return a != b && !precedes(a, b) && !precedes(b, a); }

  // Fork-join groups: for each step with two or more successors, the steps strictly between it
  // and its nearest post-dominator (the first step every path from it reaches; none when paths end
  // at different graph outputs: then every descendant). Largest first; nested groups follow the
  // groups containing them.
  std::vector<std::vector<int>> fork_join_groups() const;

 private:
  std::vector<std::vector<int>> successors_;
  std::vector<std::vector<int>> predecessors_;
  size_t words_ = 0;
  std::vector<uint64_t> ancestors_;  // row per step: a bit per step that precedes it
};

}  // namespace kiln
