#include "runtime/roofline.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "core/json_writer.h"
#include "runtime/parallel.h"
#include "runtime/threads.h"
#include "runtime/topology.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Independent multiply-add chains per loop: enough to cover the FMA latency (4 cycles) on two
// pipes with room to spare, few enough to stay in registers on every tier.
constexpr int kChains = 12;
// Each measurement runs at least this long, and the best of kTrials is kept: a shared machine
// only ever makes a loop slower than the hardware.
constexpr double kMeasureSeconds = 0.03;
constexpr int kTrials = 5;
// Working sets read for bandwidth: a core's L2 on every current x86 core, then sizes that end up
// in a shared L3 or beyond, then main memory (beyond any one L3: 96 MiB on AMD's largest CCDs,
// 105 MiB on a whole Sapphire Rapids socket). Cache sizes are not read from the system: virtual
// machines report them wrongly, and what matters is the measured curve.
constexpr int64_t kWorkingSets[] = {int64_t{256} << 10, int64_t{2} << 20, int64_t{8} << 20, int64_t{32} << 20,
                                    int64_t{256} << 20};
// Each thread reads at least this many 8-byte words of a working set.
constexpr int64_t kMinSliceWords = 16;
constexpr const char* kTierNames[kPeakTiers] = {"baseline", "avx2", "avx512"};

// Keeps loop results alive so the compiler cannot drop the loops; one per thread, as they all write.
thread_local volatile float g_sink = 0;

float multiply_add_baseline(int64_t iterations) {
  __m128 chain[kChains];
  for (int k = 0; k < kChains; ++k) chain[k] = _mm_set1_ps(0.001f * static_cast<float>(k));
  const __m128 scale = _mm_set1_ps(0.9999999f);
  const __m128 offset = _mm_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < kChains; ++k) chain[k] = _mm_add_ps(_mm_mul_ps(chain[k], scale), offset);
  }
  __m128 sum = chain[0];
  for (int k = 1; k < kChains; ++k) sum = _mm_add_ps(sum, chain[k]);
  return _mm_cvtss_f32(sum);
}

__attribute__((target("avx2,fma"))) float multiply_add_avx2(int64_t iterations) {
  __m256 chain[kChains];
  for (int k = 0; k < kChains; ++k) chain[k] = _mm256_set1_ps(0.001f * static_cast<float>(k));
  const __m256 scale = _mm256_set1_ps(0.9999999f);
  const __m256 offset = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < kChains; ++k) chain[k] = _mm256_fmadd_ps(chain[k], scale, offset);
  }
  __m256 sum = chain[0];
  for (int k = 1; k < kChains; ++k) sum = _mm256_add_ps(sum, chain[k]);
  return _mm256_cvtss_f32(sum);
}

__attribute__((target("avx512f,fma"))) float multiply_add_avx512(int64_t iterations) {
  __m512 chain[kChains];
  for (int k = 0; k < kChains; ++k) chain[k] = _mm512_set1_ps(0.001f * static_cast<float>(k));
  const __m512 scale = _mm512_set1_ps(0.9999999f);
  const __m512 offset = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < kChains; ++k) chain[k] = _mm512_fmadd_ps(chain[k], scale, offset);
  }
  __m512 sum = chain[0];
  for (int k = 1; k < kChains; ++k) sum = _mm512_add_ps(sum, chain[k]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  return lanes[0];
}

// Reads [begin, end) once with four independent accumulators (an OR: integer, so it is exact
// and never slower than the loads).
__attribute__((target("avx2"))) uint64_t read_avx2(const uint64_t* begin, const uint64_t* end) {
  __m256i sums[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                     _mm256_setzero_si256()};
  for (const uint64_t* p = begin; p + 16 <= end; p += 16) {
    for (int k = 0; k < 4; ++k)
      sums[k] = _mm256_or_si256(sums[k], _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 4 * k)));
  }
  const __m256i all = _mm256_or_si256(_mm256_or_si256(sums[0], sums[1]), _mm256_or_si256(sums[2], sums[3]));
  return static_cast<uint64_t>(_mm256_extract_epi64(all, 0) | _mm256_extract_epi64(all, 3));
}

