#include "backends/settings.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "backends/onednn/onednn_backend.h"
#include "backends/selection.h"
#include "core/error.h"

namespace kiln {
namespace {

std::mutex& global_mutex() {
  static std::mutex mutex;
  return mutex;
}

Settings& global_settings() {
  static Settings settings;
  return settings;
}

// The calling thread's scoped overrides (the merge of every live ScopedFlags on it).
Flags& thread_overrides() {
  thread_local Flags flags;
  return flags;
}

// oneDNN's own verbose level as kiln last set it (oneDNN offers no getter): globally, and as
// scoped guards changed it.
std::atomic<int>& library_verbose() {
  static std::atomic<int> level = 0;
  return level;
}

void set_library_verbose(int level) {
  library_verbose() = level;
  set_onednn_library_verbose(level);
}

template <typename T>
void overlay(std::optional<T>& into, const std::optional<T>& newer) {
  if (newer) into = newer;
}

void check_level(const std::optional<int>& level, const char* flag) {
  KILN_CHECK(!level || (*level >= 0 && *level <= kMaxVerboseLevel), invalid_argument, "flag '", flag,
             "' takes a verbose level from 0 to ", kMaxVerboseLevel, ", got ", level.value_or(0));
}

}  // namespace

int Settings::verbose_for(int index) const {
  int level = verbose;
  if (index == kOnednnIndex) level = std::max(level, onednn_verbose);
  if (index == kBlasIndex) level = std::max(level, blas_verbose);
  return level;
}

int Settings::max_verbose() const {
  return std::max({verbose, onednn_verbose, blas_verbose});
}

uint64_t Settings::plan_word() const {
  // Bits 0-7 disabled backends, 8 conv bf16, 9 matmul bf16, 10 deterministic, 32+ autotune limit.
  return static_cast<uint64_t>(disabled_backends) | (conv_precision == Precision::bf16 ? 1u << 8 : 0u) |
         (matmul_precision == Precision::bf16 ? 1u << 9 : 0u) | (deterministic ? 1u << 10 : 0u) |
         static_cast<uint64_t>(autotune) << 32;
}

std::string Settings::plan_fingerprint() const {
  std::string enabled;
  for (int i = 0; i < kBackendCount; ++i) {
    if (backend_enabled(i)) enabled += str_cat(enabled.empty() ? "" : ",", all_backends()[i]->name());
  }
  return str_cat(enabled, ";conv=", precision_name(conv_precision),
                 ";matmul=", precision_name(matmul_precision), deterministic ? ";deterministic" : "",
                 autotune > 0 ? str_cat(";autotune=", autotune) : "");
}

void Flags::validate() const {
  KILN_CHECK(!native || *native, invalid_argument,
             "the native backend cannot be disabled: it is the fallback for every op");
  KILN_CHECK(!autotune || *autotune >= 0, invalid_argument,
             "flag 'autotune' takes the number of candidates to time per node (0: off), got ", *autotune);
  check_level(verbose, "verbose");
  check_level(onednn_verbose, "onednn_verbose");
  check_level(blas_verbose, "blas_verbose");
}

void Flags::apply_to(Settings& settings) const {
  const auto set_enabled = [&](const std::optional<bool>& enabled, int index) {
    if (!enabled) return;
    if (*enabled) {
      settings.disabled_backends &= ~(1u << index);
    } else {
      settings.disabled_backends |= 1u << index;
    }
  };
  set_enabled(onednn, kOnednnIndex);
  set_enabled(blas, kBlasIndex);
  if (conv_precision) settings.conv_precision = *conv_precision;
  if (matmul_precision) settings.matmul_precision = *matmul_precision;
  if (deterministic) settings.deterministic = *deterministic;
  if (autotune) settings.autotune = *autotune;
  if (verbose) settings.verbose = *verbose;
  if (onednn_verbose) settings.onednn_verbose = *onednn_verbose;
  if (blas_verbose) settings.blas_verbose = *blas_verbose;
  if (verbose_sink) settings.verbose_sink = *verbose_sink;
}

Flags Flags::overlaid_with(const Flags& newer) const {
  Flags merged = *this;
  overlay(merged.onednn, newer.onednn);
  overlay(merged.blas, newer.blas);
  overlay(merged.native, newer.native);
  overlay(merged.conv_precision, newer.conv_precision);
  overlay(merged.matmul_precision, newer.matmul_precision);
  overlay(merged.deterministic, newer.deterministic);
  overlay(merged.autotune, newer.autotune);
  overlay(merged.verbose, newer.verbose);
  overlay(merged.onednn_verbose, newer.onednn_verbose);
  overlay(merged.blas_verbose, newer.blas_verbose);
  overlay(merged.verbose_sink, newer.verbose_sink);
  return merged;
}

Settings current_settings() {
  return current_settings(Flags{});
}

Settings current_settings(const Flags& session) {
  Settings settings;
  {
    std::lock_guard lock(global_mutex());
    settings = global_settings();
  }
  session.apply_to(settings);
  thread_overrides().apply_to(settings);
  return settings;
}

void set_flags(const Flags& flags) {
  flags.validate();
  {
    std::lock_guard lock(global_mutex());
    flags.apply_to(global_settings());
  }
  if (flags.onednn_verbose) set_library_verbose(*flags.onednn_verbose);
}

void reset_flags() {
  {
    std::lock_guard lock(global_mutex());
    global_settings() = Settings{};
  }
  set_library_verbose(0);
}

ScopedFlags::ScopedFlags(const Flags& flags) {
  flags.validate();
  previous_ = thread_overrides();
  thread_overrides() = previous_.overlaid_with(flags);
  if (flags.onednn_verbose) {
    previous_library_verbose_ = library_verbose();
    set_library_verbose(*flags.onednn_verbose);
  }
}

ScopedFlags::~ScopedFlags() {
  thread_overrides() = std::move(previous_);
  if (previous_library_verbose_) set_library_verbose(*previous_library_verbose_);
}

Precision parse_precision(std::string_view text, std::string_view what) {
  if (text == "fp32") return Precision::fp32;
  if (text == "bf16") return Precision::bf16;
  fail(ErrorKind::invalid_argument, what, " must be 'fp32' or 'bf16', got '", text, "'");
}

}  // namespace kiln
