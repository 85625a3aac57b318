#include "tools/cli_args.h"

#include <charconv>

#include "core/error.h"

namespace kiln {

std::string ParsedArgs::value(const std::string& name, const std::string& fallback) const {
  auto range = options.equal_range(name);
  if (range.first == range.second) return fallback;
  return std::prev(range.second)->second;
}

std::vector<std::string> ParsedArgs::values(const std::string& name) const {
  std::vector<std::string> result;
  auto range = options.equal_range(name);
  for (auto it = range.first; it != range.second; ++it) result.push_back(it->second);
  return result;
}

int ParsedArgs::int_value(const std::string& name, int fallback, int min_value, int max_value) const {
  if (!has(name)) return fallback;
  const std::string text = value(name);
  int parsed = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  KILN_CHECK(error == std::errc{} && end == text.data() + text.size() && parsed >= min_value && parsed <= max_value,
             invalid_argument, "--", name, " expects an integer in ", min_value, "..", max_value, ", got '", text,
             "'");
  return parsed;
}

ParsedArgs parse_args(const std::string& command, const std::vector<std::string>& args,
                      const std::vector<OptionSpec>& specs) {
  ParsedArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 2 || arg.compare(0, 2, "--") != 0) {
      parsed.positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_inline_value = false;
    if (size_t equals = name.find('='); equals != std::string::npos) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
      has_inline_value = true;
    }
    const OptionSpec* spec = nullptr;
    for (const OptionSpec& candidate : specs) {
      if (candidate.name == name) spec = &candidate;
    }
    if (spec == nullptr) {
      std::string known;
      for (const OptionSpec& candidate : specs) known += str_cat(known.empty() ? "" : ", ", "--", candidate.name);
      fail(ErrorKind::invalid_argument, "unknown option '--", name, "' for 'kiln ", command, "' (expected ",
           known.empty() ? "no options" : known, ")");
    }
    if (spec->takes_value && !has_inline_value) {
      KILN_CHECK(i + 1 < args.size(), invalid_argument, "option '--", name, "' of 'kiln ", command,
                 "' needs a value");
      value = args[++i];
    }
    KILN_CHECK(spec->takes_value || !has_inline_value, invalid_argument, "option '--", name, "' of 'kiln ",
               command, "' takes no value");
    parsed.options.emplace(name, value);
  }
  return parsed;
}

std::string options_help(const std::vector<OptionSpec>& specs) {
  std::string text;
  for (const OptionSpec& spec : specs) {
    std::string left = "  --" + spec.name + (spec.takes_value ? " VALUE" : "");
    left.resize(std::max<size_t>(left.size() + 2, 28), ' ');
    text += left + spec.help + "\n";
  }
  return text;
}

}  // namespace kiln
