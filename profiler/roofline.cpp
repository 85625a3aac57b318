#include "profiler/roofline.h"

#include <algorithm>
#include <cstdio>

namespace kiln::profiler {

StepBound step_bound(const Roofline& roofline, Isa isa, const StepWork& work, int64_t model_weight_bytes,
                     int threads, double measured_ms) {
  StepBound bound;
  if (work.flops > 0 && !work.fp32) {
    bound.bounded = false;
    return bound;
  }
  const double peak = roofline.peak_gflops(isa, threads);
  const int64_t weights = std::clamp<int64_t>(work.weight_bytes, 0, work.bytes);
  const int64_t activations = work.bytes - weights;
  const int64_t weights_set = std::max(model_weight_bytes, weights);
  const auto transfer_ms = [&](int64_t bytes, int64_t working_set) {
    const double bandwidth = roofline.bandwidth_gb_per_s(working_set, threads);
    return bytes > 0 && bandwidth > 0 ? static_cast<double>(bytes) / bandwidth * 1e-6 : 0;
  };
  const double compute_ms = work.flops > 0 && peak > 0 ? static_cast<double>(work.flops) / peak * 1e-6 : 0;
  const double memory_ms = transfer_ms(activations, activations) + transfer_ms(weights, weights_set);
  bound.flops_per_byte = work.flops > 0 && work.bytes > 0
                             ? static_cast<double>(work.flops) / static_cast<double>(work.bytes)
                             : 0;
  bound.compute_bound = compute_ms > memory_ms;
  bound.bound_ms = std::max(compute_ms, memory_ms);
  bound.fraction = measured_ms > 0 ? bound.bound_ms / measured_ms : 0;
  if (!bound.compute_bound) {
    const auto from = [&](int64_t working_set) {
      const std::string level = roofline.level_name(working_set);
      return level == "memory" ? std::string("from memory") : level;
    };
    if (activations > 0) bound.level = "activations " + from(activations);
    if (weights > 0) bound.level += (bound.level.empty() ? "weights " : ", weights ") + from(weights_set);
  }
  return bound;
}

StepWork event_work(const TraceEvent& event) {
  StepWork work{event.flops, event.bytes, event.weight_bytes};
  if (const StepRecord* record = event.record.get()) {
    // bf16 precision asked and taken (a CPU without a bf16 tier runs float32 under the setting).
    for (const std::string& setting : record->settings) {
      if (setting.find("precision=bf16") != std::string::npos &&
          record->kernel.find("bf16") != std::string::npos)
        work.fp32 = false;
    }
    for (const DType dtype : record->input_dtypes) {
      if (dtype != DType::f32 && dtype != DType::undefined && dtype != DType::i64 && dtype != DType::i32)
        work.fp32 = false;
    }
  }
  return work;
}

namespace {

// Whether `event` (a step or run) runs at the top level: no step encloses it (an If's or Loop's
// body runs, with its steps, inside the If or Loop step).
bool top_level(const Trace& trace, const TraceEvent& event) {
  for (const TraceEvent* parent = trace.find(event.parent_id); parent != nullptr;
       parent = trace.find(parent->parent_id)) {
    if (parent->kind == EventKind::step || parent->kind == EventKind::reorder) return false;
  }
  return true;
}

bool is_step(const TraceEvent& event) {
  return event.kind == EventKind::step || event.kind == EventKind::reorder;
}

int64_t top_level_runs(const Trace& trace) {
  int64_t runs = 0;
  for (const TraceEvent& event : trace.events)
    runs += event.kind == EventKind::run && top_level(trace, event);
  return std::max<int64_t>(runs, 1);
}

}  // namespace

int64_t weight_bytes_per_run(const Trace& trace) {
  int64_t weight_bytes = 0;
  for (const TraceEvent& event : trace.events) {
    if (is_step(event) && top_level(trace, event)) weight_bytes += event.weight_bytes;
  }
  return weight_bytes / top_level_runs(trace);
}

void BoundTotals::add(const StepBound& bound, double step_ms) {
  if (!bound.bounded) {
    ++unbounded_steps;
    unbounded_ms += step_ms;
    return;
  }
  measured_ms += step_ms;
  bound_ms += bound.bound_ms;
  const double saving = std::max(0.0, step_ms - bound.bound_ms);
  if (bound.compute_bound) {
    compute_saving_ms += saving;
    ++compute_steps;
  } else {
    memory_saving_ms += saving;
    ++memory_steps;
  }
}

int trace_threads(const Trace& trace) {
  int threads = 1;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == EventKind::run) threads = std::max(threads, event.threads);
  }
  return threads;
}

