// The models a server serves, from a directory in Triton's layout:
//   DIR/<model>/config.pbtxt             (optional; serve/model_config.h)
//   DIR/<model>/<version>/model.onnx     (version: a positive integer; the file name per config)
// Each version chosen by the config's version policy gets a Session with the model's settings
// (the config's parameters over the server's), is warmed up (a plan per batch size, each run once
// on zeros: every size up to 64, then powers of two, the preferred sizes and the maximum) and gets
// a Batcher. Every version of a model must have the same inputs and outputs. A model that fails to
// load at start is kept with its reason: it answers not ready, the others serve.
//
// With model control (the repository extension) models are loaded, reloaded and unloaded while the
// server runs. A (re)load builds the model beside the one serving and swaps it in only once every
// version is ready, so a failed reload leaves the old one serving; the replaced or unloaded model
// stops taking requests, finishes what it queued, and is freed when the last request holding it
// has answered. Requests hold the model they were resolved to (find() gives shared ownership).
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "graph/session.h"
#include "serve/batcher.h"
#include "serve/infer_codec.h"
#include "serve/metrics.h"
#include "serve/model_config.h"
#include "serve/status.h"

namespace kiln::serve {

struct ServerOptions {
  int max_queue_size = 64;         // per model version, unless its config sets one
  int64_t request_timeout_us = 0;  // 0: none, unless the config or the request sets one
  // Triton's --model-control-mode: false ("none") loads every model at start and refuses load and
  // unload requests; true ("explicit") loads `startup_models` ("*": all) and takes requests.
  bool explicit_control = false;
  std::vector<std::string> startup_models;
};

// One line of the repository index: a model directory, or one loaded version of it.
struct IndexEntry {
  std::string name;
  std::string version;  // "" for a model that is not loaded
  std::string state;    // READY, UNAVAILABLE, LOADING
  std::string reason;   // why it is not READY
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
  ~ModelRepository();

  // Reads the directory and loads every model, or with explicit control the startup models
  // (logging each version's outcome). Throws kiln::Error (invalid_argument) when the directory
  // itself cannot be read.
  void load_all();
  bool all_ready() const;
  // The model serving under `name`, or null.
  std::shared_ptr<const ServedModel> find(const std::string& name) const;
  // The models serving now, by name.
  std::vector<std::shared_ptr<const ServedModel>> models() const;
  bool explicit_control() const { return options_.explicit_control; }
  const std::filesystem::path& root() const { return root_; }

  // The repository extension. index() lists every model directory with its state (and each loaded
  // version); load() loads or reloads `name` from its directory, with `config_json` (protobuf's JSON
  // form of a config) in place of its config.pbtxt when given, and returns once it serves: 404 for
  // an unknown model directory, 400 when it fails to load (the old model, if any, still serves), 503
  // while shutting down. unload() stops serving `name` and returns once its queued requests have
  // answered: 404 when it is not loaded. Loads and unloads run one at a time.
  std::vector<IndexEntry> index(bool ready_only) const;
  Status load(const std::string& name, const std::optional<std::string>& config_json);
  Status unload(const std::string& name);

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
  // Reads `name`'s directory (and config: `config_json` when given) and loads its versions.
  std::shared_ptr<ServedModel> load_model(const std::string& name,
                                          const std::optional<std::string>& config_json);
  // `declared` is the model's config as its file gives it; the first version to load completes it.
  void load_version(ServedModel& model, const ModelConfig& declared, ModelVersion& version);
  std::vector<std::string> model_directories() const;
  // Stops `model`'s batchers taking requests and waits for what they queued.
  static void drain(const ServedModel& model, const std::string& reason);

  std::filesystem::path root_;
  ServerOptions options_;
  Metrics& metrics_;
  Log log_;
  std::mutex control_mutex_;  // one load or unload at a time
  mutable std::mutex mutex_;  // guards what follows
  std::map<std::string, std::shared_ptr<const ServedModel>> models_;
  std::map<std::string, std::string> unavailable_;  // not serving: why (failed load, unloaded)
  std::string loading_;                             // the model a load is building, if any
  std::atomic<bool> stop_loading_{false};
};

}  // namespace kiln::serve
