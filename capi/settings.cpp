// Settings by name with values as text, for a session or for the whole process; backend facts.
#include <cstdlib>
#include <cstring>

#include "backends/backends.h"
#include "backends/setting_table.h"
#include "capi/handles.h"

namespace kiln::capi {
namespace {

// Adds `name` = `value` (text, as the CLI takes it) to `changes`; shorthands set every target.
void set_from_text(Settings& changes, const char* name, const char* value) {
  required(name, "name");
  required(value, "value");
  std::string_view targets[1] = {name};
  std::span<const std::string_view> slots = targets;
  if (const SettingShorthand* shorthand = find_shorthand(name)) slots = shorthand->targets;
  for (std::string_view target : slots) {
    const SettingSlot& slot = find_setting(target);
    KILN_CHECK(slot.row->type != SettingType::sink, invalid_argument, "setting '", name,
               "' takes a callback, which the C API does not offer (verbose lines go to stdout)");
    changes.set(slot.slot, parse_setting_value(slot, value, str_cat("setting '", name, "'")));
  }
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
    std::string_view target = required(name, "name");
    if (const SettingShorthand* shorthand = find_shorthand(target)) target = shorthand->targets[0];
    const SettingSlot& slot = find_setting(target);
    *value = capi::new_c_string(setting_value_text(slot, backends::get(target)));
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
