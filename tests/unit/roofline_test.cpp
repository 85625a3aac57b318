// The roofline's arithmetic on a hand-made machine (bounds, levels, thread interpolation, the
// totals a profile prints) and its cache file's format, including every way a file can be wrong.
// Measuring this machine is tested through the CLI (tests/python/test_profiler_cli.py).
#include "runtime/roofline.h"

#include <gtest/gtest.h>

#include "profiler/roofline.h"

namespace kiln {
namespace {

// 100 GFLOP/s per thread alone (80 with two busy) on AVX2, 200 on AVX-512; 400 GB/s over 1 MiB,
// 20 GB/s from memory (twice that on two threads).
Roofline two_thread_machine() {
  Roofline roofline;
  roofline.cpu = "test cpu";
  roofline.threads = 2;
  roofline.gflops_one = {25, 100, 200};
  roofline.gflops_per_thread_all = {20, 80, 160};
  roofline.levels = {{int64_t{1} << 20, 400, 600}, {int64_t{512} << 20, 20, 40}};
  roofline.source = "test";
  return roofline;
}

TEST(Roofline, PeakFollowsTheIsaTierAndTheThreads) {
  const Roofline roofline = two_thread_machine();
  EXPECT_DOUBLE_EQ(roofline.peak_gflops(Isa::baseline, 1), 25);
  EXPECT_DOUBLE_EQ(roofline.peak_gflops(Isa::avx2, 1), 100);
  EXPECT_DOUBLE_EQ(roofline.peak_gflops(Isa::avx512, 1), 200);
  // bf16 and AMX machines compute fp32 on AVX-512.
  EXPECT_DOUBLE_EQ(roofline.peak_gflops(Isa::amx, 1), 200);
  EXPECT_DOUBLE_EQ(roofline.peak_gflops(Isa::avx512_bf16, 2), 320);
  EXPECT_DOUBLE_EQ(roofline.peak_gflops(Isa::avx2, 4), 320);
}

TEST(Roofline, BandwidthIsTheSmallestWorkingSetHoldingTheBytes) {
  const Roofline roofline = two_thread_machine();
  EXPECT_DOUBLE_EQ(roofline.bandwidth_gb_per_s(1000, 1), 400);
  EXPECT_DOUBLE_EQ(roofline.bandwidth_gb_per_s(int64_t{1} << 20, 1), 400);
  EXPECT_DOUBLE_EQ(roofline.bandwidth_gb_per_s((int64_t{1} << 20) + 1, 1), 20);
  // Beyond the largest set measured: still main memory.
  EXPECT_DOUBLE_EQ(roofline.bandwidth_gb_per_s(int64_t{8} << 30, 1), 20);
  EXPECT_DOUBLE_EQ(roofline.bandwidth_gb_per_s(int64_t{8} << 30, 2), 40);
  EXPECT_DOUBLE_EQ(roofline.bandwidth_gb_per_s(int64_t{8} << 30, 8), 40);
  EXPECT_EQ(roofline.level_name(1000), "<= 1 MiB");
  EXPECT_EQ(roofline.level_name(int64_t{2} << 20), "memory");

  Roofline four = two_thread_machine();
  four.threads = 4;
  // Two of four threads: a third of the way from one thread's figure to all four's.
  EXPECT_DOUBLE_EQ(four.bandwidth_gb_per_s(int64_t{8} << 30, 2), 20 + (40 - 20) / 3.0);
}

TEST(Roofline, StepBoundIsTheSlowerOfComputeAndMemory) {
  const Roofline roofline = two_thread_machine();
  // 2 GFLOP over 4 MB from memory on one AVX-512 thread: 10 ms of compute, 0.2 ms of memory.
  profiler::StepBound conv =
      profiler::step_bound(roofline, Isa::avx512, {2'000'000'000, 4'000'000, 0}, 0, 1, 20);
  EXPECT_TRUE(conv.compute_bound);
  EXPECT_NEAR(conv.bound_ms, 10, 1e-9);
  EXPECT_NEAR(conv.fraction, 0.5, 1e-9);
  EXPECT_NEAR(conv.flops_per_byte, 500, 1e-9);
  EXPECT_EQ(conv.level, "");
  // A batch-1 fully-connected layer: 2 FLOPs per 4-byte weight, 0.5 FLOP per byte: memory-bound.
  const int64_t weights = int64_t{4096} * 9216 * 4;
  profiler::StepBound gemm = profiler::step_bound(
      roofline, Isa::avx512, {int64_t{2} * 4096 * 9216, weights, weights}, weights, 1, 10);
  EXPECT_FALSE(gemm.compute_bound);
  EXPECT_NEAR(gemm.bound_ms, static_cast<double>(weights) / 20e6, 1e-12);
  EXPECT_NEAR(gemm.fraction, gemm.bound_ms / 10, 1e-12);
  EXPECT_NEAR(gemm.flops_per_byte, 0.5, 1e-9);
  EXPECT_EQ(gemm.level, "weights from memory");
  // Weights small enough for a cache still come from memory when the whole model's do not fit.
  const int64_t small = 512 << 10;
  profiler::StepBound classifier =
      profiler::step_bound(roofline, Isa::avx512, {small / 2, small + 4000, small}, int64_t{100} << 20, 1, 1);
  EXPECT_NEAR(classifier.bound_ms, 4000 / 400e6 + small / 20e6, 1e-12);
  EXPECT_EQ(classifier.level, "activations <= 1 MiB, weights from memory");
  profiler::StepBound cached =
      profiler::step_bound(roofline, Isa::avx512, {small / 2, small + 4000, small}, small, 1, 1);
  EXPECT_NEAR(cached.bound_ms, (small + 4000) / 400e6, 1e-12);
  EXPECT_EQ(cached.level, "activations <= 1 MiB, weights <= 1 MiB");
  // No counted FLOPs (an elementwise step): memory-bound, at the cache's bandwidth when it fits one.
  profiler::StepBound relu = profiler::step_bound(roofline, Isa::avx512, {0, 400'000, 0}, 0, 1, 0.002);
  EXPECT_FALSE(relu.compute_bound);
  EXPECT_NEAR(relu.bound_ms, 0.001, 1e-9);
  EXPECT_NEAR(relu.fraction, 0.5, 1e-9);
  EXPECT_EQ(relu.level, "activations <= 1 MiB");
  // Unmeasured: no fraction.
  EXPECT_EQ(profiler::step_bound(roofline, Isa::avx512, {0, 400'000, 0}, 0, 1, 0).fraction, 0);
}

TEST(Roofline, Bf16AndInt8ProductsHaveNoBound) {
  const Roofline roofline = two_thread_machine();
  profiler::StepWork bf16{2'000'000'000, 4'000'000, 1'000'000};
  bf16.fp32 = false;
  const profiler::StepBound bound = profiler::step_bound(roofline, Isa::avx512_bf16, bf16, 0, 1, 5);
  EXPECT_FALSE(bound.bounded);
  EXPECT_EQ(bound.bound_ms, 0);
  EXPECT_EQ(profiler::bound_cell(bound), "-      -     -");
  // Without products the dtype does not matter: moving bytes is moving bytes.
  profiler::StepWork copy{0, 400'000, 0};
  copy.fp32 = false;
  EXPECT_TRUE(profiler::step_bound(roofline, Isa::avx512_bf16, copy, 0, 1, 0.002).bounded);

  profiler::BoundTotals totals;
  totals.add(bound, 5);
  totals.add(profiler::step_bound(roofline, Isa::avx512, copy, 0, 1, 0.002), 0.002);
  EXPECT_EQ(totals.unbounded_steps, 1);
  EXPECT_DOUBLE_EQ(totals.unbounded_ms, 5);
  EXPECT_DOUBLE_EQ(totals.measured_ms, 0.002);
  EXPECT_EQ(totals.memory_steps, 1);
  const std::string text = profiler::bound_totals_text(totals, roofline, Isa::avx512, 1);
  EXPECT_NE(text.find("1 bf16 or int8 steps (5.000 ms) have no bound"), std::string::npos) << text;
}

TEST(Roofline, TotalsSayWhatEachSideCouldSave) {
  const Roofline roofline = two_thread_machine();
  profiler::BoundTotals totals;
  totals.add(profiler::step_bound(roofline, Isa::avx512, {2'000'000'000, 4'000'000, 0}, 0, 1, 20),
             20);  // 10 bound
  totals.add(profiler::step_bound(roofline, Isa::avx512, {0, 400'000, 0}, 0, 1, 0.002),
             0.002);  // 0.001 bound
  // Faster than its bound (data warmer than its size implies): saves nothing, and takes nothing off.
  totals.add(profiler::step_bound(roofline, Isa::avx512, {0, 400'000, 0}, 0, 1, 0.0005), 0.0005);
  EXPECT_EQ(totals.compute_steps, 1);
  EXPECT_EQ(totals.memory_steps, 2);
  EXPECT_NEAR(totals.measured_ms, 20.0025, 1e-9);
  EXPECT_NEAR(totals.bound_ms, 10.002, 1e-9);
  EXPECT_NEAR(totals.compute_saving_ms, 10, 1e-9);
  EXPECT_NEAR(totals.memory_saving_ms, 0.001, 1e-12);
  const std::string text = profiler::bound_totals_text(totals, roofline, Isa::avx512, 1);
  EXPECT_NE(text.find("compute-bound steps (1) could save 10.000 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("fp32 peak 200.0 GFLOP/s on 1 thread (avx512), memory 20.0 GB/s"), std::string::npos)
      << text;
}

// Two runs of a model whose If step holds a body run with one step: the body's step is inside the
// If's time and its run is not a run of the model.
TEST(Roofline, TraceTotalsCountTopLevelRunsAndSteps) {
  profiler::Trace trace;
  const auto add = [&](profiler::EventKind kind, uint64_t parent, int64_t ns, int64_t bytes,
                       int64_t weights) {
    profiler::TraceEvent event;
    event.id = trace.events.size() + 1;
    event.parent_id = parent;
    event.kind = kind;
    event.end_ns = ns;
    event.bytes = bytes;
    event.weight_bytes = weights;
    event.threads = 1;
    trace.events.push_back(event);
    return event.id;
  };
  for (int run = 0; run < 2; ++run) {
    const uint64_t outer = add(profiler::EventKind::run, 0, 3'000'000, 0, 0);
    add(profiler::EventKind::step, outer, 1'000'000, 1'000'000, 600'000);
    const uint64_t branch = add(profiler::EventKind::step, outer, 2'000'000, 1000, 0);
    const uint64_t body = add(profiler::EventKind::run, branch, 1'900'000, 0, 0);
    add(profiler::EventKind::step, body, 1'800'000, 1'000'000, 400'000);
  }
  EXPECT_EQ(profiler::weight_bytes_per_run(trace), 600'000);
  const profiler::BoundTotals totals = profiler::trace_bound_totals(trace, two_thread_machine(), Isa::avx512);
  EXPECT_EQ(totals.memory_steps, 2);
  EXPECT_NEAR(totals.measured_ms, 3, 1e-9);
}

TEST(Roofline, CacheFileRoundTrips) {
  const Roofline roofline = two_thread_machine();
  const std::optional<Roofline> read = parse_roofline(roofline_file_text(roofline), "test cpu", 2);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->threads, 2);
  EXPECT_EQ(read->gflops_one, roofline.gflops_one);
  EXPECT_EQ(read->gflops_per_thread_all, roofline.gflops_per_thread_all);
  ASSERT_EQ(read->levels.size(), 2u);
  EXPECT_EQ(read->levels[1].bytes, int64_t{512} << 20);
  EXPECT_DOUBLE_EQ(read->levels[1].gb_per_s_all, 40);
}

TEST(Roofline, CacheFilesThatAreWrongAreRefused) {
  const std::string good = roofline_file_text(two_thread_machine());
  EXPECT_TRUE(parse_roofline(good, "test cpu", 2).has_value());
  EXPECT_FALSE(parse_roofline(good, "another cpu", 2).has_value());
  EXPECT_FALSE(parse_roofline(good, "test cpu", 4).has_value());  // measured on other threads
  EXPECT_FALSE(parse_roofline("", "test cpu", 2).has_value());
  EXPECT_FALSE(
      parse_roofline("kiln roofline 2\n" + good.substr(good.find('\n') + 1), "test cpu", 2).has_value());
  // Cut anywhere inside the data lines: something a complete roofline needs is missing.
  const size_t last_peak = good.rfind("peak ");
  EXPECT_FALSE(parse_roofline(good.substr(0, last_peak), "test cpu", 2).has_value());
  EXPECT_FALSE(parse_roofline(good.substr(0, good.find("bandwidth")), "test cpu", 2).has_value());
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return parse_roofline(text, "test cpu", 2);
  };
  EXPECT_FALSE(with("threads 2", "threads 0").has_value());
  EXPECT_FALSE(with("threads 2", "threads two").has_value());
  EXPECT_FALSE(with("peak avx2 100", "peak avx2 -100").has_value());
  EXPECT_FALSE(with("peak avx2 100", "peak avx2 nan").has_value());
  EXPECT_FALSE(with("peak avx2", "peak neon").has_value());
  EXPECT_FALSE(with("bandwidth 1048576 400", "bandwidth 1048576 0").has_value());
  EXPECT_FALSE(with("bandwidth 1048576", "bandwidth 1073741824").has_value());  // not ascending
  EXPECT_FALSE(with("bandwidth 1048576", "bandwidth -5").has_value());
  EXPECT_FALSE(parse_roofline(good + "colour blue\n", "test cpu", 2).has_value());
  EXPECT_FALSE(with("cpu test cpu", "cpu").has_value());  // a bare key: no crash, no match
  EXPECT_FALSE(with("threads 2\n", "").has_value());
  // A tier twice (and so another missing), or measured on one thread only.
  EXPECT_FALSE(with("peak avx2", "peak baseline").has_value());
  EXPECT_FALSE(with("peak avx2 100 80", "peak avx2 100 0").has_value());
  // A tier the CPU lacks reads 0 on both.
  EXPECT_TRUE(with("peak avx512 200 160", "peak avx512 0 0").has_value());
  EXPECT_TRUE(with("peak avx2 100", "peak avx2 100").has_value());
}

}  // namespace
}  // namespace kiln
