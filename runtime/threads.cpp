#include "runtime/threads.h"

#include <sched.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <thread>

#include "core/error.h"

namespace kiln {
namespace {

// Upper bound on any thread count kiln accepts: far above any machine, low enough to catch typos.
constexpr int kMaxThreads = 4096;

std::atomic<int> api_threads{0};  // 0: not set through the API

// Parses a positive thread count; `source` names where it came from for the error message.
int parse_thread_count(std::string_view text, std::string_view source) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [last, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc{} || last != end || value < 1 || value > kMaxThreads) {
    fail(ErrorKind::invalid_argument, source, "='", text, "' is not a valid thread count (expected an integer in 1..",
         kMaxThreads, ")");
  }
  return value;
}

// The value of `name` when set and non-empty; OMP_NUM_THREADS may be a nested list ("4,2").
const char* env_value(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

}  // namespace

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware > 0 ? static_cast<int>(hardware) : 1;
}

void set_num_threads(int threads) {
  if (threads < 1 || threads > kMaxThreads) {
    fail(ErrorKind::invalid_argument, "set_num_threads(", threads, "): expected a thread count in 1..",
         kMaxThreads);
  }
  api_threads.store(threads, std::memory_order_relaxed);
}

void reset_num_threads() { api_threads.store(0, std::memory_order_relaxed); }

int get_num_threads() {
  if (int threads = api_threads.load(std::memory_order_relaxed); threads > 0) return threads;
  if (const char* value = env_value("KILN_NUM_THREADS")) {
    return parse_thread_count(value, "KILN_NUM_THREADS");
  }
  if (const char* value = env_value("OMP_NUM_THREADS")) {
    std::string_view text(value);
    return parse_thread_count(text.substr(0, text.find(',')), "OMP_NUM_THREADS");
  }
  return available_cores();
}

std::string num_threads_source() {
  if (api_threads.load(std::memory_order_relaxed) > 0) return "api";
  if (env_value("KILN_NUM_THREADS")) return "KILN_NUM_THREADS";
  if (env_value("OMP_NUM_THREADS")) return "OMP_NUM_THREADS";
  return "cores";
}

}  // namespace kiln
