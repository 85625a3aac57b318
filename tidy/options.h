// tidy's options in one table, as settings have theirs (backends/setting_table.h): each option's
// name (Python's keyword), command-line option, type, default, range and help. `kiln tidy`'s options,
// Python's kiln.tidy.report checks and defaults, and the C++ option structs' defaults all come from it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::tidy {

enum class TidyOptionType : uint8_t {
  boolean,  // on or off; the command line's option turns it from its default to the other
  integer,  // within [min, max]
  text,     // a path or a regular expression
  list,     // several texts (repeatable on the command line)
};

struct TidyOptionRow {
  std::string_view name;  // Python's keyword: "tiny_step_us"
  std::string_view cli;   // the command line's option: "tiny-step-us"
  TidyOptionType type;
  int64_t default_value = 0;  // integer and boolean options
  int64_t min = 0;
  int64_t max = 0;
  bool measures = false;  // it says how the fixes are measured: it applies with benchmark only
  std::string_view help;
};

inline constexpr TidyOptionRow kTidyOptions[] = {
    {"names", "name", TidyOptionType::list, 0, 0, 0, false,
     "REGEX: also report events whose name matches REGEX (TorchTidy's NamePattern; repeatable)"},
    {"corrected", "no-corrected", TidyOptionType::boolean, 1, 0, 1, false,
     "leave out kiln's corrected versions of TorchTidy's patterns (kiln's runtime patterns stay)"},
    {"tiny_step_us", "tiny-step-us", TidyOptionType::integer, 20, 1, 1'000'000, false,
     "US: TinyOpMultithreadedPattern counts steps shorter than US microseconds as tiny"},
    {"patterns", "patterns", TidyOptionType::list, 0, 0, 0, false,
     "FILE.py: also run the kiln.tidy.Pattern classes FILE.py defines (repeatable; runs under Python)"},
    {"benchmark", "benchmark", TidyOptionType::boolean, 0, 0, 1, false,
     "measure what fixing the matched patterns saves, on this machine (the model planned again at the "
     "trace's shapes, under the settings the trace records and under each fix)"},
    {"model", "model", TidyOptionType::text, 0, 0, 0, true,
     "MODEL: with --benchmark, the ONNX file the trace ran (default: the one it names)"},
    {"runs", "runs", TidyOptionType::integer, 20, 1, 1 << 20, true,
     "N: with --benchmark, timed runs per measurement"},
};

// The row named `name` (Python's keyword or the command line's option); throws invalid_argument
// listing every option otherwise.
const TidyOptionRow& find_tidy_option(std::string_view name);
// The row named `name`, at compile time (a misspelled name does not compile).
consteval const TidyOptionRow& tidy_option(std::string_view name) {
  for (const TidyOptionRow& row : kTidyOptions) {
    if (row.name == name) return row;
  }
  throw "no such tidy option";
}
// Checks an integer option's value against its range; throws invalid_argument naming the option.
int64_t checked_tidy_option(const TidyOptionRow& row, int64_t value);

}  // namespace kiln::tidy
