// Where in the user's code an event came from: the first Python frame outside PyTorch above it.
#pragma once

#include <string>

#include "tidy/event_tree.h"

namespace kiln::tidy {

struct SourceLocation {
  std::string file;  // empty: none found
  int line = 0;
  // True when the line is the call's (the live profiler records each Python call's caller frame);
  // false when it is the first line of the enclosing function (files record only the function).
  bool exact = false;

  bool found() const { return !file.empty(); }
  // "file:line", or TorchTidy's "No source code location found".
  std::string text() const;
};

// A Python frame is PyTorch's own when its file is under "torch/" (PyTorch names frames relative to
// sys.path, so this is the package, wherever it is installed).
bool is_framework_file(const std::string& file);

// TorchTidy's source_code_location: up from `index` (itself first), the first Python event whose
// caller's file is not PyTorch's gives the caller's file and line. Without caller frames (Kineto
// files), the first Python event whose own file is not PyTorch's gives its file and first line.
SourceLocation source_location(const EventTree& tree, EventIndex index);

}  // namespace kiln::tidy
