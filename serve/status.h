// What a request to the server ends with, whichever protocol carried it. HTTP status codes are the
// vocabulary: 200 done, 400 bad request, 404 unknown model or version, 409 a live trace already
// records, 413 body too large, 499 the client went away, 500 the run failed, 503 unavailable (loading,
// unloading, queue full, shutting down), 504 timed out; the gRPC side maps them to its codes
// (serve/grpc_server.cpp).
#pragma once

#include <string>

#include "core/error.h"

namespace kiln::serve {

struct Status {
  int code = 200;
  std::string message;  // why not, when code != 200
  bool ok() const { return code == 200; }
};

// The status a kiln::Error of `kind` answers with.
inline int status_code_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_argument:
    case ErrorKind::type_mismatch:
    case ErrorKind::not_implemented:
      return 400;
    case ErrorKind::cancelled:
      return 503;
    case ErrorKind::deadline_exceeded:
      return 504;
    case ErrorKind::invalid_model:
    case ErrorKind::runtime:
      return 500;
  }
  return 500;
}

}  // namespace kiln::serve
