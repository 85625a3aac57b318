// A profiler trace of a running server's next N requests, taken on demand (POST /v2/trace, or
// SIGUSR1): the process-wide profiler records from the first of them until the last has answered,
// then writes a kiln Chrome trace into the trace directory, which `kiln profile`, `kiln tidy` and
// chrome://tracing read like any kiln trace. In it each traced request is an event named "request"
// on the thread that waited for it, with attributes id, model, version, status, queue_ms (arrival to
// its batch leaving the queue), batch (the batch event's id), batch_rows and batch_requests; each
// batch is an event named "batch" on its instance's thread (rows, requests), parent of the run and
// its steps, and child of its first traced request. Requests of a batch share its steps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/events.h"
#include "profiler/profile.h"
#include "serve/batcher.h"
#include "serve/status.h"

namespace kiln::serve {

inline constexpr int kMaxTracedRequests = 10000;

class LiveTrace {
 public:
  using Log = std::function<void(const std::string&)>;
  // `directory` empty: live traces are off (start() says how to turn them on).
  LiveTrace(std::filesystem::path directory, Log log);
  ~LiveTrace();

  // Starts tracing the next `count` requests into a new file of the directory (named in the
  // answer); 409 while a trace records, 400 when traces are off or `count` is out of [1, 10000].
  Status start(int count, std::string& file);
  // {"state": "idle" | "recording" | "written" | "failed", "count", "traced", "file", "error"}.
  std::string state_json() const;

  // One request's part: opened before it is queued, closed once it has its outcome. Inactive (and
  // free) unless a trace is taking requests.
  class Request {
   public:
    Request(LiveTrace& trace, const std::string& model, int64_t version);
    ~Request();
    Request(const Request&) = delete;
    Request& operator=(const Request&) = delete;
    uint64_t event() const { return event_ ? event_->id() : 0; }
    // What the attributes say of it (call before it closes).
    void finished(const std::string& id, const Outcome& outcome, Clock::time_point arrived);

   private:
    LiveTrace& trace_;
    std::optional<events::Scope> event_;
    std::map<std::string, std::string> attributes_;
    int64_t batch_start_ns_ = 0;
  };

 private:
  struct Record {
    std::map<std::string, std::string> attributes;
    int64_t batch_start_ns = 0;
  };
  bool admit();
  void finish(int64_t start_ns, Record record);
  // Stops the profiler, names the events and writes the file (lock held).
  void write_trace();

  std::filesystem::path directory_;
  Log log_;
  mutable std::mutex mutex_;
  std::unique_ptr<profiler::Profile> profile_;  // set while recording
  int count_ = 0;
  int admitted_ = 0;
  int finished_ = 0;
  std::map<int64_t, Record> records_;  // by their request event's start
  std::string file_;
  std::string state_ = "idle";
  std::string error_;
  uint64_t traces_written_ = 0;
};

}  // namespace kiln::serve
