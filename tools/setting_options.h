// The settings options every command that plans or describes a model takes, derived from the
// settings table: --NAME VALUE per setting (--threads, --onednn-verbose, --conv-precision...),
// --NAME alone for switches (--deterministic, --autotune), --disable BACKEND for backends,
// --verbose-file FILE for the verbose sink, and the shorthands (--precision). They set kiln's
// global settings.
#pragma once

#include <string>
#include <vector>

#include "backends/settings.h"
#include "tools/cli_args.h"

namespace kiln {

// `specs` with the settings options inserted before its last entry (--help).
std::vector<OptionSpec> with_setting_options(std::vector<OptionSpec> specs);
// Applies the parsed settings options; throws kiln::Error naming the option and a bad value.
void apply_setting_options(const ParsedArgs& parsed);
// Settings from NAME=VALUE texts, NAME a settings table row or shorthand as Python names it
// ("conv_precision=bf16", "onednn_enabled=0"): what one side of `kiln compare` runs with. Throws
// kiln::Error naming `option` and the bad text.
Settings settings_from_assignments(const std::vector<std::string>& assignments, std::string_view option);
// "onednn,blas,winograd,native;threads=2": the settings that shape plans, for headers.
std::string settings_summary();

}  // namespace kiln
