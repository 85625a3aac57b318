// What the settings and verbose tests share: a guard that puts the global settings back (for
// tests of the global faces: backends::set, the CLI options), and a sink that collects lines.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/settings.h"
#include "backends/verbose_sink.h"

namespace kiln::testing {

class ScopedGlobalSettings {
 public:
  ScopedGlobalSettings() : saved_(global_settings()) {}
  ~ScopedGlobalSettings() { set_settings(saved_); }
  ScopedGlobalSettings(const ScopedGlobalSettings&) = delete;
  ScopedGlobalSettings& operator=(const ScopedGlobalSettings&) = delete;

 private:
  Settings saved_;
};

// Collects verbose lines from any thread.
class VerboseLines {
 public:
  std::shared_ptr<VerboseSink> sink() {
    return callback_verbose_sink([this](std::string_view line) {
      std::lock_guard lock(mutex_);
      lines_.emplace_back(line);
    });
  }
  std::vector<std::string> all() {
    std::lock_guard lock(mutex_);
    return lines_;
  }
  std::vector<std::string> starting(const std::string& prefix) {
    std::vector<std::string> kept;
    for (const std::string& line : all()) {
      if (line.starts_with(prefix)) kept.push_back(line);
    }
    return kept;
  }
  // The lines of one kind: "exec", "plan", "call", "info".
  std::vector<std::string> lines_of(const std::string& kind) {
    return starting("kiln_verbose," + kind + ",");
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

}  // namespace kiln::testing
