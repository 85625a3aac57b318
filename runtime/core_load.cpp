#include "runtime/core_load.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <mutex>
#include <string>

#include "runtime/threads.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  Clock::time_point at;
  cpu_set_t cpus;           // the affinity mask the busy time was summed over
  double busy_seconds = 0;  // of this process's cores, by everyone
  double own_seconds = 0;   // this process's CPU time
};

double own_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& time) {
    return static_cast<double>(time.tv_sec) + time.tv_usec * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::optional<Sample> take_sample() {
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) return std::nullopt;
  // The "cpu" lines come first; the rest of the file (interrupt counts) can be long.
  std::ifstream file("/proc/stat");
  std::string text;
  for (std::string line; std::getline(file, line) && line.starts_with("cpu");) text += line + '\n';
  const long ticks = sysconf(_SC_CLK_TCK);
  const std::optional<double> busy = busy_seconds_from_proc_stat(text, cpus, ticks > 0 ? ticks : 100);
  if (!busy) return std::nullopt;
  return Sample{Clock::now(), cpus, *busy, own_cpu_seconds()};
}

struct Monitor {
  std::mutex mutex;
  std::optional<Sample> last;  // the sample that opened the current window
  bool attempted = false;
  Clock::time_point last_attempt;
  CoreLoad current;
  // ScopedFakeCoreLoad's value, when one is open.
  std::optional<double> fake;
};

Monitor& monitor() {
  static Monitor instance;
  return instance;
}

CoreLoad measured_load(int cores, double busy_elsewhere) {
  return CoreLoad{.cores = cores,
                  .measured = true,
                  .busy_elsewhere = busy_elsewhere,
                  .free_cores = free_cores(cores, busy_elsewhere)};
}

}  // namespace

std::string cores_text(double cores) {
  const long hundredths = std::lround(std::max(0.0, cores) * 100);
  const long fraction = hundredths % 100;
  return std::to_string(hundredths / 100) + (fraction < 10 ? ".0" : ".") + std::to_string(fraction);
}

int free_cores(int cores, double busy_elsewhere) {
  const int lost = static_cast<int>(std::floor(std::max(0.0, busy_elsewhere) + 0.5));
  return std::max(1, cores - lost);
}

std::optional<double> busy_seconds_from_proc_stat(std::string_view proc_stat, const cpu_set_t& cpus,
                                                  long ticks_per_second) {
  double busy_ticks = 0;
  bool found = false;
  while (!proc_stat.empty()) {
    const size_t end = proc_stat.find('\n');
    std::string_view line = proc_stat.substr(0, end);
    proc_stat = end == std::string_view::npos ? std::string_view() : proc_stat.substr(end + 1);
    // "cpuN user nice system idle iowait irq softirq steal guest guest_nice"; the summary line
    // "cpu " has no number and is skipped.
    if (!line.starts_with("cpu") || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    int cpu = 0;
    auto [rest, error] = std::from_chars(line.data() + 3, line.data() + line.size(), cpu);
    if (error != std::errc() || cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &cpus)) continue;
    long long fields[8] = {};
    int parsed = 0;
    const char* end_of_line = line.data() + line.size();
    while (parsed < 8 && rest < end_of_line) {
      while (rest < end_of_line && *rest == ' ') ++rest;
      auto [next, field_error] = std::from_chars(rest, end_of_line, fields[parsed]);
      if (field_error != std::errc()) break;
      rest = next;
      ++parsed;
    }
    if (parsed < 7) continue;  // user to softirq at least (steal, the 8th, came with Linux 2.6.11)
    constexpr int kIdle = 3, kIowait = 4;
    for (int field = 0; field < parsed; ++field) {
      if (field != kIdle && field != kIowait) busy_ticks += static_cast<double>(fields[field]);
    }
    found = true;
  }
  if (!found) return std::nullopt;
  return busy_ticks / static_cast<double>(ticks_per_second);
}

CoreLoad core_load() {
  Monitor& state = monitor();
  std::lock_guard lock(state.mutex);
  if (state.fake) return measured_load(available_cores(), *state.fake);
  // Between windows, the last measure as it is: a run asks once, and pays no system call for it.
  const Clock::time_point now = Clock::now();
  if (state.attempted && now - state.last_attempt < kLoadWindow) return state.current;
  state.attempted = true;
  state.last_attempt = now;
  const int cores = available_cores();
  const std::optional<Sample> sample = take_sample();
  if (!sample) {
    // Unreadable now (no /proc, out of descriptors, CPUs renumbered): tried again next window.
    state.last.reset();
    state.current = CoreLoad{.cores = cores, .readable = false, .free_cores = cores};
  } else if (!state.last || !CPU_EQUAL(&sample->cpus, &state.last->cpus)) {
    // First sample, or the affinity mask changed: busy times over different CPUs do not subtract.
    state.current = CoreLoad{.cores = cores, .free_cores = cores};
  } else {
    const double wall = std::chrono::duration<double>(sample->at - state.last->at).count();
    const double others =
        (sample->busy_seconds - state.last->busy_seconds) - (sample->own_seconds - state.last->own_seconds);
    state.current = measured_load(cores, std::max(0.0, others / wall));
  }
  if (sample) state.last = sample;
  return state.current;
}

ScopedFakeCoreLoad::ScopedFakeCoreLoad(double busy_elsewhere) {
  std::lock_guard lock(monitor().mutex);
  monitor().fake = busy_elsewhere;
}

ScopedFakeCoreLoad::~ScopedFakeCoreLoad() {
  std::lock_guard lock(monitor().mutex);
  monitor().fake.reset();
}

}  // namespace kiln