uint64_t read_baseline(const uint64_t* begin, const uint64_t* end) {
  __m128i sums[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
  for (const uint64_t* p = begin; p + 8 <= end; p += 8) {
    for (int k = 0; k < 4; ++k)
      sums[k] = _mm_or_si128(sums[k], _mm_load_si128(reinterpret_cast<const __m128i*>(p + 2 * k)));
  }
  const __m128i all = _mm_or_si128(_mm_or_si128(sums[0], sums[1]), _mm_or_si128(sums[2], sums[3]));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(all));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Runs `work(thread, repeats)` on `threads` threads at once (thread 0..threads-1, each its own
// call), growing `repeats` until a call lasts kMeasureSeconds; returns the best seconds per repeat
// over kTrials.
double best_seconds_per_repeat(int threads, const std::function<void(int, int64_t)>& work) {
  const auto run = [&](int64_t repeats) {
    const auto start = std::chrono::steady_clock::now();
    if (threads == 1) {
      work(0, repeats);
    } else {
      parallel_for(0, threads, int64_t{1} << 40, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) work(static_cast<int>(t), repeats);
      });
    }
    return seconds_since(start);
  };
  int64_t repeats = 1;
  double seconds = run(repeats);
  while (seconds < kMeasureSeconds && repeats < (int64_t{1} << 40)) {
    repeats = seconds <= 0
                  ? repeats * 16
                  : std::max(repeats * 2, static_cast<int64_t>(repeats * 1.2 * kMeasureSeconds / seconds));
    seconds = run(repeats);
  }
  double best = seconds / static_cast<double>(repeats);
  for (int trial = 1; trial < kTrials; ++trial)
    best = std::min(best, run(repeats) / static_cast<double>(repeats));
  return best;
}

// GFLOP/s of one thread running tier `tier`'s multiply-add loop while `threads` threads do.
double measure_peak(int tier, int threads) {
  constexpr int64_t kIterationsPerRepeat = 1024;
  const int lanes = tier == 0 ? 4 : tier == 1 ? 8 : 16;
  const double flops_per_repeat = static_cast<double>(kIterationsPerRepeat) * kChains * lanes * 2;
  const double seconds = best_seconds_per_repeat(threads, [tier](int, int64_t repeats) {
    const int64_t iterations = repeats * kIterationsPerRepeat;
    g_sink = tier == 0   ? multiply_add_baseline(iterations)
             : tier == 1 ? multiply_add_avx2(iterations)
                         : multiply_add_avx512(iterations);
  });
  return flops_per_repeat / seconds * 1e-9;
}

// GB/s reading `bytes` split between `threads` threads (fewer when a slice would be tiny), each
// reading its own slice repeatedly, so a slice that fits a core's cache stays in it.
double measure_bandwidth(const uint64_t* data, int64_t bytes, int threads, bool avx2) {
  const int64_t words = bytes / 8;
  const int readers = static_cast<int>(std::clamp<int64_t>(words / kMinSliceWords, 1, threads));
  const int64_t slice = words / readers / kMinSliceWords * kMinSliceWords;  // whole 128-byte blocks
  const double seconds = best_seconds_per_repeat(readers, [&](int rank, int64_t repeats) {
    const uint64_t* begin = data + rank * slice;
    uint64_t sum = 0;
    for (int64_t r = 0; r < repeats; ++r)
      sum |= avx2 ? read_avx2(begin, begin + slice) : read_baseline(begin, begin + slice);
    g_sink = static_cast<float>(sum & 1);
  });
  return static_cast<double>(slice * 8) * readers / seconds * 1e-9;
}

std::string cpu_key() {
  const CpuCapability& cpu = cpu_capability();
  std::string text = cpu.description();
  for (const std::string& extension : cpu.extensions()) text += " " + extension;
  return str_cat(text, "; ", sysconf(_SC_NPROCESSORS_ONLN), " logical CPUs");
}

