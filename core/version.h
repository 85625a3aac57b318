// kiln's version and build configuration, filled in by CMake (core/version.cpp.in).
#pragma once

#include <string_view>

namespace kiln {

std::string_view kiln_version();
// e.g. "Release, g++ 12.2.0, -O3"
std::string_view build_configuration();

}  // namespace kiln
