// kiln's runtime anti-patterns, read from kiln's own traces (runs, planning, steps with their plan
// records: backend, kernel, layouts, threads, the data flow, why faster backends refused): what to
// change in a kiln deployment. Named in TorchTidy's style; estimates of what each fix saves are
// measured by tidy_runner/estimate.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tidy/options.h"
#include "tidy/pattern.h"

namespace kiln::tidy {

// A Reorder between two steps (not a graph input's or output's conversion), other than a free view.
inline constexpr const char* kReorderBetweenSteps = "ReorderBetweenStepsPattern";
// A step the native kernels ran although a faster backend implements its op: that backend refused
// (disabled, deterministic mode, an attribute or dtype it does not take), with the recorded reason.
inline constexpr const char* kNativeFallback = "NativeFallbackPattern";
// A float32 convolution or matrix product on a CPU with bf16 arithmetic (AVX512_BF16 or AMX).
inline constexpr const char* kFP32OnBF16CPU = "FP32OnBF16CPUPattern";
// An elementwise step reading the only output of the convolution, product or elementwise step before
// it: one more pass over memory that a fused kernel would not make.
inline constexpr const char* kUnfusedElementwise = "UnfusedElementwisePattern";
// Steps shorter than a threshold (kDefaultTinyStepNs, TidyOptions::tiny_step_us) run on several
// threads, where such steps are at least kTinyRunShare of the run: the threads' start and join cost
// more than the work they share.
inline constexpr const char* kTinyOpMultithreaded = "TinyOpMultithreadedPattern";
// Steps that ran while the threads of every step running at once (concurrent runs, parallel branches)
// exceeded the cores.
inline constexpr const char* kOversubscription = "OversubscriptionPattern";
// Planning after the first run (new input shapes or settings in steady state).
inline constexpr const char* kPlanCacheMiss = "PlanCacheMissPattern";
// A run that started after a gap with no run and no planning on any thread, longer than the run
// before it.
inline constexpr const char* kIdleGap = "IdleGapPattern";

inline constexpr int64_t kDefaultTinyStepNs = tidy_option("tiny_step_us").default_value * 1000;
inline constexpr double kTinyRunShare = 0.10;

// kiln's patterns, TinyOpMultithreadedPattern with steps under `tiny_step_ns` counting as tiny.
std::vector<std::unique_ptr<Pattern>> kiln_patterns(int64_t tiny_step_ns = kDefaultTinyStepNs);

// Convolutions and matrix products (the ops that take post-ops).
bool is_product_op(std::string_view op);
// UnfusedElementwisePattern's rule: the step before elementwise step `event` in its chain (a product
// or elementwise step whose only output `event` alone reads, directly or through Reorders), or
// kNoEvent.
EventIndex unfused_head(const TidyContext& context, EventIndex event);

// The trace's cores ("cores" fact), or 0 when it does not say.
int trace_cores(const Trace& trace);
// Whether a CPU with these extensions ("AVX2 FMA AVX512_BF16", the cpu_extensions fact) has bf16
// arithmetic (AVX512_BF16 or AMX_BF16), and whether the trace's CPU has.
bool has_bf16(const std::string& cpu_extensions);
bool trace_has_bf16(const Trace& trace);

}  // namespace kiln::tidy
