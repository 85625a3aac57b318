#include "backends/setting_text.h"

#include "core/error.h"

namespace kiln {

Settings& set_setting_from_text(Settings& settings, std::string_view name, std::string_view text,
                                std::string_view source) {
  const SettingShorthand* shorthand = find_shorthand(name);
  const SettingSlot& slot = find_setting(shorthand != nullptr ? shorthand->targets.front() : name);
  KILN_CHECK(slot.row->type != SettingType::sink, invalid_argument, source, " ", name,
             ": the verbose sink is not a per-run setting");
  return settings.set_by_name(name, parse_setting_value(slot, text, str_cat(source, " ", name)));
}

}  // namespace kiln
