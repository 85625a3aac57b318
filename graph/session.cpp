#include "graph/session.h"

#include <algorithm>
#include <array>
#include <optional>

#include "backends/selection.h"
#include "core/error.h"
#include "core/events.h"
#include "core/mapped_file.h"
#include "graph/executor.h"
#include "graph/onnx_import.h"
#include "graph/verbose.h"
#include "runtime/core_load.h"
#include "runtime/interop.h"
#include "runtime/thread_budget.h"

namespace kiln {
namespace {

std::string expected_inputs(const std::vector<ValueInfo>& inputs) {
  std::string names;
  for (const ValueInfo& input : inputs) names += str_cat(names.empty() ? "" : ", ", "'", input.name, "'");
  return names.empty() ? "none" : names;
}

}  // namespace

Session::Session(const std::filesystem::path& model_path, const Settings& settings)
    : Session(load_onnx_model(model_path, current_settings(settings).on("use_mmap")), settings) {
  model_path_ = model_path;
}

Session::Session(Model model, const Settings& settings)
    : model_(std::move(model)), session_settings_(settings) {
  core_load();  // opens a load window, so the first runs can already adapt to other processes
}

void Session::keep_plans(size_t count) {
  std::lock_guard lock(mutex_);
  plan_capacity_ = std::max(kMaxCachedPlans, count);
}

void Session::bind_inputs(const TensorMap& inputs, std::span<const Tensor*> bound) const {
  for (const auto& entry : inputs) {
    const std::string& name = entry.first;  // clang 14 cannot capture structured bindings
    const bool known = std::any_of(this->inputs().begin(), this->inputs().end(),
                                   [&](const ValueInfo& input) { return input.name == name; });
    KILN_CHECK(known, invalid_argument, "unknown input '", name, "' (the model's inputs are ",
               expected_inputs(this->inputs()), ")");
  }
  for (size_t i = 0; i < this->inputs().size(); ++i) {
    const ValueInfo& declared = this->inputs()[i];
    auto it = inputs.find(declared.name);
    KILN_CHECK(it != inputs.end(), invalid_argument, "missing input '", declared.name, "' (",
               dtype_name(declared.dtype), " ", dims_to_string(declared.shape), ")");
    const Tensor& tensor = it->second;
    bound[i] = &tensor;
    if (is_optional(declared.kind) && !tensor.defined()) continue;  // an empty optional
    KILN_CHECK(tensor.defined(), invalid_argument, "input '", declared.name, "' is an undefined tensor");
    const bool sequence = holds_sequence(declared.kind);
    KILN_CHECK(tensor.is_sequence() == sequence, type_mismatch, "input '", declared.name, "' must be a ",
               sequence ? "sequence (a list of tensors)" : "tensor", ", got a ",
               tensor.is_sequence() ? "sequence" : "tensor");
    KILN_CHECK(tensor.dtype() == declared.dtype, type_mismatch, "input '", declared.name, "' must be ",
               sequence ? "a sequence of " : "", dtype_name(declared.dtype), ", got ",
               dtype_name(tensor.dtype()));
    for (size_t e = 0; e < tensor.elements().size(); ++e) {
      KILN_CHECK(tensor.elements()[e].is_contiguous(), invalid_argument, "input '", declared.name,
                 "' element ", e, " must be contiguous");
    }
    KILN_CHECK(tensor.is_contiguous(), invalid_argument, "input '", declared.name, "' must be contiguous");
  }
}

std::shared_ptr<const Plan> Session::recent_plan(std::span<const Tensor* const> bound,
                                                 const Settings& settings) {
  const std::array<int32_t, kSettingSlotCount> plan_settings = settings.plan_values();
  std::lock_guard lock(mutex_);
  if (!recent_plan_ || !recent_key_.matches(plan_settings, bound)) return nullptr;
  if (std::find(value_inputs_.begin(), value_inputs_.end(), true) != value_inputs_.end()) return nullptr;
  return recent_plan_;
}

std::shared_ptr<const Plan> Session::plan_for(const std::vector<Shape>& input_shapes) {
  const Settings settings = this->settings();
  return cached_plan(
      PlanKey{settings.plan_values(), input_shapes, std::vector<std::string>(input_shapes.size())},
      input_shapes, {}, settings);
}

std::shared_ptr<const Plan> Session::plan_for(const std::vector<Tensor>& inputs) {
  return plan_for(inputs, settings());
}

std::shared_ptr<const Plan> Session::plan_for(const std::vector<Tensor>& inputs, const Settings& settings) {
  std::vector<Shape> shapes;
  for (const Tensor& input : inputs) shapes.push_back(input.shape());
  // Each retry binds one more input's value, so this ends after at most one retry per input.
  for (size_t attempt = 0;; ++attempt) {
    std::vector<Tensor> values(inputs.size());
    std::vector<std::string> value_bytes(inputs.size());
    {
      std::lock_guard lock(mutex_);
      value_inputs_.resize(inputs.size(), false);
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (!value_inputs_[i]) continue;
        values[i] = inputs[i];
        value_bytes[i].assign(static_cast<const char*>(inputs[i].raw_data()), inputs[i].nbytes());
      }
    }
    try {
      return cached_plan(PlanKey{settings.plan_values(), shapes, value_bytes}, shapes, values, settings);
    } catch (const NeedsInputValue& needs) {
      if (attempt >= inputs.size() || needs.input() >= inputs.size()) throw;
      std::lock_guard lock(mutex_);
      if (value_inputs_[needs.input()]) throw;
      value_inputs_[needs.input()] = true;
    }
  }
}

