// Settings by name with values as text, for a session or for the whole process; backend facts.
#include <cstdlib>
#include <cstring>

#include "backends/backends.h"
#include "backends/setting_text.h"
#include "capi/handles.h"

namespace kiln::capi {
namespace {

// Adds `name` = `value` (text, as the CLI takes it) to `changes`: a row, a shorthand (every target)
// or an alias (backends/setting_aliases.h).
void set_from_text(Settings& changes, const char* name, const char* value) {
  required(name, "name");
  required(value, "value");
  KILN_CHECK(
      std::string_view(name) != "verbose_sink", invalid_argument,
      "setting 'verbose_sink' takes a callback, which the C API does not offer (verbose lines go to stdout)");
  set_setting_from_text(changes, name, value, "setting");
}

}  // namespace

char* new_c_string(const std::string& text) {
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) throw std::bad_alloc();
  std::memcpy(copy, text.c_str(), text.size() + 1);
  return copy;
}

}  // namespace kiln::capi

using namespace kiln;
using capi::guarded;
using capi::required;

extern "C" {

kiln_status* kiln_settings_create(kiln_settings** out) {
  return guarded([&] {
    required(out, "out");
    *out = new kiln_settings;
  });
}

kiln_status* kiln_settings_set(kiln_settings* settings, const char* name, const char* value) {
  return guarded([&] { capi::set_from_text(required(settings, "settings")->settings, name, value); });
}

void kiln_settings_free(kiln_settings* settings) { delete settings; }

kiln_status* kiln_global_setting_set(const char* name, const char* value) {
  return guarded([&] {
    Settings changes;
    capi::set_from_text(changes, name, value);
    set_settings(changes);
  });
}

kiln_status* kiln_global_setting_get(const char* name, char** value) {
  return guarded([&] {
    required(value, "value");
    *value = nullptr;
    const std::string_view target = required(name, "name");
    KILN_CHECK(target != "verbose_sink", invalid_argument,
               "setting 'verbose_sink' is a callback, not a value");
    *value = capi::new_c_string(setting_text(global_settings(), target));
  });
}

kiln_status* kiln_backend_info(const char* name, int* built, int* available, char** version) {
  return guarded([&] {
    if (version != nullptr) *version = nullptr;
    const backends::BackendInfo info = backends::info(required(name, "name"));
    if (built != nullptr) *built = info.built ? 1 : 0;
    if (available != nullptr) *available = info.available ? 1 : 0;
    if (version != nullptr) *version = capi::new_c_string(info.version);
  });
}

}  // extern "C"