std::string cache_directory() {
  for (const char* variable : {"KILN_CACHE_DIR", "XDG_CACHE_HOME", "HOME"}) {
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') continue;
    if (std::string(variable) == "KILN_CACHE_DIR") return value;
    if (std::string(variable) == "XDG_CACHE_HOME") return str_cat(value, "/kiln");
    return str_cat(value, "/.cache/kiln");
  }
  return "";
}

}  // namespace

double Roofline::peak_gflops(Isa isa, int thread_count) const {
  const int tier = isa == Isa::baseline ? 0 : isa == Isa::avx2 ? 1 : 2;
  const double per_thread = thread_count <= 1 ? gflops_one[tier] : gflops_per_thread_all[tier];
  return per_thread * std::max(thread_count, 1);
}

double Roofline::bandwidth_gb_per_s(int64_t bytes, int thread_count) const {
  if (levels.empty()) return 0;
  const BandwidthLevel* level = &levels.back();
  for (const BandwidthLevel& candidate : levels) {
    if (bytes <= candidate.bytes) {
      level = &candidate;
      break;
    }
  }
  if (thread_count <= 1 || threads <= 1) return level->gb_per_s_one;
  if (thread_count >= threads) return level->gb_per_s_all;
  // Between one and all threads: a straight line, the measured ends being all that is known.
  const double share = static_cast<double>(thread_count - 1) / (threads - 1);
  return level->gb_per_s_one + share * (level->gb_per_s_all - level->gb_per_s_one);
}

std::string Roofline::level_name(int64_t bytes) const {
  for (size_t i = 0; i + 1 < levels.size(); ++i) {
    if (bytes <= levels[i].bytes) return str_cat("<= ", size_text(levels[i].bytes));
  }
  return "memory";
}

namespace {

// Measures this machine now, on `threads` threads for the "all" figures.
Roofline measure_roofline(int threads) {
  threads = std::max(threads, 1);
  const ScopedIntraOpThreads scoped(threads);
  const CpuCapability& cpu = cpu_capability();
  Roofline roofline;
  roofline.cpu = cpu_key();
  roofline.threads = threads;
  const bool has_tier[kPeakTiers] = {true, cpu.avx2 && cpu.fma, cpu.avx512f};
  for (int tier = 0; tier < kPeakTiers; ++tier) {
    if (!has_tier[tier]) continue;
    roofline.gflops_one[tier] = measure_peak(tier, 1);
    roofline.gflops_per_thread_all[tier] =
        threads == 1 ? roofline.gflops_one[tier] : measure_peak(tier, threads);
  }
  const int64_t largest = kWorkingSets[std::size(kWorkingSets) - 1];
  const std::unique_ptr<void, decltype(&std::free)> buffer(
      std::aligned_alloc(64, static_cast<size_t>(largest)), &std::free);
  KILN_CHECK(buffer != nullptr, runtime, "cannot allocate ", largest >> 20,
             " MiB to measure memory bandwidth");
  uint64_t* data = static_cast<uint64_t*>(buffer.get());
  // Touch every page (and make the contents non-zero) before timing.
  for (int64_t i = 0; i < largest / 8; ++i) data[i] = static_cast<uint64_t>(i);
  for (const int64_t bytes : kWorkingSets) {
    BandwidthLevel level;
    level.bytes = bytes;
    level.gb_per_s_one = measure_bandwidth(data, bytes, 1, has_tier[1]);
    level.gb_per_s_all =
        threads == 1 ? level.gb_per_s_one : measure_bandwidth(data, bytes, threads, has_tier[1]);
    roofline.levels.push_back(level);
  }
  roofline.source = "measured now";
  return roofline;
}

// The cache file's path for this CPU and thread count ("" when no cache directory can be found).
std::string roofline_cache_path(int threads) {
  const std::string directory = cache_directory();
  if (directory.empty()) return "";
  const size_t hash = std::hash<std::string>{}(cpu_key());
  char name[64];
  std::snprintf(name, sizeof name, "roofline-%016zx-%dt.txt", hash, threads);
  return (fs::path(directory) / name).string();
}

}  // namespace

