#include "tidy/source_location.h"

#include <charconv>

#include "core/error.h"

namespace kiln::tidy {
namespace {

// The caller frame the live profiler records for a Python call ("caller": "file(line): function",
// python/kiln/torch_trace.py).
bool parse_frame(const std::string& frame, std::string& file, int& line) {
  const size_t close = frame.rfind("): ");
  if (close == std::string::npos) return false;
  const size_t open = frame.rfind('(', close);
  if (open == std::string::npos) return false;
  const auto [end, error] = std::from_chars(frame.data() + open + 1, frame.data() + close, line);
  if (error != std::errc() || end != frame.data() + close) return false;
  file = frame.substr(0, open);
  return true;
}

}  // namespace

std::string SourceLocation::text() const {
  return found() ? str_cat(file, ":", line) : std::string("No source code location found");
}

bool is_framework_file(const std::string& file) {
  return file.starts_with("torch/");
}

SourceLocation source_location(const EventTree& tree, EventIndex index) {
  for (; index != kNoEvent; index = tree.parent(index)) {
    const TraceEvent& event = tree.event(index);
    if (event.kind != EventKind::python) continue;
    SourceLocation location;
    if (const std::string* caller = event.attribute("caller")) {
      if (parse_frame(*caller, location.file, location.line) && !is_framework_file(location.file)) {
        location.exact = true;
        return location;
      }
    } else if (!event.file.empty() && !is_framework_file(event.file)) {
      location.file = event.file;
      location.line = event.line;
      return location;
    }
  }
  return {};
}

}  // namespace kiln::tidy
