#include "tools/trace_args.h"

#include <charconv>

#include "core/error.h"
#include "profiler/trace_load.h"

namespace kiln {

OptionSpec max_trace_bytes_option(const char* applies_to) {
  return {"max-trace-bytes", true,
          str_cat("N: ", applies_to, "refuse a file over N bytes (default 2 GiB; 0: no cap)")};
}

int64_t max_trace_bytes(const ParsedArgs& parsed) {
  if (!parsed.has("max-trace-bytes")) return trace::kDefaultMaxTraceBytes;
  const std::string text = parsed.value("max-trace-bytes");
  int64_t bytes = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), bytes);
  KILN_CHECK(error == std::errc() && end == text.data() + text.size() && bytes >= 0, invalid_argument,
             "--max-trace-bytes expects a number of bytes >= 0 (0: no cap), got '", text, "'");
  return bytes;
}

}  // namespace kiln
