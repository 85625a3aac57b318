// `kiln serve`: a model repository behind the Open Inference Protocol's HTTP and (with a gRPC port)
// gRPC sides, until SIGTERM or SIGINT. Shutdown stops accepting connections and loading models, answers every
// request already read (running what is queued), and after `shutdown_timeout` fails what is still waiting
// with 503; then returns 0. A second signal exits at once (128 + the signal); a listener that stops by itself
// (accept failed) shuts the server down the same way and returns 1.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>

#include "serve/grpc_server.h"
#include "serve/http_server.h"
#include "serve/model_repository.h"

namespace kiln::serve {

struct ServeOptions {
  std::filesystem::path model_repository;
  HttpOptions http;
  std::optional<int> metrics_port;  // a second listener with /metrics only
  std::optional<GrpcOptions> grpc;  // none: no gRPC listener
  std::filesystem::path trace_dir;  // where live traces go; empty: live traces are off
  ServerOptions models;
  std::chrono::milliseconds shutdown_timeout{30000};
};

// Serves until a signal stops it; returns the exit code. Progress and errors go to stderr, one
// line each, prefixed "kiln serve: ".
int run_server(const ServeOptions& options);

}  // namespace kiln::serve
