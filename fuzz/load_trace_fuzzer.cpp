// Fuzzes trace loading (profiler/trace_load.h) and the anti-pattern analysis over what loads
// (tidy/report.h): any byte string must either load or raise kiln::Error; the loaded tree must have
// ids 1..N with each parent before its child, and every pattern must run over it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "profiler/trace_load.h"
#include "tidy/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const kiln::profiler::Trace trace = kiln::trace::load_text(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json", {.max_bytes = 1 << 20});
    for (size_t i = 0; i < trace.events.size(); ++i) {
      const kiln::profiler::TraceEvent& event = trace.events[i];
      if (event.id != i + 1 || event.parent_id >= event.id || event.thread >= trace.threads.size())
        std::abort();
    }
    const kiln::tidy::TidyReport report =
        kiln::tidy::analyse(trace, "fuzz.json", {.name_patterns = {"aten::"}});
    (void)report.json();
    (void)report.text();
  } catch (const kiln::Error&) {
    // Rejecting bad input with an error is the expected outcome.
  }
  return 0;
}
