// An anti-pattern: a rule over the event tree that names what to change, in TorchTidy's shape
// (torch.profiler._pattern_matcher.Pattern in PyTorch 1.13): a name and a description, a skip rule
// with its reason, match(event) over a traversal, report(event) and summary(events). kiln adds what a
// rule cannot see in this trace (it still runs, as TorchTidy would), and a caveat where the rule is
// known to be wrong for this trace.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tidy/event_tree.h"
#include "tidy/source_location.h"
#include "tidy/step_flow.h"

namespace kiln::tidy {

// What the patterns may ask of the trace besides its events: what it recorded, and the flags it
// records (or that take PyTorch's default because it does not, noted in `assumed`).
struct TidyContext {
  explicit TidyContext(const EventTree& tree);

  const EventTree& tree;
  const Trace& trace;
  bool from_pytorch = false;   // a PyTorch source: the live profiler or one of its files
  bool with_stack = false;     // Python events recorded (the profile says, or any are in the trace)
  bool record_shapes = false;  // input shapes recorded (the profile says, or any are in the trace)
  bool caller_frames = false;  // Python events carry their caller's frame (exact locations)
  bool gpu_activity = false;   // the trace holds GPU work (kernels, memcpy, CUDA runtime calls)
  // CUDA architectures TorchTidy's FP32MatMulPattern checks (torch.cuda.get_arch_list() as sm_XY
  // numbers): the profiling PyTorch's list where the trace says it, else the GPUs the trace lists.
  std::vector<int> cuda_arches;
  // Flags the trace does not record, taken at PyTorch's default: "allow_tf32_cublas: ...".
  std::vector<std::string> assumed;
  // The traversals, computed once for every pattern.
  std::vector<EventIndex> depth_first;
  std::vector<EventIndex> breadth_first;
  // kiln traces: the data flow between each run's steps.
  StepFlow flow;

  // torch.backends.cuda.matmul.allow_tf32 when `event` ran: its recorded flag, else the trace's
  // fact, else PyTorch's default since 1.12 (false).
  bool allow_tf32_cublas(const TraceEvent& event) const;
  // True for PyTorch's TorchOp events (operators and record_function ranges).
  bool is_torch_op(const TraceEvent& event) const;
  SourceLocation location(EventIndex index) const { return source_location(tree, index); }

 private:
  std::optional<bool> trace_allow_tf32_;
};

// Whether an event is GPU work (a kernel, memory copy or set, a CUDA runtime or driver call).
bool is_gpu_work(const TraceEvent& event);

// Why a pattern says nothing about a trace (its reason), or nothing.
using Reason = std::optional<std::string>;

// What fixing one match changes, declared by its pattern next to its rule. The estimator
// (tidy_runner/estimate.h) measures fixes by their kind and never names a pattern.
struct Fix {
  enum class Kind : uint8_t {
    none,             // not estimable here: `what` says why
    settings,         // the model planned again with `settings` changed; the matched step timed in both plans
    step_removed,     // one of `steps` is no longer run (the cheapest, as measured): its time is saved
    planning_ahead,   // the matched planning happens before the steady state: its time is saved
    thread_budget,    // concurrent runs lease their threads from a budget at the cores
    torch_benchmark,  // PyTorch times the call as recorded and fixed (`torch_fix`: torch_benchmark.py's name)
  };
  Kind kind = Kind::none;
  std::vector<std::pair<std::string, std::string>> settings;  // settings: name and value, as text
  std::vector<EventIndex> steps;                              // step_removed
  std::string torch_fix;                                      // torch_benchmark
  std::string what;  // the fix in words (none: why there is no estimate), for the report's basis
};
inline constexpr Fix::Kind kFixKinds[] = {Fix::Kind::none,          Fix::Kind::settings,
                                          Fix::Kind::step_removed,  Fix::Kind::planning_ahead,
                                          Fix::Kind::thread_budget, Fix::Kind::torch_benchmark};
const char* fix_kind_name(Fix::Kind kind);
// The kind fix_kind_name names `name`; throws invalid_argument listing the kinds otherwise.
Fix::Kind fix_kind_from_name(std::string_view name);

class Pattern {
 public:
  enum class Traversal { depth_first, breadth_first };

  virtual ~Pattern() = default;

  // Which traces the rule reads: PyTorch's operators and Python calls (TorchTidy's rules), or kiln's
  // runs and steps (kiln's runtime patterns). On the other kind it is not evaluated.
  virtual bool reads_kiln_steps() const { return false; }
  // A rule that reads either kind (user patterns: they say themselves what they need).
  virtual bool reads_any_trace() const { return false; }

  // TorchTidy's `name` (its summary's and JSON report's key) and `description` (its advice).
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  virtual std::string url() const { return {}; }
  // TorchTidy's skip rule: a reason means no event is matched.
  virtual Reason skip(const TidyContext&) const { return std::nullopt; }
  // kiln: what the rule reads that this trace lacks. It still runs (TorchTidy would), but its count
  // says nothing; the report lists it as not evaluated.
  virtual Reason cannot_see(const TidyContext&) const { return std::nullopt; }
  // kiln: where the rule is known to be wrong on this trace, and what says it better.
  virtual Reason caveat(const TidyContext&) const { return std::nullopt; }
  virtual Traversal traversal() const { return Traversal::depth_first; }

  // Whether `event` is an instance. Called once per event in traversal() order, after reset();
  // patterns may keep state across one traversal (ForLoopIndexingPattern's visited set).
  virtual bool match(const TidyContext& context, EventIndex event) = 0;
  virtual void reset() {}
  // kiln's patterns: what this match is (the step or run, and why); empty for TorchTidy's rules,
  // whose message is the same for every match.
  virtual std::string detail(const TidyContext&, EventIndex) const { return {}; }
  // Why this match is one, in words shared by every match with the same cause (a refusal, a layout
  // change), so the report groups them; empty when the pattern has one cause.
  virtual std::string reason(const TidyContext&, EventIndex) const { return {}; }
  // The message for one match: the description and where in the user's code (TorchTidy's format).
  virtual std::string report(const TidyContext& context, EventIndex event) const;
  virtual std::string summary(const TidyContext& context, std::span<const EventIndex> events) const;
  // What fixing match `event` changes, for the estimator; by default nothing kiln can measure.
  virtual Fix fix(const TidyContext& context, EventIndex event) const;

  // The matches over the whole tree, in traversal order (none when skip() says why).
  virtual std::vector<EventIndex> matched_events(const TidyContext& context);
};

}  // namespace kiln::tidy
