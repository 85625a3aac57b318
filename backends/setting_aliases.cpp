#include "backends/setting_aliases.h"

#include "core/error.h"

namespace kiln {

const SettingAlias* find_alias(std::string_view name) {
  for (const SettingAlias& alias : kSettingAliases) {
    if (alias.name == name) return &alias;
  }
  return nullptr;
}

std::string alias_names() {
  std::string names;
  for (const SettingAlias& alias : kSettingAliases) names += str_cat(names.empty() ? "" : ", ", alias.name);
  return names;
}

std::string_view setting_text_of(const SettingAlias& alias, std::string_view text) {
  if (alias.values.empty()) return text;
  std::string known;
  for (const AliasValue& value : alias.values) {
    if (value.alias == text) return value.setting;
    known += str_cat(known.empty() ? "" : ", ", value.alias);
  }
  fail(ErrorKind::invalid_argument, alias.name, " is one of ", known, ", got '", text, "'");
}

std::string alias_text_of(const SettingAlias& alias, const std::string& setting_text) {
  for (const AliasValue& value : alias.values) {
    if (value.setting == setting_text) return std::string(value.alias);
  }
  return setting_text;
}

}  // namespace kiln
