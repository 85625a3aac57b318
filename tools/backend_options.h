// The backend options every command that plans a model takes (--disable, --precision,
// --deterministic, --autotune, --verbose, --verbose-file). They set kiln's global settings.
#pragma once

#include <string>
#include <vector>

#include "tools/cli_args.h"

namespace kiln {

// `specs` with the backend options inserted before its last entry (--help).
std::vector<OptionSpec> with_backend_options(std::vector<OptionSpec> specs);
// Applies the parsed backend options; throws kiln::Error naming a bad value.
void apply_backend_options(const ParsedArgs& parsed);
// "onednn,blas,native;conv=fp32;matmul=fp32": the settings that shape plans, for headers.
std::string settings_summary();

}  // namespace kiln
