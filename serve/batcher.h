// One model version's scheduler: a bounded queue of requests, and `instances` threads that each take
// the next batch from it and run it on the version's session. With dynamic batching a batch merges
// queued requests of compatible shapes along the batch dim, up to max_batch_size rows, waiting at
// most max_queue_delay for more after the oldest arrived (or until a preferred size is reached);
// each request then gets its own rows of the outputs back, as views of the batch's outputs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "graph/session.h"
#include "runtime/run_control.h"
#include "serve/metrics.h"

namespace kiln::serve {

using Clock = std::chrono::steady_clock;

// What a request ends with: its outputs, or an HTTP status and message saying why not.
struct Outcome {
  int status = 200;
  std::string error;
  TensorMap outputs;
  Clock::time_point dispatched;  // when its batch left the queue (unset if it never did)
  int batch_rows = 0;            // rows of the batch it ran in
  int batch_requests = 0;        // requests merged into that batch
  int64_t batch_event_start_ns = 0;  // the batch's profiler event (0: nothing recorded)
};

struct Batch;

// A validated request waiting for its model; its inputs' first dim is the batch dim when the
// model batches.
struct PendingRequest {
  TensorMap inputs;
  int64_t rows = 1;
  Clock::time_point arrived = Clock::now();
  Clock::time_point deadline = Clock::time_point::max();  // in the queue; max: none
  std::promise<Outcome> outcome;
  // Set under the batcher's lock.
  bool finished = false;
  std::weak_ptr<Batch> batch;  // once dispatched (weak: the batch holds its requests)
  bool abandoned = false;      // its client went away
  // Its profiler event while a live trace records it (0: none): the batch it runs in is recorded
  // under the batch's first such request.
  uint64_t trace_event = 0;
};

struct BatcherOptions {
  int max_batch_size = 0;  // 0: the model does not batch; each request runs alone
  bool dynamic_batching = false;
  std::chrono::microseconds max_queue_delay{0};
  std::vector<int> preferred_batch_sizes;
  int max_queue_size = 64;  // requests waiting; one more is refused with 503
  int instances = 1;
};

class Batcher {
 public:
  // Starts the instances. `session` and `metrics` must outlive the batcher.
  Batcher(Session& session, BatcherOptions options, ModelMetrics& metrics);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues `request`; the returned future is ready at once with 503 when the queue is full or the
  // batcher is stopping.
  std::future<Outcome> submit(const std::shared_ptr<PendingRequest>& request);
  // The request's client went away: a queued request is dropped, and a running batch whose every
  // request was abandoned is cancelled (at its next step).
  void abandon(const std::shared_ptr<PendingRequest>& request);
  // Fails `request` with 504 if it is still queued (its deadline passed); false if it already runs.
  bool expire(const std::shared_ptr<PendingRequest>& request);

  // Stops taking requests (later ones fail with 503 and `reason`) and lets the instances run what
  // is queued, without waiting for more.
  void stop_accepting(const std::string& reason = "the server is shutting down");
  bool accepting() const;
  // Fails every queued request with 503 and `reason`, cancels batches in flight.
  void abort(const std::string& reason);
  // Waits until the instances have run everything they took and exited (after stop_accepting or abort).
  void join();

 private:
  void instance_loop();
  std::shared_ptr<Batch> next_batch(std::unique_lock<std::mutex>& lock);
  // How many queued requests (from the front) the next batch takes now, and its rows; 0 when it
  // should wait for more. Requests join while their dims agree and the rows fit max_batch_size.
  // The batch leaves at once when the longest such run of requests reaches a preferred size (then
  // the batch is cut there), when it is full or the next request cannot join, when the batcher is
  // stopping, or when `delay_over`; otherwise it waits.
  size_t take_now(int64_t& rows, bool delay_over) const;
  void run(Batch& batch);
  void run_and_finish(Batch& batch);
  // Removes `request` from the queue and finishes it (lock held); false if it was not queued.
  bool fail_queued(const std::shared_ptr<PendingRequest>& request, int status, const std::string& error);
  void finish(PendingRequest& request, Outcome outcome);

  Session& session_;
  const BatcherOptions options_;
  ModelMetrics& metrics_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<PendingRequest>> queue_;
  std::vector<std::shared_ptr<Batch>> running_;
  bool forming_ = false;  // an instance is waiting for a batch to fill
  bool accepting_ = true;
  std::string stop_reason_;
  bool aborted_ = false;
  std::string abort_reason_;
  std::vector<std::thread> instances_;
};

}  // namespace kiln::serve
