// Tests of one backend's kernels skip where kiln was configured without that backend
// (KILN_WITH_<NAME>=OFF, e.g. the native-only preset); the rest of the suite runs there unchanged.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string_view>

#include "backends/backends.h"
#include "graph/plan.h"

// Skips the calling test unless backend `name` ("onednn", "blas") was built.
#define KILN_SKIP_UNLESS_BUILT(name)                                              \
  do {                                                                            \
    if (!::kiln::backends::info(name).built)                                      \
      GTEST_SKIP() << "kiln was configured without the " << (name) << " backend"; \
  } while (0)

namespace kiln {

// Whether one of the step's notes contains `text`.
inline bool has_note(const StepRecord& record, std::string_view text) {
  return std::any_of(record.notes.begin(), record.notes.end(),
                     [&](const std::string& note) { return note.find(text) != std::string::npos; });
}

}  // namespace kiln
