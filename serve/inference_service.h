// What the protocol front ends (HTTP, gRPC) share: resolving a model and version, server and model
// readiness, and running one decoded request through its model's batcher — validation, the queue,
// its timeout, a client that goes away, the per-model metrics and the log line of a refusal — so
// both protocols answer alike. Each front end only decodes requests and encodes answers.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "serve/infer_codec.h"
#include "serve/live_trace.h"
#include "serve/model_repository.h"
#include "serve/status.h"

namespace kiln::serve {

// The protocol extensions the server metadata lists (both protocols).
inline constexpr const char* kServerExtensions[] = {"binary_tensor_data", "model_configuration",
                                                    "model_repository"};

// A model version a request resolved to; holding it keeps the model loaded until the request answers.
struct ResolvedModel {
  std::shared_ptr<const ServedModel> model;
  const ModelVersion* version = nullptr;
};

struct InferAnswer {
  Status status;
  std::string id;  // the request's id, or "#N" when it gave none (for the log)
  std::vector<std::pair<std::string, Tensor>> outputs;  // in response order
};

class InferenceService {
 public:
  using Log = std::function<void(const std::string&)>;
  // `repository` is read only once `models_loaded` is true; before that, model requests answer 503.
  // Requests run while `live_trace` records are traced.
  InferenceService(ModelRepository& repository, const std::atomic<bool>& models_loaded, LiveTrace& live_trace,
                   Log log);

  // "" when the server is ready (its models loaded and each ready), else why not.
  std::string not_ready_reason() const;
  // `version` "" for the latest ready one. 503 while loading or when the model failed to load, 404
  // for an unknown model or version.
  Status resolve(const std::string& name, const std::string& version, ResolvedModel& resolved) const;
  // 503 naming why `resolved` is not ready, else ok.
  static Status readiness(const ResolvedModel& resolved);

  // Runs `request` on `resolved` and waits for its outputs. `arrived` is when its bytes were read
  // (its timeout and the request-duration metric start there); `client_gone` is polled while it
  // waits: true drops it from the queue (499), or cancels its batch when every request in it left.
  // A request that reaches a model a reload just replaced runs on the new one: `resolved` is then
  // updated to it.
  InferAnswer infer(ResolvedModel& resolved, InferRequest& request, Clock::time_point arrived,
                    const std::function<bool()>& client_gone);
  // The answer was encoded and sent: counts the request's success and its encode and total time.
  void record_success(const ResolvedModel& resolved, Clock::time_point arrived, Clock::time_point encode_start);
  // Counts and logs a request refused before it reached infer() (a body that did not decode).
  void record_refusal(const ResolvedModel& resolved, const std::string& id, const Status& status);

  ModelRepository& repository() const { return repository_; }
  LiveTrace& live_trace() const { return live_trace_; }

 private:
  ModelRepository& repository_;
  const std::atomic<bool>& models_loaded_;
  LiveTrace& live_trace_;
  Log log_;
  std::atomic<uint64_t> request_counter_{0};
};

}  // namespace kiln::serve
