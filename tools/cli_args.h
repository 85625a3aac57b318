// A small command-line parser: positional arguments plus --name VALUE / --name=VALUE / --flag
// options checked against the command's list, so an unknown option is an error naming it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kiln {

struct OptionSpec {
  std::string name;  // without dashes: "threads"
  bool takes_value = true;
  std::string help;
};

struct ParsedArgs {
  std::vector<std::string> positional;
  std::multimap<std::string, std::string> options;

  bool has(const std::string& name) const { return options.count(name) != 0; }
  // Last value given for `name`, or `fallback`.
  std::string value(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> values(const std::string& name) const;
  // Parses an integer option in [min_value, max_value]; throws naming the option otherwise.
  int int_value(const std::string& name, int fallback, int min_value, int max_value) const;
};

// Throws kiln::Error (invalid_argument) naming the command and the option for unknown options or
// missing values.
ParsedArgs parse_args(const std::string& command, const std::vector<std::string>& args,
                      const std::vector<OptionSpec>& specs);

// "  --threads N   intra-op threads" lines for usage messages.
std::string options_help(const std::vector<OptionSpec>& specs);

}  // namespace kiln
