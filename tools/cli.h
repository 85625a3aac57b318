// The `kiln` command line as a function, so the executable and the Python module share it.
#pragma once

#include <string>
#include <vector>

namespace kiln {

// Runs `kiln ARGUMENTS...` (the program name excluded) and returns its exit code.
int run_cli(const std::vector<std::string>& arguments);

}  // namespace kiln
