#include "backends/setting_table.h"

#include <algorithm>
#include <charconv>

#include "core/error.h"

namespace kiln {
namespace {

std::array<SettingSlot, kSettingSlotCount> expand_rows() {
  std::array<SettingSlot, kSettingSlotCount> slots;
  int slot = 0;
  for (const SettingRow& row : kSettingRows) {
    const int copies = row.per_backend ? kBackendCount : 1;
    for (int backend = 0; backend < copies; ++backend, ++slot) {
      SettingSlot& s = slots[slot];
      s.slot = slot;
      s.row = &row;
      s.backend = row.per_backend ? backend : -1;
      s.name = row.per_backend ? str_cat(kBackendNames[backend], "_", row.name) : std::string(row.name);
      s.cli_name = setting_cli_name(s.name);
      s.help = std::string(row.help);
      if (const size_t at = s.help.find("this backend"); row.per_backend && at != std::string::npos) {
        s.help.replace(at, std::string_view("this backend").size(), kBackendNames[backend]);
      }
    }
  }
  return slots;
}

// A list's names: "flash,math", "none" when empty.
std::string priority_list_text(const SettingRow& row, int value) {
  std::string text;
  for (int choice : priority_list(value)) {
    text += str_cat(text.empty() ? "" : ",",
                    static_cast<size_t>(choice) < row.choices.size() ? row.choices[choice] : "?");
  }
  return text.empty() ? std::string(row.empty_list) : text;
}

}  // namespace

std::vector<int> priority_list(int value) {
  std::vector<int> choices;
  constexpr int kMask = (1 << kPriorityListBits) - 1;
  for (int shift = 0; shift < kPriorityListBits * kMaxPriorityListLength && (value >> shift) != 0;
       shift += kPriorityListBits) {
    const int entry = (value >> shift) & kMask;
    choices.push_back(entry - 1);  // -1 for a gap: check_setting_value refuses it
  }
  return choices;
}

std::string choice_names(const SettingRow& row) {
  std::string names;
  for (size_t index = 0; index < row.choices.size(); ++index) {
    const char* separator = index == 0 ? "" : index + 1 == row.choices.size() ? " or " : ", ";
    names += str_cat(separator, "'", row.choices[index], "'");
  }
  return names;
}

const std::array<SettingSlot, kSettingSlotCount>& setting_slots() {
  static const std::array<SettingSlot, kSettingSlotCount> slots = expand_rows();
  return slots;
}

std::string setting_cli_name(std::string_view name) {
  std::string spelled(name);
  std::replace(spelled.begin(), spelled.end(), '_', '-');
  return spelled;
}

std::string known_setting_names() {
  std::string names;
  for (const SettingSlot& slot : setting_slots()) names += str_cat(names.empty() ? "" : ", ", slot.name);
  for (const SettingShorthand& shorthand : kSettingShorthands) names += str_cat(", ", shorthand.name);
  return names;
}

const SettingSlot& find_setting(std::string_view name) {
  for (const SettingSlot& slot : setting_slots()) {
    if (slot.name == name) return slot;
  }
  fail(ErrorKind::invalid_argument, "unknown setting '", name, "' (known: ", known_setting_names(), ")");
}

int prefer_slot(int family) {
  static const std::array<int, registry_data::kOpFamilyCount> slots = [] {
    std::array<int, registry_data::kOpFamilyCount> found{};
    for (int f = 0; f < registry_data::kOpFamilyCount; ++f)
      found[f] = find_setting(str_cat("prefer_", registry_data::kOpFamilies[f].name)).slot;
    return found;
  }();
  return slots.at(static_cast<size_t>(family));
}

const SettingShorthand* find_shorthand(std::string_view name) {
  for (const SettingShorthand& shorthand : kSettingShorthands) {
    if (shorthand.name == name) return &shorthand;
  }
  return nullptr;
}

std::string_view setting_type_name(SettingType type) {
  switch (type) {
    case SettingType::boolean:
      return "bool";
    case SettingType::integer:
      return "int";
    case SettingType::choice:
      return "choice";
    case SettingType::priority_list:
      return "list";
    case SettingType::sink:
      return "sink";
  }
  return "?";
}

void check_setting_value(const SettingSlot& slot, int value) {
  const SettingRow& row = *slot.row;
  switch (row.type) {
    case SettingType::boolean:
      KILN_CHECK(value == 0 || value == 1, invalid_argument, "setting '", slot.name, "' is on or off, got ",
                 value);
      break;
    case SettingType::integer:
      KILN_CHECK(value >= row.min && value <= row.max, invalid_argument, "setting '", slot.name,
                 "' takes an integer from ", row.min, " to ", row.max, ", got ", value);
      break;
    case SettingType::choice:
      KILN_CHECK(value >= 0 && static_cast<size_t>(value) < row.choices.size(), invalid_argument, "setting '",
                 slot.name, "' must be ", choice_names(row));
      break;
    case SettingType::priority_list: {
      const std::vector<int> choices = priority_list(value);
      const bool valid = value >= 0 && value < (1 << (kPriorityListBits * kMaxPriorityListLength)) &&
                         std::all_of(choices.begin(), choices.end(), [&](int choice) {
                           return choice >= 0 && static_cast<size_t>(choice) < row.choices.size() &&
                                  std::count(choices.begin(), choices.end(), choice) == 1;
                         });
      KILN_CHECK(valid, invalid_argument, "setting '", slot.name, "' is a list of distinct names out of ",
                 choice_names(row), ", in priority order");
      break;
    }
    case SettingType::sink:
      fail(ErrorKind::invalid_argument, "setting '", slot.name, "' takes a sink, not a number");
  }
}

int parse_setting_value(const SettingSlot& slot, std::string_view text, std::string_view source) {
  const SettingRow& row = *slot.row;
  switch (row.type) {
    case SettingType::boolean:
      if (text == "1" || text == "true" || text == "on") return 1;
      if (text == "0" || text == "false" || text == "off") return 0;
      fail(ErrorKind::invalid_argument, source, ": '", text, "' is not on or off (1|0|true|false|on|off)");
    case SettingType::integer: {
      int value = 0;
      const char* end = text.data() + text.size();
      const auto [last, error] = std::from_chars(text.data(), end, value);
      KILN_CHECK(error == std::errc{} && last == end && value >= row.min && value <= row.max,
                 invalid_argument, source, ": '", text, "' is not an integer from ", row.min, " to ",
                 row.max);
      return value;
    }
    case SettingType::choice:
      for (size_t index = 0; index < row.choices.size(); ++index) {
        if (row.choices[index] == text) return static_cast<int>(index);
      }
      fail(ErrorKind::invalid_argument, source, " must be ", choice_names(row), ", got '", text, "'");
    case SettingType::priority_list: {
      std::vector<int> choices;
      if (text == row.empty_list || text.empty()) return 0;
      while (!text.empty()) {
        const size_t comma = text.find(',');
        const std::string_view name = text.substr(0, comma);
        const auto found = std::find(row.choices.begin(), row.choices.end(), name);
        KILN_CHECK(found != row.choices.end(), invalid_argument, source, ": '", name, "' is not one of ",
                   choice_names(row), " (a comma-separated list in priority order, or '", row.empty_list,
                   "')");
        const int choice = static_cast<int>(found - row.choices.begin());
        KILN_CHECK(std::find(choices.begin(), choices.end(), choice) == choices.end(), invalid_argument,
                   source, ": '", name, "' is listed twice");
        choices.push_back(choice);
        text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
        KILN_CHECK(comma == std::string_view::npos || !text.empty(), invalid_argument, source,
                   ": the list ends with a comma");
      }
      return priority_list_value(choices);
    }
    case SettingType::sink:
      break;
  }
  fail(ErrorKind::invalid_argument, source, ": setting '", slot.name, "' is not given as text");
}

std::string setting_value_text(const SettingSlot& slot, int value) {
  if (slot.row->type == SettingType::priority_list) return priority_list_text(*slot.row, value);
  if (slot.row->type == SettingType::choice && value >= 0 &&
      static_cast<size_t>(value) < slot.row->choices.size())
    return std::string(slot.row->choices[value]);
  return str_cat(value);
}

}  // namespace kiln
