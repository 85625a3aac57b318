// The Open Inference Protocol's HTTP/REST side over a model repository (cpp-httplib: one thread per
// open connection from a fixed pool, so the pool bounds the connections served at once):
//   GET  /v2/health/live, /v2/health/ready, /v2
//   GET  /v2/models/{m}[/versions/{v}], …/ready, …/config
//   POST /v2/models/{m}[/versions/{v}]/infer   (JSON tensors and the binary tensor extension)
//   POST /v2/repository/index, /v2/repository/models/{m}/load, …/unload   (the repository extension)
//   POST /v2/trace {"count": N}, GET /v2/trace  (a live trace of the next N requests: serve/live_trace.h)
//   GET  /metrics                               (Prometheus text)
// Errors are {"error": "..."} with 400 (bad request), 404 (unknown model, version or path), 409 (a
// trace already records), 413
// (body over the limit), 499 (client went away), 500 (the run failed), 503 (not ready, queue full,
// shutting down) and 504 (timeout in the queue).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "serve/inference_service.h"
#include "serve/metrics.h"

namespace kiln::serve {

struct HttpOptions {
  std::string host = "0.0.0.0";
  int port = 8000;  // 0: any free port
  size_t max_request_bytes = 64u << 20;
  int threads = 64;           // connections served at once
  bool metrics_only = false;  // a --metrics-port listener: /metrics and nothing else
  int trace_count = 50;       // requests a POST /v2/trace without a count traces
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, InferenceService& service, Metrics& metrics);
  ~HttpServer();

  // Binds the socket (throws kiln::Error naming host and port on failure); returns the port.
  int bind();
  // Serves until stop(); returns when every connection's handler has returned.
  void serve();
  // Stops accepting connections; requests already read are answered.
  void stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::serve