BoundTotals trace_bound_totals(const Trace& trace, const Roofline& roofline, Isa isa) {
  const int64_t runs = top_level_runs(trace);
  const int64_t weight_bytes = weight_bytes_per_run(trace);
  BoundTotals totals;
  for (const TraceEvent& event : trace.events) {
    if (!is_step(event) || !top_level(trace, event)) continue;
    const double ms = static_cast<double>(event.duration_ns()) * 1e-6;
    totals.add(step_bound(roofline, isa, event_work(event), weight_bytes, std::max(event.threads, 1), ms),
               ms);
  }
  for (double* ms : {&totals.measured_ms, &totals.bound_ms, &totals.compute_saving_ms,
                     &totals.memory_saving_ms, &totals.unbounded_ms})
    *ms /= static_cast<double>(runs);
  totals.compute_steps = static_cast<int>(totals.compute_steps / runs);
  totals.memory_steps = static_cast<int>(totals.memory_steps / runs);
  totals.unbounded_steps = static_cast<int>(totals.unbounded_steps / runs);
  return totals;
}

std::string bound_totals_text(const BoundTotals& totals, const Roofline& roofline, Isa isa, int threads) {
  char text[512];
  std::snprintf(text, sizeof text,
                "roofline: at their bounds the steps would take %.3f of their %.3f ms (%.0f%%); "
                "compute-bound steps (%d) could save %.3f ms, memory-bound steps (%d) %.3f ms\n"
                "  bounds: fp32 peak %.1f GFLOP/s on %d thread%s (%s), memory %.1f GB/s; %s\n",
                totals.bound_ms, totals.measured_ms,
                totals.measured_ms > 0 ? 100 * totals.bound_ms / totals.measured_ms : 0.0,
                totals.compute_steps, totals.compute_saving_ms, totals.memory_steps, totals.memory_saving_ms,
                roofline.peak_gflops(isa, threads), threads, threads == 1 ? "" : "s",
                std::string(isa_name(isa)).c_str(), roofline.bandwidth_gb_per_s(int64_t{1} << 62, threads),
                roofline.source.c_str());
  std::string result = text;
  if (totals.unbounded_steps > 0) {
    std::snprintf(text, sizeof text,
                  "  %d bf16 or int8 steps (%.3f ms) have no bound: the peak measured is fp32's\n",
                  totals.unbounded_steps, totals.unbounded_ms);
    result += text;
  }
  return result;
}

void write_bound_totals(JsonWriter& json, const BoundTotals& totals, const Roofline& roofline, Isa isa,
                        int threads) {
  json.begin_object();
  json.key("measured_ms").value(totals.measured_ms, 6);
  json.key("bound_ms").value(totals.bound_ms, 9);
  json.key("compute_saving_ms").value(totals.compute_saving_ms, 9);
  json.key("memory_saving_ms").value(totals.memory_saving_ms, 9);
  json.member("compute_steps", totals.compute_steps);
  json.member("memory_steps", totals.memory_steps);
  json.member("unbounded_steps", totals.unbounded_steps);
  json.key("unbounded_ms").value(totals.unbounded_ms, 6);
  json.key("peak_gflops_per_s").value(roofline.peak_gflops(isa, threads), 3);
  json.key("memory_gb_per_s").value(roofline.bandwidth_gb_per_s(int64_t{1} << 62, threads), 3);
  json.member("isa", std::string(isa_name(isa)));
  json.member("threads", threads);
  json.member("source", roofline.source);
  json.end_object();
}

std::string bound_cell(const StepBound& bound) {
  if (!bound.bounded) return "-      -     -";
  char text[48];
  std::snprintf(text, sizeof text, "%s %6.1f %4.0f%%", bound.compute_bound ? "C" : "M", bound.flops_per_byte,
                100 * bound.fraction);
  return text;
}

}  // namespace kiln::profiler
