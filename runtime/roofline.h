// What this machine can do at most, measured: the fp32 multiply-add peak of a core on each ISA tier,
// and read bandwidth over working sets from one core's cache to main memory, on one thread and on
// every thread kiln uses. A step's roofline time is the larger of its FLOPs at the peak and its
// bytes at the bandwidth for a working set its size (profiler/roofline.h); how far a step is from
// it says whether a faster kernel could help.
//
// Measuring takes a few seconds, so the result is kept in a file per CPU (the CPU's name and
// extensions, the logical CPUs) and thread count under $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln,
// else $HOME/.cache/kiln, and read from there afterwards.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cpu_info.h"

namespace kiln {

// Read bandwidth over a working set of `bytes` (split between the threads that read it).
struct BandwidthLevel {
  int64_t bytes = 0;
  double gb_per_s_one = 0;  // one thread
  double gb_per_s_all = 0;  // Roofline::threads threads
};

// The ISA tiers an fp32 peak is measured for: SSE2 (mul then add), AVX2 FMA, AVX-512 FMA. The
// bf16 and AMX tiers compute fp32 with AVX-512.
inline constexpr int kPeakTiers = 3;

struct Roofline {
  std::string cpu;  // CpuCapability::description() and extensions: what the cache file is for
  int threads = 1;  // the "all threads" measurements used this many
  // GFLOP/s of fp32 multiply-adds per tier (0: the CPU lacks it), one thread alone and per thread
  // while every thread computes (clocks drop when all cores are busy).
  std::array<double, kPeakTiers> gflops_one{};
  std::array<double, kPeakTiers> gflops_per_thread_all{};
  std::vector<BandwidthLevel> levels;  // by working set, smallest first; the last is main memory
  std::string source;                  // "measured now", "measured now, kept in FILE", "read from FILE"

  // The fp32 peak for `threads` threads on `isa`'s tier.
  double peak_gflops(Isa isa, int threads) const;
  // The bandwidth for a step touching `bytes` on `threads` threads: the smallest measured working
  // set holding them, read on that many threads (between one and all, at most all).
  double bandwidth_gb_per_s(int64_t bytes, int threads) const;
  // The working set bandwidth_gb_per_s() uses for `bytes`, e.g. "<= 1 MiB" or "memory".
  std::string level_name(int64_t bytes) const;
};

// This machine's roofline with its "all threads" figures measured on `threads` threads: read from
// the cache file, or measured and kept there; once per process and thread count. `remeasure`
// measures again and rewrites the file. Never throws for a bad or unwritable cache: it measures
// instead and `source` says why. The reference stays valid for the life of the process.
const Roofline& machine_roofline(int threads, bool remeasure = false);

// Text form kept in the cache file, and back; parse_roofline returns nothing for text it cannot
// read as a complete roofline of `cpu` measured on `threads` threads.
std::string roofline_file_text(const Roofline& roofline);
std::optional<Roofline> parse_roofline(const std::string& text, const std::string& cpu, int threads);

// Lines for `kiln info --roofline`, each ending in '\n'.
std::string roofline_text(const Roofline& roofline);
// The same as one JSON object for scripts, with the peak kernels on `isa` reach on one thread and on
// all: {"source", "cpu", "threads", "isa", "peak_gflops_per_s_one", "peak_gflops_per_s_all",
// "tiers": [{"tier", "gflops_per_s_one", "gflops_per_s_per_thread_all"}],
// "bandwidth": [{"bytes", "gb_per_s_one", "gb_per_s_all"}]}.
std::string roofline_json(const Roofline& roofline, Isa isa);

}  // namespace kiln
