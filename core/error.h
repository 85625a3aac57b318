// One error family for everything a user can reach: a malformed model, a wrong input, an unknown
// option. Each error carries a kind (which Python maps to an exception type) and a context chain
// that callers extend while the error travels up ("node 'conv1' (Conv): input 'W': ...").
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

enum class ErrorKind {
  invalid_argument,  // a value the caller passed is wrong (shape, option, file name)
  type_mismatch,     // a dtype is wrong
  not_implemented,   // valid request that kiln does not support (unknown op, dtype)
  invalid_model,     // the model file is malformed or inconsistent
  runtime,           // anything else (I/O failure, internal limit)
  cancelled,         // the caller cancelled the run (runtime/run_control.h)
  deadline_exceeded, // the run's deadline passed before it finished
};

std::string_view error_kind_name(ErrorKind kind);

class Error : public std::exception {
 public:
  Error(ErrorKind kind, std::string message);

  ErrorKind kind() const { return kind_; }
  // The innermost message, without context.
  const std::string& message() const { return message_; }
  // Prepends context; the outermost caller's context comes first in what().
  void add_context(std::string context);
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  void rebuild_what();

  ErrorKind kind_;
  std::string message_;
  std::vector<std::string> context_;  // innermost first
  std::string what_;
};

// Concatenates anything streamable: str_cat("expected ", 4, " dims").
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, const Args&... args) {
  throw Error(kind, str_cat(args...));
}

// Runs `fn`, adding `context` to any kiln::Error that escapes it.
template <typename Fn>
decltype(auto) with_context(const std::string& context, Fn&& fn) {
  try {
    return fn();
  } catch (Error& error) {
    error.add_context(context);
    throw;
  }
}

// Programmer errors (broken invariants inside kiln) abort with file:line; user-reachable conditions
// must use `fail` instead.
[[noreturn]] void assertion_failed(const char* condition, const char* file, int line);

}  // namespace kiln

#define KILN_ASSERT(condition) \
  ((condition) ? (void)0 : ::kiln::assertion_failed(#condition, __FILE__, __LINE__))

// Checks a user-reachable condition: KILN_CHECK(rank == 4, invalid_model, "expected rank 4, got ", rank)
#define KILN_CHECK(condition, kind, ...) \
  ((condition) ? (void)0 : ::kiln::fail(::kiln::ErrorKind::kind, __VA_ARGS__))
