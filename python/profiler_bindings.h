// The profiler's part of kiln._kiln (python/profiler_bindings.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace kiln {

void bind_profiler(pybind11::module_& m);

}  // namespace kiln
