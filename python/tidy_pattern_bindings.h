// kiln.tidy's pattern API underneath (python/tidy_pattern_bindings.cpp): the event tree a
// kiln.tidy.Pattern walks, its events, the built-in patterns, and the runner `kiln tidy --patterns`
// calls (python/kiln/tidy.py writes the Pattern class over these).
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "tidy/user_patterns.h"

namespace kiln {

void bind_tidy_patterns(pybind11::module_& t);

// A user pattern's result as python/kiln/tidy.py gives it (a dict), for the report.
tidy::PatternResult pattern_result_from(const pybind11::handle& result);

}  // namespace kiln
