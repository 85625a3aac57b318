// Settings: values for the rows of the settings table (setting_table.h). Each setting has a global
// value (set_settings) and may be overridden for a scope on one thread (ScopedSettings) or for one
// session's runs; a run takes the calling thread's view when it starts (current_settings) and
// everything that run does sees it, on every thread the run uses.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/setting_table.h"
#include "runtime/threads.h"

namespace kiln {

class VerboseSink;

// A value per slot of the table, each set or not. A complete configuration (what a run sees) has
// every slot set; a change (what set_settings, a ScopedSettings or a session applies) sets some.
class Settings {
 public:
  // Every slot at its row's default (the environment unread): a complete configuration.
  static Settings defaults();

  int get(SettingKey key) const { return values_[key.slot]; }
  bool on(SettingKey key) const { return values_[key.slot] != 0; }
  Precision precision(SettingKey key) const { return static_cast<Precision>(values_[key.slot]); }
  int get(BackendSettingKey key, int backend) const { return values_[key.first + backend]; }
  int value(int slot) const { return values_[slot]; }
  bool has(int slot) const { return set_[slot]; }

  // Checked against the row (type, range, a backend that cannot be disabled); throws kiln::Error
  // (invalid_argument) naming the setting.
  Settings& set(int slot, int value);
  Settings& set(SettingKey key, int value) { return set(key.slot, value); }
  Settings& set(BackendSettingKey key, int backend, int value) { return set(key.first + backend, value); }
  // By user-facing name ("onednn_verbose") or shorthand ("precision"): the CLI's and Python's way.
  Settings& set_by_name(std::string_view name, int value);
  // null: standard output.
  Settings& set_verbose_sink(std::shared_ptr<VerboseSink> sink);
  const std::shared_ptr<VerboseSink>& verbose_sink() const { return sink_; }

  // `changes`' set slots (and sink) over these.
  void overlay(const Settings& changes);

  bool backend_enabled(int backend) const { return get(BackendSettingKey("enabled"), backend) != 0; }
  // The verbose level of steps and calls of the backend at `backend` (the global level or the
  // backend's own, whichever is higher), and the highest over all backends.
  int verbose_for(int backend) const;
  int max_verbose() const;
  // The thread count runs use: the setting, or the environment's (runtime/threads.h) when it is 0.
  int threads() const;
  // True when nobody chose the count: the setting is 0 and no environment variable gives one, so
  // runs use the cores (and adapt_to_load may give up the busy ones).
  bool threads_are_default() const;
  // The values of the settings that change plans (threads resolved), for plan keys.
  std::array<int32_t, kSettingSlotCount> plan_values() const;
  // Those settings as text for headers and explain: "onednn,blas,winograd,native;threads=2" plus every
  // other plan setting that differs from its default.
  std::string describe_plan_settings() const;

 private:
  std::array<int32_t, kSettingSlotCount> values_{};
  std::bitset<kSettingSlotCount> set_;
  std::shared_ptr<VerboseSink> sink_;
  bool sink_set_ = false;
};

// The calling thread's view: the global settings, then `session`'s, then the thread's scoped ones.
Settings current_settings(const Settings& session = {});
// The global values alone (every slot set).
Settings global_settings();
// Changes the global settings (every thread without a scoped override of that setting sees them).
void set_settings(const Settings& changes);

// Overrides settings for the calling thread until destroyed; nests, and restores exactly, also
// when an exception unwinds the scope. Other threads are unaffected, except where a library's
// own switch is process-wide (oneDNN's verbose): the library then runs at the highest level any
// open scope on any thread, the global setting or its own environment variable asks for.
class ScopedSettings {
 public:
  explicit ScopedSettings(const Settings& changes);
  ~ScopedSettings();
  ScopedSettings(const ScopedSettings&) = delete;
  ScopedSettings& operator=(const ScopedSettings&) = delete;

 private:
  Settings previous_;
  Settings changes_;
  std::unique_ptr<ScopedIntraOpThreads> threads_;
};

// Held by a run with verbose on: the run's per-backend levels count as open scopes on the
// libraries' own process-wide switches while it runs, so a session's onednn_verbose reaches
// oneDNN's own lines too.
class ScopedRunLibraryVerbose {
 public:
  explicit ScopedRunLibraryVerbose(const Settings& run);
  ~ScopedRunLibraryVerbose();
  ScopedRunLibraryVerbose(const ScopedRunLibraryVerbose&) = delete;
  ScopedRunLibraryVerbose& operator=(const ScopedRunLibraryVerbose&) = delete;

 private:
  Settings levels_;  // the backends' verbose levels above 0
};

// The commonest guard: this thread's work on `threads` threads.
class ScopedThreads : public ScopedSettings {
 public:
  explicit ScopedThreads(int threads) : ScopedSettings(Settings().set(SettingKey("threads"), threads)) {}
};

// The thread-count API of PyTorch's shape over the `threads` setting.
void set_num_threads(int threads);
int get_num_threads();
// Where get_num_threads() took its value from: "scope", "api", "KILN_NUM_THREADS",
// "MKL_NUM_THREADS", "OMP_NUM_THREADS" or "cores".
std::string num_threads_source();

// The level kiln last gave a library's own verbose switch for `backend` (0 when it never did).
int library_verbose_requested(int backend);

}  // namespace kiln
