// Where each step stands against the machine's roofline (runtime/roofline.h): its arithmetic
// intensity (FLOPs per byte its inputs and outputs occupy), the bound that applies (compute when
// its FLOPs at the peak take longer than its bytes at the bandwidth, memory otherwise) and the
// fraction of that bound its measured time reached. Steps without counted FLOPs (elementwise,
// pooling, reorders) are memory-bound by definition.
//
// The bound is an upper limit on speed, so optimistic: the bytes are what a step must touch once
// (a kernel that re-reads its input from memory moves more). Activations are read at the bandwidth
// of a working set the step's size (warm in cache when they fit one, as values flowing between
// steps are); weights at the bandwidth of a working set the size of all the model's weights (every
// run reads them all, so a large model's come from memory each time). A fraction above 1 means the
// data came from a faster level than that, or, for Winograd, that the kernel did fewer FLOPs than
// the direct convolution counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json_writer.h"
#include "profiler/trace.h"
#include "runtime/roofline.h"

namespace kiln::profiler {

// What a step computes and moves (a trace event's flops, bytes and weight_bytes).
struct StepWork {
  int64_t flops = 0;
  int64_t bytes = 0;         // inputs and outputs as stored
  int64_t weight_bytes = 0;  // of those, the constant inputs
  // Its products are float32. bf16 and int8 products run on other units at other peaks, which the
  // roofline does not measure: such steps get no bound.
  bool fp32 = true;
};

struct StepBound {
  bool bounded = true;        // false for bf16 and int8 products (StepWork::fp32); the rest is then 0
  double flops_per_byte = 0;  // arithmetic intensity (0 without counted FLOPs)
  bool compute_bound = false;
  double bound_ms = 0;  // the time at the roofline
  double fraction = 0;  // bound_ms / measured ms (0 without a measurement)
  // Memory-bound steps: where their data comes from, "activations <= 2 MiB, weights from memory".
  std::string level;
};

// `model_weight_bytes`: what all the model's steps' weights occupy, read once per run.
StepBound step_bound(const Roofline& roofline, Isa isa, const StepWork& work, int64_t model_weight_bytes,
                     int threads, double measured_ms);

// A model's steps summed: their measured time, their time at the roofline, and what the steps on
// each side of the ridge could still save (measured minus bound, over steps slower than their bound).
// Steps without a bound are counted apart.
struct BoundTotals {
  int unbounded_steps = 0;
  double unbounded_ms = 0;
  double measured_ms = 0;  // of the bounded steps
  double bound_ms = 0;
  double compute_saving_ms = 0;
  double memory_saving_ms = 0;
  int compute_steps = 0;
  int memory_steps = 0;
  void add(const StepBound& bound, double measured_ms);
};

// A step event's work.
StepWork event_work(const TraceEvent& event);
// The weights a trace's runs read per run: its top-level step events' weight_bytes over its
// top-level runs (an If or Loop body's runs and steps are inside a step already).
int64_t weight_bytes_per_run(const Trace& trace);

// The threads a trace's plan ran with (its runs' most; 1 without runs).
int trace_threads(const Trace& trace);

// The top-level step events of a trace recorded here, summed per run (divided by the number of
// top-level runs).
BoundTotals trace_bound_totals(const Trace& trace, const Roofline& roofline, Isa isa);

// "roofline: steps at their bound would take X of Y ms; compute-bound steps (N) could save A ms,
// memory-bound steps (M) B ms (peak P GFLOP/s on T threads, ISA; SOURCE)\n".
std::string bound_totals_text(const BoundTotals& totals, const Roofline& roofline, Isa isa, int threads);

// The same as a JSON object: {"measured_ms", "bound_ms", "compute_saving_ms", "memory_saving_ms",
// "compute_steps", "memory_steps", "unbounded_steps", "unbounded_ms", "peak_gflops_per_s",
// "memory_gb_per_s", "isa", "threads", "source"}.
void write_bound_totals(JsonWriter& json, const BoundTotals& totals, const Roofline& roofline, Isa isa,
                        int threads);

// "C 12.3 45%": the bound (C compute, M memory), intensity and fraction, for tables; dashes
// without a bound.
std::string bound_cell(const StepBound& bound);

}  // namespace kiln::profiler