std::shared_ptr<const Plan> Session::cached_plan(const PlanKey& key, const std::vector<Shape>& shapes,
                                                 const std::vector<Tensor>& values,
                                                 const Settings& settings) {
  {
    std::lock_guard lock(mutex_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
  }
  std::lock_guard planning(planning_mutex_);
  {
    // Another thread may have built it while this one waited.
    std::lock_guard lock(mutex_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
  }
  reload_initializers();
  // Planning is an event of its own: in steady state it means a plan-cache miss (tidy reports them).
  events::Scope planning_event(events::EventKind::plan, nullptr, 0);
  std::shared_ptr<const Plan> plan = Plan::build(model_, shapes, values, settings);
  if (planning_event.id() != 0) {
    events::keep_alive(plan);
    planning_event.set_subject(plan.get());
  }
  struct ReleaseAfterwards {
    Session& session;
    ~ReleaseAfterwards() { session.release_unreferenced_initializers(); }
  } release_afterwards{*this};
  // Planning read the weights; those that kernels copied are not read again, and the pages of those
  // read at run time come back when they are.
  for (const auto& [name, tensor] : model_.graph.initializers) {
    if (tensor.defined() && !tensor.is_sequence()) release_mapped_pages(tensor.raw_data(), tensor.nbytes());
  }
  std::lock_guard lock(mutex_);
  auto [it, inserted] = plans_.emplace(key, plan);
  if (inserted) {
    plan_order_.push_back(plan);
    if (plan_order_.size() > plan_capacity_) {
      const std::shared_ptr<const Plan> oldest = plan_order_.front();
      plan_order_.erase(plan_order_.begin());
      std::erase_if(plans_, [&](const auto& entry) { return entry.second == oldest; });
    }
  }
  return it->second;
}

void Session::release_unreferenced_initializers() {
  if (model_path_.empty()) return;
  for (auto& [name, tensor] : model_.graph.initializers) {
    // The model's entry is the only owner: no cached plan reads this value at run time.
    if (tensor.defined() && tensor.storage_owners() == 1) {
      tensor = Tensor{};
      released_initializers_.push_back(name);
    }
  }
}

void Session::reload_initializers() {
  if (released_initializers_.empty()) return;
  Model fresh = load_onnx_model(model_path_, settings().on("use_mmap"));
  for (const std::string& name : released_initializers_) {
    auto it = fresh.graph.initializers.find(name);
    KILN_CHECK(it != fresh.graph.initializers.end(), runtime, "'", model_path_.string(),
               "' changed since it was loaded: initializer '", name, "' is gone");
    model_.graph.initializers[name] = std::move(it->second);
  }
  released_initializers_.clear();
}

void Session::add_observer(Observer* observer) {
  std::lock_guard lock(mutex_);
  observers_.push_back(observer);
}

void Session::remove_observer(Observer* observer) {
  std::lock_guard lock(mutex_);
  std::erase(observers_, observer);
}

TensorMap Session::run(const TensorMap& inputs) {
  // The whole run, planning included, sees the settings in force now on this thread.
  return run_with(inputs, settings(), nullptr);
}

TensorMap Session::run(const TensorMap& inputs, const RunControl& control) {
  return run_with(inputs, settings(), &control);
}

Future<TensorMap> Session::run_async(TensorMap inputs, std::shared_ptr<const void> keep_alive,
                                     std::shared_ptr<const RunControl> control) {
  return fork([this, inputs = std::move(inputs), settings = settings(), keep_alive = std::move(keep_alive),
               control = std::move(control)] { return run_with(inputs, settings, control.get()); },
              "run_async");
}

TensorMap Session::run_with(const TensorMap& inputs, Settings settings, const RunControl* control) {
  if (control != nullptr) control->check("before it started");
  // Up to kInlineInputs inputs are bound without allocating.
  constexpr size_t kInlineInputs = 16;
  std::array<const Tensor*, kInlineInputs> inline_bound{};
  std::vector<const Tensor*> many_bound;
  const size_t count = this->inputs().size();
  if (count > kInlineInputs) many_bound.resize(count);
  const std::span<const Tensor*> bound = count > kInlineInputs
                                             ? std::span<const Tensor*>(many_bound)
                                             : std::span<const Tensor*>(inline_bound).first(count);
  bind_inputs(inputs, bound);
  // At the default count a run gives up the cores other processes keep busy (runtime/core_load.h).
  const bool parallel = settings.get("execution_mode") == static_cast<int>(ExecutionMode::parallel);
  const int configured = settings.threads();
  int threads = configured;
  const int cores = parallel ? available_cores() : 0;  // what parallel mode's branches may use together
  int usable_cores = cores;
  std::optional<CoreLoad> load;
  if (settings.on("adapt_to_load") && settings.threads_are_default()) {
    load = core_load();
    if (!load->measured) load.reset();
  }
  if (load) {
    threads = std::min(threads, load->free_cores);
    usable_cores = std::min(usable_cores, load->free_cores);
  }
  // A run leases the threads it may use: its count, or in parallel mode whatever its branches
  // may use together (Plan::thread_capacity). With fewer granted it runs the plan for what it got.
  const int asked = parallel ? std::max(configured, cores) : configured;
  const ThreadLease lease(parallel ? std::max(threads, usable_cores) : threads);
  if (control != nullptr) control->check("after waiting for threads");
  const int granted = std::min(threads, lease.threads());
  if (granted < configured) settings.set("threads", granted);
  if ((lease.threads() != asked || lease.waited()) && settings.max_verbose() >= 1) {
    const std::string adapted = load && threads < configured
                                    ? str_cat(",free cores:", load->free_cores,
                                              ",busy elsewhere:", cores_text(load->busy_elsewhere), " cores")
                                    : std::string();
    write_verbose_line(settings, str_cat("kiln_verbose,run,threads:", lease.threads(), ",asked:", asked,
                                         adapted, ",budget:", lease.budget(), ",held by other runs:",
                                         lease.held_by_others(), ",waited:", lease.waited() ? 1 : 0));
  }

  std::shared_ptr<const Plan> plan = recent_plan(bound, settings);
  if (!plan) {
    std::vector<Tensor> tensors;
    for (const Tensor* input : bound) tensors.push_back(*input);
    plan = plan_for(tensors, settings);
    std::lock_guard lock(mutex_);
    recent_plan_ = plan;
    recent_key_ = PlanKey{settings.plan_values(), {}, std::vector<std::string>(tensors.size())};
    for (const Tensor& tensor : tensors) recent_key_.shapes.push_back(tensor.shape());
  }
  // A copy, so observers can be removed during a run; up to kInlineObservers without allocating.
  constexpr size_t kInlineObservers = 8;
  std::array<Observer*, kInlineObservers> inline_observers{};
  std::vector<Observer*> many_observers;
  std::span<Observer* const> observers;
  {
    std::lock_guard lock(mutex_);
    if (observers_.size() <= kInlineObservers) {
      std::copy(observers_.begin(), observers_.end(), inline_observers.begin());
      observers = std::span<Observer* const>(inline_observers).first(observers_.size());
    } else {
      many_observers = observers_;
      observers = many_observers;
    }
  }
  TensorMap outputs;
  if (control != nullptr) control->check("after planning");
  std::vector<Tensor> results = execute_plan(*plan, bound, observers, settings, lease.threads(), control);
  for (size_t i = 0; i < results.size(); ++i) outputs[this->outputs()[i].name] = std::move(results[i]);
  return outputs;
}

}  // namespace kiln
