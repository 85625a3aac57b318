// The Open Inference Protocol's gRPC side (inference.GRPCInferenceService, serve/proto/
// grpc_predict_v2.proto) over the same InferenceService as HTTP: ServerLive, ServerReady,
// ModelReady, ServerMetadata, ModelMetadata, ModelInfer (raw or typed contents) and the
// repository extension's RepositoryIndex, RepositoryModelLoad and RepositoryModelUnload.
// Errors are gRPC status codes: INVALID_ARGUMENT (bad request), NOT_FOUND (unknown model or
// version), RESOURCE_EXHAUSTED (a message over the limit), CANCELLED (the client went away),
// INTERNAL (the run failed), UNAVAILABLE (not ready, queue full, shutting down), DEADLINE_EXCEEDED
// (the request's timeout or the call's deadline passed while it was queued).
#pragma once

#include <memory>
#include <string>

#include "serve/inference_service.h"

namespace kiln::serve {

struct GrpcOptions {
  std::string host = "0.0.0.0";
  int port = 8001;  // 0: any free port
  size_t max_request_bytes = 64u << 20;
  int threads = 64;  // calls served at once
};

class GrpcServer {
 public:
  GrpcServer(GrpcOptions options, InferenceService& service);
  ~GrpcServer();

  // Starts serving (on gRPC's own threads); returns the port. Throws kiln::Error naming host and
  // port when it cannot listen.
  int start();
  // Refuses new calls and returns once every call in flight has answered.
  void stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::serve