std::string roofline_file_text(const Roofline& roofline) {
  std::ostringstream text;
  text.precision(17);
  text << "kiln roofline 1\ncpu " << roofline.cpu << "\nthreads " << roofline.threads << "\n";
  for (int tier = 0; tier < kPeakTiers; ++tier) {
    text << "peak " << kTierNames[tier] << " " << roofline.gflops_one[tier] << " "
         << roofline.gflops_per_thread_all[tier] << "\n";
  }
  for (const BandwidthLevel& level : roofline.levels)
    text << "bandwidth " << level.bytes << " " << level.gb_per_s_one << " " << level.gb_per_s_all << "\n";
  return text.str();
}

std::optional<Roofline> parse_roofline(const std::string& text, const std::string& cpu, int threads) {
  std::istringstream lines(text);
  std::string line;
  if (!std::getline(lines, line) || line != "kiln roofline 1") return std::nullopt;
  Roofline roofline;
  roofline.threads = 0;
  unsigned tiers_read = 0;  // a bit per tier
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    if (key == "cpu") {
      std::getline(fields >> std::ws, roofline.cpu);
    } else if (key == "threads") {
      if (!(fields >> roofline.threads)) return std::nullopt;
    } else if (key == "peak") {
      std::string tier;
      double one = -1, all = -1;
      if (!(fields >> tier >> one >> all) || !(one >= 0 && one < 1e6) || !(all >= 0 && all < 1e6) ||
          (one > 0) != (all > 0))
        return std::nullopt;
      const auto* found = std::find(std::begin(kTierNames), std::end(kTierNames), tier);
      if (found == std::end(kTierNames)) return std::nullopt;
      const size_t index = static_cast<size_t>(found - std::begin(kTierNames));
      if (tiers_read & (1u << index)) return std::nullopt;
      tiers_read |= 1u << index;
      roofline.gflops_one[index] = one;
      roofline.gflops_per_thread_all[index] = all;
    } else if (key == "bandwidth") {
      BandwidthLevel level;
      if (!(fields >> level.bytes >> level.gb_per_s_one >> level.gb_per_s_all) || level.bytes <= 0 ||
          !(level.gb_per_s_one > 0 && level.gb_per_s_one < 1e6) ||
          !(level.gb_per_s_all > 0 && level.gb_per_s_all < 1e6) ||
          (!roofline.levels.empty() && level.bytes <= roofline.levels.back().bytes))
        return std::nullopt;
      roofline.levels.push_back(level);
    } else {
      return std::nullopt;
    }
  }
  if (roofline.cpu != cpu || roofline.threads != threads || tiers_read != (1u << kPeakTiers) - 1 ||
      roofline.levels.empty() || roofline.gflops_one[0] <= 0)
    return std::nullopt;
  return roofline;
}

const Roofline& machine_roofline(int threads, bool remeasure) {
  threads = std::clamp(threads, 1, kMaxThreads);
  static std::mutex mutex;
  // Every roofline handed out stays alive: callers keep references, and a remeasured one replaces
  // an older one only for later callers.
  static std::deque<Roofline> kept;
  static std::map<int, const Roofline*> by_threads;
  std::lock_guard lock(mutex);
  if (const auto found = by_threads.find(threads); found != by_threads.end() && !remeasure)
    return *found->second;
  const std::string path = roofline_cache_path(threads);
  std::string why_measured;
  if (!remeasure && !path.empty()) {
    std::ifstream file(path);
    if (file) {
      std::stringstream text;
      text << file.rdbuf();
      if (std::optional<Roofline> read = parse_roofline(text.str(), cpu_key(), threads)) {
        read->source = str_cat("read from ", path);
        by_threads[threads] = &kept.emplace_back(std::move(*read));
        return *by_threads[threads];
      }
      why_measured = str_cat(" (", path, " did not hold a roofline of this CPU and thread count)");
    }
  }
  Roofline roofline = measure_roofline(threads);
  if (path.empty()) {
    roofline.source = "measured now (not kept: no KILN_CACHE_DIR, XDG_CACHE_HOME or HOME)";
  } else {
    std::error_code error;
    fs::create_directories(fs::path(path).parent_path(), error);
    // Written under another name first, so a concurrent reader never sees half a file.
    const std::string partial = str_cat(path, ".", getpid(), ".partial");
    std::ofstream file(partial, std::ios::trunc);
    file << roofline_file_text(roofline);
    file.close();
    if (file && !error) fs::rename(partial, path, error);
    if (!file || error) {
      fs::remove(partial, error);
      roofline.source = str_cat("measured now (not kept: cannot write ", path, ")", why_measured);
    } else {
      roofline.source = str_cat("measured now, kept in ", path, why_measured);
    }
  }
  by_threads[threads] = &kept.emplace_back(std::move(roofline));
  return *by_threads[threads];
}

