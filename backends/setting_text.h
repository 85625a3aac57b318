// A setting given as text by name, as users write it outside C++: `kiln compare`'s NAME=VALUE
// assignments, `kiln serve`'s per-model parameters.
#pragma once

#include <string_view>

#include "backends/settings.h"

namespace kiln {

// Sets `name` (a settings table row, shorthand or alias as Python names it: "conv_precision",
// "precision", "onednn_enabled", "mkldnn.enabled") to `text` parsed as that row's value (an alias's
// value mapped first, backends/setting_aliases.h). Throws kiln::Error (invalid_argument)
// naming `source`, the setting and the bad text; the verbose sink cannot be set this way.
Settings& set_setting_from_text(Settings& settings, std::string_view name, std::string_view text,
                                std::string_view source);
// The value of `name` (a row, shorthand or alias) in `settings` as text: "bf16", "auto", for an alias
// its own name for the value ("onednn" for quantized.engine's "onednn,native").
std::string setting_text(const Settings& settings, std::string_view name);

// The settings a plan's settings text describes (Settings::describe_plan_settings, as traces record
// it: "onednn,blas,native;threads=2;deterministic=1"), each plan setting it covers set: to the text's
// value, else to its default. Throws kiln::Error (invalid_argument) naming the part it cannot read.
Settings plan_settings_from_text(std::string_view text);

}  // namespace kiln
