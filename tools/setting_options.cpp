#include "tools/setting_options.h"

#include "backends/setting_table.h"
#include "backends/setting_text.h"
#include "backends/settings.h"
#include "backends/verbose_sink.h"

namespace kiln {
namespace {

// The option of every row but the per-backend switches, which share --disable.
std::vector<OptionSpec> setting_specs() {
  std::vector<OptionSpec> specs;
  bool disable_listed = false;
  for (const SettingSlot& slot : setting_slots()) {
    const SettingRow& row = *slot.row;
    switch (row.cli) {
      case CliForm::disable:
        if (!disable_listed)
          specs.push_back({"disable", true, "BACKEND: leave a backend out of kernel selection (repeatable)"});
        disable_listed = true;
        break;
      case CliForm::flag:
        specs.push_back({slot.cli_name, false, slot.help});
        break;
      case CliForm::value:
        if (row.type == SettingType::sink) {
          specs.push_back(
              {"verbose-file", true, "FILE: append verbose lines to FILE instead of standard output"});
        } else {
          specs.push_back({slot.cli_name, true,
                           str_cat(row.type == SettingType::choice          ? ""
                                   : row.type == SettingType::boolean       ? "0|1: "
                                   : row.type == SettingType::priority_list ? "LIST: "
                                                                            : "N: ",
                                   slot.help)});
        }
        break;
    }
  }
  for (const SettingShorthand& shorthand : kSettingShorthands) {
    specs.push_back({setting_cli_name(shorthand.name), true, std::string(shorthand.help)});
  }
  specs.push_back({"set", true,
                   "NAME=VALUE: any setting by its name, a shorthand or PyTorch's alias (mkldnn.enabled, "
                   "quantized.engine ...; kiln info --settings lists them); repeatable"});
  return specs;
}

}  // namespace

std::vector<OptionSpec> with_setting_options(std::vector<OptionSpec> specs) {
  const std::vector<OptionSpec> settings = setting_specs();
  specs.insert(specs.empty() ? specs.end() : specs.end() - 1, settings.begin(), settings.end());
  return specs;
}

void apply_setting_options(const ParsedArgs& parsed) {
  Settings changes;
  for (const SettingShorthand& shorthand : kSettingShorthands) {
    const std::string option = setting_cli_name(shorthand.name);
    if (!parsed.has(option)) continue;
    const std::string source = "--" + option;
    for (std::string_view target : shorthand.targets) {
      const SettingSlot& slot = find_setting(target);
      changes.set(slot.slot, parse_setting_value(slot, parsed.value(option), source));
    }
  }
  for (const SettingSlot& slot : setting_slots()) {
    const SettingRow& row = *slot.row;
    if (row.cli == CliForm::disable) continue;
    if (row.type == SettingType::sink) {
      if (parsed.has("verbose-file"))
        changes.set_verbose_sink(file_verbose_sink(parsed.value("verbose-file")));
    } else if (row.cli == CliForm::flag) {
      if (parsed.has(slot.cli_name)) changes.set(slot.slot, 1);
    } else if (parsed.has(slot.cli_name)) {
      changes.set(slot.slot, parse_setting_value(slot, parsed.value(slot.cli_name), "--" + slot.cli_name));
    }
  }
  changes.overlay(settings_from_assignments(parsed.values("set"), "set"));
  for (const std::string& backend : parsed.values("disable")) {
    bool known = false;
    for (const SettingSlot& slot : setting_slots()) {
      if (slot.row->cli == CliForm::disable && slot.backend >= 0 && kBackendNames[slot.backend] == backend) {
        changes.set(slot.slot, 0);
        known = true;
      }
    }
    if (!known) {
      std::string names;
      for (std::string_view name : kBackendNames) names += str_cat(names.empty() ? "" : ", ", name);
      fail(ErrorKind::invalid_argument, "--disable: unknown backend '", backend, "' (known: ", names, ")");
    }
  }
  set_settings(changes);
}

std::string settings_summary() {
  return current_settings().describe_plan_settings();
}

Settings settings_from_assignments(const std::vector<std::string>& assignments, std::string_view option) {
  Settings settings;
  for (const std::string& text : assignments) {
    const size_t equals = text.find('=');
    KILN_CHECK(equals != std::string::npos && equals > 0, invalid_argument, "--", option,
               " expects NAME=VALUE (a setting as kiln.backends.table() or aliases() names it), got '", text,
               "'");
    set_setting_from_text(settings, text.substr(0, equals), text.substr(equals + 1), str_cat("--", option));
  }
  return settings;
}

}  // namespace kiln
