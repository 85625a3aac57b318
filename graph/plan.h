// A Plan is everything decided for one model and one set of concrete input shapes: the order of
// steps, each step's kernel and where its inputs and outputs live, plan-time constants (folded
// subgraphs), and when each intermediate value can be released. Running only executes it.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/selection.h"
#include "graph/executor.h"
#include "graph/fused_node.h"
#include "graph/graph.h"
#include "graph/memory_plan.h"
#include "graph/step_graph.h"
#include "ops/op_spec.h"
#include "ops/quantize.h"

namespace kiln {

// What conv_algorithm auto's error budget (graph/error_budget.h) weighed for one layer.
struct ErrorShare {
  std::string baseline;  // the form taken without the budget: "F(2x2,3x3)", or "exact"
  std::string form;      // the faster, less accurate form weighed: "F(4x4,3x3)"
  double error = 0;      // its probe error, relative to the layer's output scale
  // Measured: how far the model's outputs move, relative to their scale, when this layer alone runs
  // the form instead of the baseline. Its ratio to `error` is how the model carries this layer's error.
  double output_change = 0;
  double saving = 0;   // predicted share of the layer's direct time the form saves over the baseline
  bool taken = false;  // within the budget: the layer may run it
};

// The budget's decision for a plan: what it allowed per layer, and why.
struct ErrorBudgetDecision {
  double budget = 0;                         // of the outputs' scale
  double spent = 0;                          // the taken layers' output changes, summed
  std::map<std::string, ErrorShare> layers;  // by node name: each layer weighed
  std::map<std::string, double> max_errors;  // by node name: KernelRequest::max_error of those taken
  double measure_ms = 0;                     // planning and running the model at batch 1 to decide
  std::string summary;                       // one line for explain
};

// What planning knew about one step, for explain, verbose and the profiler.
struct StepRecord {
  std::string node_name;
  std::string op_type;
  std::string backend;
  std::string kernel;
  std::vector<Shape> input_shapes;  // logical (ONNX) shapes
  std::vector<Shape> output_shapes;
  std::vector<DType> input_dtypes;  // logical dtypes (a bf16 layout stores an f32 value)
  std::vector<DType> output_dtypes;
  std::vector<Layout> input_layouts;  // how each input/output is stored
  std::vector<Layout> output_layouts;
  std::vector<FusedNode> fused;  // each node fused into this one, in graph order
  bool in_place = false;         // output 0 reuses the storage of a dying input
  // How the kernel was chosen: the rule, every candidate not chosen and why, what was timed.
  KernelDecision decision;
  // The settings that selection consulted beyond the candidate list, as "conv_algorithm=auto": the
  // op's precision setting and each asked backend's options that concern the op.
  std::vector<std::string> settings;
  // A fused form planning proposed for this node that no candidate took (the node then runs alone):
  // the nodes it would have fused, and each candidate's refusal of it.
  std::vector<FusedNode> unfused;
  std::vector<Refusal> fused_form_refusals;
  // What the kernel does differently from what was asked (precision), what planning rewrote
  // around it: each pass appends its own.
  std::vector<std::string> notes;
  // A quantized step's operand types, scales and zero points, accumulator and output rounding.
  std::optional<QuantizationSummary> quantization;
  // What conv_algorithm auto's error budget decided for the node, where it weighed one.
  std::optional<ErrorShare> error_share;
  double creation_ms = 0;             // kernel selection and creation (primitives, weight reorders)
  int threads = 0;                    // intra-op threads its kernel was created for and runs with
  int parallel_group = -1;            // parallel mode: the Plan::parallel_groups() entry it is in
  std::string parallel_note;          // parallel mode: why it keeps the run's count, if it does
};

struct PlanStep {
  std::unique_ptr<Kernel> kernel;
  std::vector<int> inputs;               // slot per node input; -1 for an absent optional input
  std::vector<int> outputs;              // slot per node output; -1 for an unused optional output
  std::vector<int> release_after;        // slots whose last reader is this step
  std::vector<TensorInfo> output_infos;  // every declared output as stored: stored shape and dtype
  int in_place_input = -1;  // input whose storage output 0 takes over (see Kernel::in_place_input)
  int backend_index = -1;   // the record's backend as a registry row position (verbose levels)
  int threads = 1;          // intra-op threads it runs with (the plan's, or fewer in a parallel group)
  // In the plan the error budget measures on (graph/error_budget.h): the node's less accurate forms
  // and the kernel of the fastest, which can run in `kernel`'s place; none elsewhere.
  ApproximateForms approximate_forms;
  std::unique_ptr<Kernel> approximate_kernel;
  bool overlaps = false;    // parallel mode: may run beside other steps (else it runs alone)
  StepRecord record;
};

// Parallel mode: a fork-join part of the graph (the steps between a step with several successors
// and the step where its branches meet) and what planning measured for it.
struct ParallelGroup {
  std::vector<int> steps;    // plan.steps() indexes
  bool parallel = false;     // its branches run at the same time, each step on fewer threads
  double sequential_ms = 0;  // its steps one after another on the plan's threads (measured)
  double parallel_ms = 0;    // the same steps scheduled as a parallel run does (from measurements)
  int reduced_threads = 0;   // the count its steps run with when parallel
};

// Which storage a slot's tensor ends up sharing; decides whether an output must be copied before
// it is handed to the caller.
enum class SlotOrigin { constant, graph_input, computed };

struct Slot {
  std::string name;
  TensorInfo info;                // logical dtype and shape; value for constants
  Layout layout = Layout::plain;  // how the value is stored
  SlotOrigin origin = SlotOrigin::computed;
};

// Thrown by Plan::build when a graph input's value is needed at plan time but was not bound.
class NeedsInputValue : public Error {
 public:
  NeedsInputValue(size_t input, std::string message)
      : Error(ErrorKind::not_implemented, std::move(message)), input_(input) {}
  size_t input() const { return input_; }

