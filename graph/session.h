// A Session loads a model once and runs it many times. Plans are built per set of concrete input
// shapes and cached (bounded); plans are immutable, so concurrent run() calls are safe.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/settings.h"
#include "graph/graph.h"
#include "graph/observer.h"
#include "graph/plan.h"
#include "graph/plan_key.h"
#include "runtime/future.h"
#include "runtime/run_control.h"

namespace kiln {

using TensorMap = std::map<std::string, Tensor>;

// Plans kept per session before the oldest is evicted (unless Session::keep_plans asks for more).
inline constexpr size_t kMaxCachedPlans = 8;

class Session {
 public:
  // `settings` are this session's setting changes: they override the global settings and are
  // overridden by the calling thread's ScopedSettings guards.
  explicit Session(const std::filesystem::path& model_path, const Settings& settings = {});
  explicit Session(Model model, const Settings& settings = {});

  // The model. When the session was loaded from a file, initializers no cached plan reads at run time
  // (weights its kernels copied, values used only for folding) are released after planning, their
  // entries then holding undefined tensors, and reloaded from the file before any new plan is built:
  // not to be read while another thread's run may build a plan.
  const Model& model() const { return model_; }
  const std::vector<ValueInfo>& inputs() const { return model_.graph.inputs; }
  const std::vector<ValueInfo>& outputs() const { return model_.graph.outputs; }

  // Runs the model. Every graph input must be given, with the declared dtype and a shape that agrees
  // with the declared one (symbolic dims take any size, consistently across inputs); unknown names
  // are rejected. Returns one tensor per graph output, owned by the caller. The settings in force
  // on the calling thread when the run starts apply to all of it; settings that change kernel
  // choice (rows marked changes_plan, see PlanKey) select a plan built for them. The run leases
  // its threads from the process's thread budget (runtime/thread_budget.h): while other runs are in
  // flight it may get fewer than `threads` asks for, and then uses the plan built for what it got.
  TensorMap run(const TensorMap& inputs);
  // run(), stopped by `control` (runtime/run_control.h): checked when the run starts, after it has
  // waited for threads, after planning and before every step; a stopped run throws an Error of
  // kind cancelled or deadline_exceeded and leaves the session ready for the next run.
  TensorMap run(const TensorMap& inputs, const RunControl& control);

  // run() on the inter-op pool (runtime/interop.h), with the settings in force on the calling thread
  // now. The future holds the outputs or the exception the run threw, bad inputs included; it keeps
  // `inputs` (their storage) and `keep_alive` referenced until the run has finished, and releases
  // them before it is ready. The session must outlive the run.
  // `control`, when given, stops it as it stops run(); a run cancelled before its task starts
  // fails as soon as the task does.
  Future<TensorMap> run_async(TensorMap inputs, std::shared_ptr<const void> keep_alive = {},
                              std::shared_ptr<const RunControl> control = {});

  // This session's own setting changes.
  const Settings& session_settings() const { return session_settings_; }
  // The settings this session's run would use on the calling thread now.
  Settings settings() const { return current_settings(session_settings_); }

  // The plan run() would use for these input shapes (built and cached if new). Models whose shapes
  // depend on input values (a Reshape target fed as an input) need plan_for(inputs) instead.
  std::shared_ptr<const Plan> plan_for(const std::vector<Shape>& input_shapes);
  // The plan for these inputs (one per graph input, in order): their shapes, plus the values of the
  // inputs that define shapes, which are bound into the plan.
  std::shared_ptr<const Plan> plan_for(const std::vector<Tensor>& inputs);
  std::shared_ptr<const Plan> plan_for(const std::vector<Tensor>& inputs, const Settings& settings);

  // Keeps up to `count` plans (at least kMaxCachedPlans) before the oldest is evicted: a server
  // warms up one plan per batch size and must not lose them to eviction.
  void keep_plans(size_t count);

  // Observers see every later run until removed; they must outlive their registration.
  void add_observer(Observer* observer);
  void remove_observer(Observer* observer);

 private:
  // run() under `settings`, the snapshot its caller took (run_async takes it on the calling thread).
  TensorMap run_with(const TensorMap& inputs, Settings settings, const RunControl* control);
  // Checks `inputs` against the declared ones; bound[i] points at graph input i's tensor.
  void bind_inputs(const TensorMap& inputs, std::span<const Tensor*> bound) const;
  // The plan of the previous run when it fits these inputs and the current settings (checked
  // without allocating), else null.
  std::shared_ptr<const Plan> recent_plan(std::span<const Tensor* const> bound, const Settings& settings);
  std::shared_ptr<const Plan> cached_plan(const PlanKey& key, const std::vector<Shape>& shapes,
                                          const std::vector<Tensor>& values, const Settings& settings);

  // Frees initializers no plan holds (copied weights live on as the kernels' reordered copies), so
  // weights are not kept twice; reload_initializers() brings them back from the file before planning.
  // Views of a mapped file stay: their pages are dropped instead (core/mapped_file.h).
  void release_unreferenced_initializers();
  void reload_initializers();

  Model model_;
  Settings session_settings_;
  std::filesystem::path model_path_;  // empty when built from a Model: nothing is released then
  std::vector<std::string> released_initializers_;
  std::mutex planning_mutex_;  // one plan is built at a time (it reads model_, which may reload)
  std::mutex mutex_;           // guards plans_, plan_order_, plan_capacity_, value_inputs_ and observers_
  std::unordered_map<PlanKey, std::shared_ptr<const Plan>, PlanKeyHash> plans_;
  std::vector<bool> value_inputs_;                       // graph inputs whose values planning needs
  std::vector<std::shared_ptr<const Plan>> plan_order_;  // oldest first, for eviction
  size_t plan_capacity_ = kMaxCachedPlans;               // or what keep_plans asked
  std::vector<Observer*> observers_;
  std::shared_ptr<const Plan> recent_plan_;  // the previous run's, and its key
  PlanKey recent_key_;
};

// An observer registered for a scope: removed however the scope ends (a run that throws included).
class ScopedObserver {
 public:
  ScopedObserver(Session& session, Observer* observer) : session_(session), observer_(observer) {
    session_.add_observer(observer_);
  }
  ~ScopedObserver() { session_.remove_observer(observer_); }
  ScopedObserver(const ScopedObserver&) = delete;
  ScopedObserver& operator=(const ScopedObserver&) = delete;

 private:
  Session& session_;
  Observer* observer_;
};

}  // namespace kiln
