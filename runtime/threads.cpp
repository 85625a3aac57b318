#include "runtime/threads.h"

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "runtime/topology.h"

namespace kiln {
namespace {

std::atomic<int> process_threads{0};  // 0: the environment's
thread_local int scoped_threads = 0;  // 0: no ScopedIntraOpThreads on this thread

}  // namespace

int parse_thread_count(std::string_view text, std::string_view source) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [last, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc{} || last != end || value < 1 || value > kMaxThreads) {
    fail(ErrorKind::invalid_argument, source, "='", text,
         "' is not a valid thread count (expected an integer in 1..", kMaxThreads, ")");
  }
  return value;
}

int available_cores() {
  const Topology& topology = process_topology();
  return topology.default_threads(topology.current_mask()).threads;
}

std::string available_cores_reason() {
  const Topology& topology = process_topology();
  return topology.default_threads(topology.current_mask()).reason;
}

ThreadCount thread_count_from_environment(EnvironmentLookup lookup) {
  const auto value = [&](const char* name) -> const char* {
    const char* text = lookup(name);
    return (text != nullptr && *text != '\0') ? text : nullptr;
  };
  if (const char* text = value("KILN_NUM_THREADS")) {
    return {parse_thread_count(text, "KILN_NUM_THREADS"), "KILN_NUM_THREADS"};
  }
  if (const char* text = value("MKL_NUM_THREADS")) {
    return {parse_thread_count(text, "MKL_NUM_THREADS"), "MKL_NUM_THREADS"};
  }
  if (const char* text = value("OMP_NUM_THREADS")) {
    const std::string_view list(text);  // may be a nested list ("4,2")
    return {parse_thread_count(list.substr(0, list.find(',')), "OMP_NUM_THREADS"), "OMP_NUM_THREADS"};
  }
  return {available_cores(), "cores"};
}

const ThreadCount& environment_thread_count() {
  // A throwing initializer leaves the static unset, so a bad value is reported to every caller.
  static const ThreadCount count =
      thread_count_from_environment([](const char* name) -> const char* { return std::getenv(name); });
  return count;
}

int intra_op_threads() {
  if (scoped_threads > 0) return scoped_threads;
  const int process = process_threads.load(std::memory_order_relaxed);
  return process > 0 ? process : environment_thread_count().threads;
}

void set_process_intra_op_threads(int threads) {
  process_threads.store(threads, std::memory_order_relaxed);
}

ScopedIntraOpThreads::ScopedIntraOpThreads(int threads) : previous_(scoped_threads) {
  scoped_threads = threads;
}

ScopedIntraOpThreads::~ScopedIntraOpThreads() {
  scoped_threads = previous_;
}

}  // namespace kiln
