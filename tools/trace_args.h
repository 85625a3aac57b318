// Options shared by the commands that read trace files (`kiln profile --load`, `kiln tidy`).
#pragma once

#include <cstdint>

#include "tools/cli_args.h"

namespace kiln {

// --max-trace-bytes N: refuse a file over N bytes (the default cap when absent; 0: no cap).
OptionSpec max_trace_bytes_option(const char* applies_to);
int64_t max_trace_bytes(const ParsedArgs& parsed);

}  // namespace kiln