std::string roofline_text(const Roofline& roofline) {
  std::string text = str_cat("roofline: ", roofline.source, "\n");
  const char* plural = roofline.threads == 1 ? "" : "s";
  text += str_cat("  fp32 multiply-add peak, GFLOP/s (one thread; per thread with ", roofline.threads,
                  " thread", plural, " busy):\n");
  char line[160];
  for (int tier = 0; tier < kPeakTiers; ++tier) {
    if (roofline.gflops_one[tier] <= 0) continue;
    std::snprintf(line, sizeof line, "    %-9s %8.1f  %8.1f\n", kTierNames[tier], roofline.gflops_one[tier],
                  roofline.gflops_per_thread_all[tier]);
    text += line;
  }
  text += str_cat("  read bandwidth, GB/s (working set: one thread; ", roofline.threads, " thread", plural,
                  "):\n");
  for (size_t i = 0; i < roofline.levels.size(); ++i) {
    const BandwidthLevel& level = roofline.levels[i];
    const std::string name = i + 1 == roofline.levels.size() ? str_cat(size_text(level.bytes), " (memory)")
                                                             : size_text(level.bytes);
    std::snprintf(line, sizeof line, "    %-16s %8.1f  %8.1f\n", name.c_str(), level.gb_per_s_one,
                  level.gb_per_s_all);
    text += line;
  }
  const double ridge = *std::max_element(roofline.gflops_one.begin(), roofline.gflops_one.end());
  std::snprintf(line, sizeof line,
                "  ridge point (one thread, best tier, memory): %.1f FLOP per byte; steps below it are "
                "memory-bound\n",
                ridge / roofline.levels.back().gb_per_s_one);
  text += line;
  return text;
}

std::string roofline_json(const Roofline& roofline, Isa isa) {
  JsonWriter json;
  json.begin_object();
  json.member("source", roofline.source);
  json.member("cpu", roofline.cpu);
  json.member("threads", roofline.threads);
  json.member("isa", std::string(isa_name(isa)));
  json.key("peak_gflops_per_s_one").value(roofline.peak_gflops(isa, 1), 3);
  json.key("peak_gflops_per_s_all").value(roofline.peak_gflops(isa, roofline.threads), 3);
  json.key("tiers").begin_array();
  for (int tier = 0; tier < kPeakTiers; ++tier) {
    if (roofline.gflops_one[tier] <= 0) continue;
    json.begin_object();
    json.member("tier", kTierNames[tier]);
    json.key("gflops_per_s_one").value(roofline.gflops_one[tier], 3);
    json.key("gflops_per_s_per_thread_all").value(roofline.gflops_per_thread_all[tier], 3);
    json.end_object();
  }
  json.end_array();
  json.key("bandwidth").begin_array();
  for (const BandwidthLevel& level : roofline.levels) {
    json.begin_object();
    json.member("bytes", level.bytes);
    json.key("gb_per_s_one").value(level.gb_per_s_one, 3);
    json.key("gb_per_s_all").value(level.gb_per_s_all, 3);
    json.end_object();
  }
  json.end_array();
  json.end_object();
  return json.take();
}

}  // namespace kiln
