#include "backends/setting_text.h"

#include <algorithm>
#include <array>

#include "backends/registry.h"
#include "backends/setting_aliases.h"
#include "core/error.h"

namespace kiln {

Settings& set_setting_from_text(Settings& settings, std::string_view name, std::string_view text,
                                std::string_view source) {
  if (const SettingAlias* alias = find_alias(name)) {
    const SettingSlot& slot = find_setting(alias->setting);
    const std::string_view mapped =
        with_context(std::string(source), [&] { return setting_text_of(*alias, text); });
    return settings.set(slot.slot,
                        parse_setting_value(slot, mapped, str_cat(source, " ", name, " (", slot.name, ")")));
  }
  const SettingShorthand* shorthand = find_shorthand(name);
  const SettingSlot& slot = find_setting(shorthand != nullptr ? shorthand->targets.front() : name);
  KILN_CHECK(slot.row->type != SettingType::sink, invalid_argument, source, " ", name,
             ": the verbose sink is not a per-run setting");
  return settings.set_by_name(name, parse_setting_value(slot, text, str_cat(source, " ", name)));
}

std::string setting_text(const Settings& settings, std::string_view name) {
  const SettingAlias* alias = find_alias(name);
  std::string_view row = alias != nullptr ? alias->setting : name;
  if (const SettingShorthand* shorthand = find_shorthand(row)) row = shorthand->targets.front();
  const SettingSlot& slot = find_setting(row);
  const std::string text = setting_value_text(slot, settings.value(slot.slot));
  return alias != nullptr ? alias_text_of(*alias, text) : text;
}

Settings plan_settings_from_text(std::string_view text) {
  const Settings defaults = Settings::defaults();
  Settings settings;
  for (const SettingSlot& slot : setting_slots()) {
    if (slot.row->changes_plan && (!slot.row->per_backend || slot.row->name == "enabled"))
      settings.set(slot.slot, defaults.value(slot.slot));
  }
  const std::string source = str_cat("plan settings '", text, "'");
  const size_t backends_end = text.find(';');
  std::string_view enabled = text.substr(0, backends_end);
  std::array<bool, kBackendCount> listed{};
  while (!enabled.empty()) {
    const size_t comma = enabled.find(',');
    const std::string_view name = enabled.substr(0, comma);
    const auto found = std::find(kBackendNames.begin(), kBackendNames.end(), name);
    KILN_CHECK(found != kBackendNames.end(), invalid_argument, source, ": '", name, "' is not a backend");
    listed[static_cast<size_t>(found - kBackendNames.begin())] = true;
    enabled = comma == std::string_view::npos ? std::string_view() : enabled.substr(comma + 1);
  }
  for (int backend = 0; backend < kBackendCount; ++backend)
    settings.set(BackendSettingKey("enabled"), backend, listed[static_cast<size_t>(backend)] ? 1 : 0);
  std::string_view rest =
      backends_end == std::string_view::npos ? std::string_view() : text.substr(backends_end + 1);
  while (!rest.empty()) {
    const size_t semicolon = rest.find(';');
    const std::string_view assignment = rest.substr(0, semicolon);
    const size_t equals = assignment.find('=');
    KILN_CHECK(equals != std::string_view::npos, invalid_argument, source, ": '", assignment,
               "' is not NAME=VALUE");
    set_setting_from_text(settings, assignment.substr(0, equals), assignment.substr(equals + 1), source);
    rest = semicolon == std::string_view::npos ? std::string_view() : rest.substr(semicolon + 1);
  }
  return settings;
}

}  // namespace kiln
