// A setting given as text by name, as users write it outside C++: `kiln compare`'s NAME=VALUE
// assignments, `kiln serve`'s per-model parameters.
#pragma once

#include <string_view>

#include "backends/settings.h"

namespace kiln {

// Sets `name` (a settings table row or shorthand as Python names it: "conv_precision", "precision",
// "onednn_enabled") to `text` parsed as that row's value. Throws kiln::Error (invalid_argument)
// naming `source`, the setting and the bad text; the verbose sink cannot be set this way.
Settings& set_setting_from_text(Settings& settings, std::string_view name, std::string_view text,
                                std::string_view source);

}  // namespace kiln
