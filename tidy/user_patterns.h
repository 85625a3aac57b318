// Patterns written outside kiln's C++ (kiln.tidy.Pattern in Python, python/kiln/tidy.py): their
// results, run elsewhere, enter the report as a built-in's do, so they appear in every output and
// their declared fixes are estimated. A pattern that failed is reported with its traceback.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tidy/pattern.h"

namespace kiln::tidy {

// What one user pattern gave over a trace: per match its event and what report(), detail(),
// reason() and fix() said of it.
struct PatternResult {
  std::string name{};
  std::string description{};
  std::string url{};
  Reason skip{};          // its skip said so: nothing matched
  std::string failure{};  // it raised: the traceback (its other fields are empty)
  std::vector<EventIndex> matched{};
  std::vector<std::string> messages{};  // report(event), per match
  std::vector<std::string> details{};   // per match, may be empty
  std::vector<std::string> reasons{};   // per match, may be empty
  std::vector<Fix> fixes{};             // per match, or empty: none declared
  std::string summary{};
};

// A pattern that replays a PatternResult, for analyse(): it reads any trace and matches what the
// result says, in the order it says.
std::unique_ptr<Pattern> recorded_pattern(const PatternResult& result);

// Runs the user patterns in `files` (Python files) over `trace`. `kiln tidy --patterns` calls it; the
// Python module sets it when it loads (without it the command line runs itself under Python).
using PatternFileRunner =
    std::function<std::vector<PatternResult>(const std::vector<std::string>& files, const Trace& trace)>;
void set_pattern_file_runner(PatternFileRunner runner);
const PatternFileRunner& pattern_file_runner();

}  // namespace kiln::tidy
