// The graph layer's Subgraph (ops/subgraph.h): a graph attribute planned as a model of its own.
// Its inputs are the subgraph's own, then the values it captures from enclosing graphs that are
// only known when the enclosing plan runs; captured plan-time constants become its initializers,
// so its plans fold what they compute. One plan per set of input kinds, dtypes and shapes (and the
// values planning needed bound), built on first use and kept.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/settings.h"
#include "graph/graph.h"
#include "ops/subgraph.h"

namespace kiln {

class Plan;

class PlannedSubgraph final : public Subgraph {
 public:
  // Plans kept per subgraph: a body whose shapes change with the data (a Loop resizing each box)
  // plans per shape; beyond this many the oldest plan is dropped (runs using it keep it alive).
  static constexpr size_t kMaxPlans = 256;

  // `captures` and `capture_infos`: the enclosing node's inputs past the op's own, in order. A
  // `loop_body` returns the rows it appends to a loop-carried value instead of the whole value where
  // it computes `Concat(carried, rows)` along axis 0 and reads the carried value nowhere else.
  // `opsets` and `producer` are the enclosing model's.
  PlannedSubgraph(std::shared_ptr<const Graph> graph, std::map<std::string, int64_t> opsets,
                  std::string producer, std::vector<std::string> captures,
                  std::vector<TensorInfo> capture_infos, Settings settings, std::string label,
                  bool loop_body = false);

  size_t num_inputs() const override { return graph_->inputs.size(); }
  size_t num_outputs() const override { return graph_->outputs.size(); }
  const std::string& name() const override { return label_; }
  std::vector<TensorInfo> infer(std::span<const TensorInfo> inputs) const override;
  const std::vector<bool>& appended_outputs() const override { return appended_; }
  std::vector<Tensor> run(std::span<const Tensor> inputs) const override;

  // Plans built so far (for tests and explain).
  size_t plans() const;
  // For explain: how many plans it holds and the steps of the newest ("3 steps: Equal
  // native:equal, ..."), each nested subgraph's summary on its step in turn.
  std::string summary() const;

 private:
  struct Planned {
    std::shared_ptr<const Model> model;  // what the plan was built from, kept while it is
    std::shared_ptr<const Plan> plan;
  };
  // The plan for own inputs `infos`; `values` (one per own input, or empty at plan time) are bound
  // where planning needs an input's value.
  std::shared_ptr<const Plan> plan_for(std::span<const TensorInfo> infos,
                                       std::span<const Tensor> values) const;
  std::shared_ptr<const Model> model_for(std::span<const TensorInfo> infos) const;
  // Outputs as the subgraph declares them, shapes unknown: what infer gives when planning needs
  // values only the run has.
  std::vector<TensorInfo> declared_outputs() const;

  std::shared_ptr<const Graph> graph_;
  std::map<std::string, int64_t> opsets_;
  std::string producer_;
  std::vector<std::string> captures_;
  std::vector<TensorInfo> capture_infos_;
  std::vector<size_t> run_time_captures_;  // positions in captures_ fed at run time
  std::vector<bool> appended_;
  std::vector<bool> unread_;  // per model input (own, then fed captures): no node reads it
  Settings settings_;
  std::string label_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, Planned> plans_;
  mutable std::deque<std::string> plan_order_;  // keys, oldest first: past kMaxPlans the oldest go
};

}  // namespace kiln
