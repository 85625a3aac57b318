// The anti-pattern analysis's part of kiln._kiln (python/tidy_bindings.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace kiln {

void bind_tidy(pybind11::module_& m);

}  // namespace kiln
