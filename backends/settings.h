// Backend settings: which backends kernel selection may use, the precision of convolutions and
// matrix products, deterministic mode, autotune and verbose output. Each setting has a global value
// (set_flags) and may be overridden for a scope on one thread (ScopedFlags); a run snapshots the
// calling thread's view when it starts, so everything that run does sees the caller's guards.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ops/op_spec.h"

namespace kiln {

class VerboseSink;

// Bit positions of the backends in Settings masks, in kernel-selection preference order (the order
// of all_backends()).
inline constexpr int kOnednnIndex = 0;
inline constexpr int kBlasIndex = 1;
inline constexpr int kNativeIndex = 2;
inline constexpr int kBackendCount = 3;

// Verbose levels: 1 prints one line per executed step, 2 adds a line per planned step.
inline constexpr int kMaxVerboseLevel = 2;

// One complete configuration, as a run sees it.
struct Settings {
  uint32_t disabled_backends = 0;  // bit kOnednnIndex etc.
  Precision conv_precision = Precision::fp32;
  Precision matmul_precision = Precision::fp32;
  bool deterministic = false;
  int autotune = 0;                           // candidates timed per node at plan time; 0: off
  int verbose = 0;                            // kiln's lines for every backend's steps
  int onednn_verbose = 0;                     // kiln's lines for oneDNN steps, and oneDNN's own verbose
  int blas_verbose = 0;                       // kiln's lines for the calls kiln makes into BLAS
  std::shared_ptr<VerboseSink> verbose_sink;  // null: standard output

  bool backend_enabled(int index) const { return (disabled_backends >> index & 1u) == 0; }
  // The verbose level that applies to a step run by the backend at `index`.
  int verbose_for(int index) const;
  // Highest level any backend's steps print at (0: verbose is off).
  int max_verbose() const;
  // The settings that decide which kernels a plan holds, packed so that a run can compare them with
  // the previous run's without allocating, and as text for plan keys and explain output.
  uint64_t plan_word() const;
  std::string plan_fingerprint() const;
};

// A partial configuration: what set_flags or a ScopedFlags changes; unset fields keep their value.
// With C++20 designated initializers: `ScopedFlags guard({.onednn = false, .verbose = 1});`.
struct Flags {
  std::optional<bool> onednn;  // enabled in kernel selection
  std::optional<bool> blas;
  std::optional<bool> native;  // the reference fallback: only `true` is accepted
  std::optional<Precision> conv_precision;
  std::optional<Precision> matmul_precision;
  std::optional<bool> deterministic;
  std::optional<int> autotune;
  std::optional<int> verbose;
  std::optional<int> onednn_verbose;
  std::optional<int> blas_verbose;
  std::optional<std::shared_ptr<VerboseSink>> verbose_sink;

  // Throws kiln::Error (invalid_argument) naming the flag: native disabled, a negative autotune
  // limit, a verbose level outside 0..kMaxVerboseLevel.
  void validate() const;
  void apply_to(Settings& settings) const;
  // These flags with `newer`'s set fields taking precedence.
  Flags overlaid_with(const Flags& newer) const;
};

// The calling thread's view: the global settings with its scoped overrides applied.
Settings current_settings();
// The same with `session` flags between the global values and the thread's overrides.
Settings current_settings(const Flags& session);
// Changes the global settings (every thread without a scoped override of that setting sees them).
void set_flags(const Flags& flags);
// Resets every global setting to its default (tests).
void reset_flags();

// Overrides settings for the calling thread until destroyed; nests, and restores the previous
// overrides exactly, also when an exception unwinds the scope. Other threads are unaffected, except
// that oneDNN's own verbose (onednn_verbose) is process-wide in oneDNN: it is switched for the
// scope for every thread and restored afterwards.
class ScopedFlags {
 public:
  explicit ScopedFlags(const Flags& flags);
  ~ScopedFlags();
  ScopedFlags(const ScopedFlags&) = delete;
  ScopedFlags& operator=(const ScopedFlags&) = delete;

 private:
  Flags previous_;
  std::optional<int> previous_library_verbose_;
};

// Parses "fp32" or "bf16"; throws naming `what` otherwise.
Precision parse_precision(std::string_view text, std::string_view what);

}  // namespace kiln
