// The models a server serves, from a directory in Triton's layout:
//   DIR/<model>/config.pbtxt             (optional; serve/model_config.h)
//   DIR/<model>/<version>/model.onnx     (version: a positive integer; the file name per config)
// Each version chosen by the config's version policy gets a Session with the model's settings
// (the config's parameters over the server's), is warmed up (a plan per batch size, each run once
// on zeros: every size up to 64, then powers of two, the preferred sizes and the maximum) and gets
// a Batcher. Every version of a model must have the same inputs and outputs. A model that fails to load is
// kept with its reason: it answers not ready, the others serve.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/session.h"
#include "serve/batcher.h"
#include "serve/infer_codec.h"
#include "serve/metrics.h"
#include "serve/model_config.h"

namespace kiln::serve {

struct ServerOptions {
  int max_queue_size = 64;         // per model version, unless its config sets one
  int64_t request_timeout_us = 0;  // 0: none, unless the config or the request sets one
};

struct ModelVersion {
  int64_t version = 0;
  std::filesystem::path path;
  bool ready = false;
  std::string error;  // why it is not ready
  std::unique_ptr<Session> session;
  std::unique_ptr<Batcher> batcher;
  ModelMetrics* metrics = nullptr;
};

struct ServedModel {
  std::string name;
  ModelConfig config;
  std::string error;                         // the config or the directory could not be read
  std::map<int64_t, ModelVersion> versions;  // ascending

  bool ready() const;
  // `version` ("" for the latest ready version, as Triton picks); null when unknown.
  const ModelVersion* find(const std::string& version) const;
};

// A request checked against its model: what the batcher merges, and what to answer.
struct ValidatedRequest {
  std::shared_ptr<PendingRequest> pending;
  std::vector<std::string> outputs;  // in response order
};

class ModelRepository {
 public:
  using Log = std::function<void(const std::string&)>;
  ModelRepository(std::filesystem::path root, ServerOptions options, Metrics& metrics, Log log);

  // Reads the directory and loads every model (logging each version's outcome). Throws
  // kiln::Error (invalid_argument) when the directory itself cannot be read.
  void load_all();
  bool all_ready() const;
  const ServedModel* find(const std::string& name) const;
  const std::map<std::string, ServedModel>& models() const { return models_; }

  // Checks `request` against `model`'s config: every input given once, known names, datatypes, ranks
  // and dims (the batch dim within 1..max_batch_size), requested outputs known. Throws kiln::Error
  // (invalid_argument or type_mismatch) naming what is wrong and what was expected.
  // `arrived` starts the request's timeout.
  ValidatedRequest validate(const ServedModel& model, InferRequest& request, Clock::time_point arrived) const;

  // Makes load_all() stop at the next version or warm-up run (from another thread, at shutdown).
  void stop_loading();
  // Stops every batcher from taking requests; join() then waits for what is queued, abort() fails it.
  void stop_accepting();
  void abort(const std::string& reason);
  void join();

 private:
  void load_model(ServedModel& model);
  // `declared` is the model's config as its file gives it; the first version to load completes it.
  void load_version(ServedModel& model, const ModelConfig& declared, ModelVersion& version);

  std::filesystem::path root_;
  ServerOptions options_;
  Metrics& metrics_;
  Log log_;
  std::map<std::string, ServedModel> models_;
  std::atomic<bool> stop_loading_{false};
};

}  // namespace kiln::serve