 private:
  size_t input_;
};

// Made by Plan::build (or build_once), as a shared pointer (the profiler keeps the plans its events
// point into).
class Plan : public std::enable_shared_from_this<Plan> {
 public:
  const std::vector<PlanStep>& steps() const { return steps_; }
  const std::vector<Slot>& slots() const { return slots_; }
  const std::vector<int>& input_slots() const { return input_slots_; }    // per graph input
  const std::vector<int>& output_slots() const { return output_slots_; }  // per graph output
  // Tensors a run starts from: constants filled in, everything else undefined.
  const std::vector<Tensor>& initial_values() const { return initial_values_; }
  int folded_nodes() const { return folded_nodes_; }
  int removed_nodes() const { return removed_nodes_; }
  int fused_nodes() const { return fused_nodes_; }
  int reorder_steps() const { return reorder_steps_; }
  // Where each intermediate value lives in a run's arena.
  const MemoryPlan& memory_plan() const { return memory_plan_; }
  // The intra-op threads the plan was built for (its steps' counts are this or fewer).
  int threads() const { return threads_; }
  // Parallel execution mode: runs start steps as their predecessors finish, several at a time as
  // long as their threads fit in thread_capacity() (the plan's threads or the cores, whichever is
  // more); step_graph() holds the dependencies, parallel_groups() what was measured.
  bool parallel() const { return parallel_; }
  int thread_capacity() const { return thread_capacity_; }
  const StepGraph& step_graph() const { return step_graph_; }
  const std::vector<ParallelGroup>& parallel_groups() const { return parallel_groups_; }
  // Why parallel mode runs every step on the plan's threads, when it does ("" otherwise).
  const std::string& parallel_summary() const { return parallel_summary_; }
  // The settings it was planned under, as PlanKey sees them ("onednn,blas,winograd,native;threads=2").
  const std::string& settings_text() const { return settings_text_; }
  // conv_algorithm auto's error budget: what it measured and allowed (empty: it did not apply).
  const ErrorBudgetDecision& error_budget() const { return error_budget_; }
  // Run contexts (arenas with prepared steps) not in use by a run; runs borrow and return them.
  RunContextPool& context_pool() const { return context_pool_; }

  // Builds the plan for `model` with one concrete shape per graph input (in graph input order).
  // `input_values` (empty, or one per graph input) binds the values of inputs that define shapes,
  // such as a Reshape target fed as a graph input: the plan folds them and is valid only for them.
  // Kernels are chosen under `settings` (enabled backends, precision, deterministic mode, autotune,
  // on settings.threads() threads; autotune's decisions go to the process's choice cache); with
  // settings.max_verbose() >= 2 each planned step is reported on the verbose sink.
  // Under conv_algorithm auto, convolutions may run less accurate kernels within the model's error
  // budget (graph/error_budget.h), which planning measures first on a batch-1 plan of the model.
  static std::shared_ptr<const Plan> build(const Model& model, const std::vector<Shape>& input_shapes,
                                           const std::vector<Tensor>& input_values = {},
                                           const Settings& settings = current_settings());
  // One plan, with no budget of its own: each node's kernel under `max_errors`
  // (KernelRequest::max_error by node name); with `weigh_factor` above 0, the plan the error budget
  // measures on: each step holds its less accurate forms, weighed at `weigh_factor` times the batch
  // (PlanStep::approximate_forms), with the fastest one's kernel. Plan::build uses it, and tests
  // build the budget's plans with it.
  static std::shared_ptr<Plan> build_once(const Model& model, const std::vector<Shape>& input_shapes,
                                          const std::vector<Tensor>& input_values, const Settings& settings,
                                          const std::map<std::string, double>& max_errors,
                                          int64_t weigh_factor);

 private:
  std::vector<PlanStep> steps_;
  std::vector<Slot> slots_;
  std::vector<int> input_slots_;
  std::vector<int> output_slots_;
  std::vector<Tensor> initial_values_;
  int folded_nodes_ = 0;
  int removed_nodes_ = 0;
  int fused_nodes_ = 0;
  int reorder_steps_ = 0;
  int threads_ = 1;
  int thread_capacity_ = 1;
  bool parallel_ = false;
  StepGraph step_graph_;
  std::vector<ParallelGroup> parallel_groups_;
  std::string parallel_summary_;
  std::string settings_text_;
  MemoryPlan memory_plan_;
  ErrorBudgetDecision error_budget_;
  mutable RunContextPool context_pool_;
};

}  // namespace kiln
