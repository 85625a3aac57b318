#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace kiln {

std::string_view error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_argument: return "invalid argument";
    case ErrorKind::type_mismatch: return "type mismatch";
    case ErrorKind::not_implemented: return "not implemented";
    case ErrorKind::invalid_model: return "invalid model";
    case ErrorKind::runtime: return "runtime error";
    case ErrorKind::cancelled: return "cancelled";
    case ErrorKind::deadline_exceeded: return "deadline exceeded";
  }
  return "error";
}

Error::Error(ErrorKind kind, std::string message) : kind_(kind), message_(std::move(message)) {
  rebuild_what();
}

void Error::add_context(std::string context) {
  context_.push_back(std::move(context));
  rebuild_what();
}

void Error::rebuild_what() {
  what_.clear();
  for (auto it = context_.rbegin(); it != context_.rend(); ++it) {
    what_ += *it;
    what_ += ": ";
  }
  what_ += message_;
}

void assertion_failed(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "kiln: internal assertion failed: %s at %s:%d\n", condition, file, line);
  std::abort();
}

}  // namespace kiln
