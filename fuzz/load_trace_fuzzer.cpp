// Fuzzes trace loading (profiler/trace_load.h): any byte string must either load or raise
// kiln::Error; the loaded tree must have ids 1..N with each parent before its child.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "profiler/trace_load.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const kiln::profiler::Trace trace = kiln::trace::load_text(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json", {.max_bytes = 1 << 20});
    for (size_t i = 0; i < trace.events.size(); ++i) {
      const kiln::profiler::TraceEvent& event = trace.events[i];
      if (event.id != i + 1 || event.parent_id >= event.id || event.thread >= trace.threads.size())
        std::abort();
    }
  } catch (const kiln::Error&) {
    // Rejecting bad input with an error is the expected outcome.
  }
  return 0;
}
