#include "backends/setting_text.h"

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

}  // namespace kiln
