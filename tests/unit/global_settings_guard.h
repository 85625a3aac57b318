// For tests of the global faces (backends::set, the CLI options): puts the global settings back as
// they were when the guard was made, so no test leaks a global into the next.
#pragma once

#include "backends/settings.h"

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

}  // namespace kiln::testing
