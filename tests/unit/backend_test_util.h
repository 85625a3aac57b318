// Tests of one backend's kernels skip where kiln was configured without that backend
// (KILN_WITH_<NAME>=OFF, e.g. the native-only preset); the rest of the suite runs there unchanged.
#pragma once

#include <gtest/gtest.h>

#include "backends/backends.h"

// Skips the calling test unless backend `name` ("onednn", "blas") was built.
#define KILN_SKIP_UNLESS_BUILT(name)                                              \
  do {                                                                            \
    if (!::kiln::backends::info(name).built)                                      \
      GTEST_SKIP() << "kiln was configured without the " << (name) << " backend"; \
  } while (0)
