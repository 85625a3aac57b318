#include "serve/batcher.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "core/events.h"
#include "serve/status.h"

namespace kiln::serve {

struct Batch {
  std::vector<std::shared_ptr<PendingRequest>> requests;
  int64_t rows = 0;
  RunControl control;
};

namespace {

uint64_t microseconds(Clock::duration duration) {
  return static_cast<uint64_t>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(duration).count()));
}

// Requests merge when every input agrees past the batch dim.
bool compatible(const PendingRequest& a, const PendingRequest& b) {
  for (const auto& [name, tensor] : a.inputs) {
    const auto other = b.inputs.find(name);
    if (other == b.inputs.end() || other->second.dtype() != tensor.dtype() ||
        !std::equal(tensor.shape().begin() + 1, tensor.shape().end(), other->second.shape().begin() + 1,
                    other->second.shape().end())) {
      return false;
    }
  }
  return true;
}

// The batch's inputs: each request's rows one after another along the first dim.
TensorMap merge_inputs(const Batch& batch) {
  if (batch.requests.size() == 1) return batch.requests.front()->inputs;
  TensorMap merged;
  for (const auto& [name, first] : batch.requests.front()->inputs) {
    Shape shape = first.shape();
    shape[0] = batch.rows;
    Tensor tensor = Tensor::empty(first.dtype(), shape);
    auto* out = static_cast<uint8_t*>(tensor.raw_data());
    for (const auto& request : batch.requests) {
      const Tensor& part = request->inputs.at(name);
      if (part.nbytes() > 0) std::memcpy(out, part.raw_data(), part.nbytes());
      out += part.nbytes();
    }
    merged.emplace(name, std::move(tensor));
  }
  return merged;
}

// Request `index`'s rows of each output, as views sharing the batch's output storage.
TensorMap split_outputs(const TensorMap& outputs, const Batch& batch, size_t index, int64_t first_row) {
  if (batch.requests.size() == 1) return outputs;
  TensorMap part;
  const int64_t rows = batch.requests[index]->rows;
  for (const auto& [name, tensor] : outputs) {
    KILN_CHECK(tensor.rank() > 0 && tensor.dim(0) == batch.rows, runtime, "output '", name, "' has shape ",
               shape_to_string(tensor.shape()), ": its first dim is not the batch of ", batch.rows,
               " rows, so it cannot be split between requests (serve this model with max_batch_size 0)");
    const size_t row_bytes = tensor.nbytes() / static_cast<size_t>(batch.rows);
    Shape shape = tensor.shape();
    shape[0] = rows;
    auto owner = std::make_shared<Tensor>(tensor);
    const auto* data =
        static_cast<const uint8_t*>(tensor.raw_data()) + static_cast<size_t>(first_row) * row_bytes;
    part.emplace(name, Tensor::view(owner, data, tensor.dtype(), shape));
  }
  return part;
}

Outcome failed(int status, std::string error) {
  Outcome outcome;
  outcome.status = status;
  outcome.error = std::move(error);
  return outcome;
}

}  // namespace

Batcher::Batcher(Session& session, BatcherOptions options, ModelMetrics& metrics)
    : session_(session), options_(std::move(options)), metrics_(metrics) {
  try {
    for (int i = 0; i < std::max(1, options_.instances); ++i)
      instances_.emplace_back([this] { instance_loop(); });
  } catch (...) {
    // The threads already started must not outlive a batcher that was never built.
    abort("the model failed to load");
    join();
    throw;
  }
}

Batcher::~Batcher() {
  abort("the model is unloading");
  join();
}

std::future<Outcome> Batcher::submit(const std::shared_ptr<PendingRequest>& request) {
  std::future<Outcome> future = request->outcome.get_future();
  std::lock_guard lock(mutex_);
  if (!accepting_) {
    finish(*request, failed(503, stop_reason_));
  } else if (static_cast<int>(queue_.size()) >= options_.max_queue_size) {
    finish(*request, failed(503, str_cat("the model's queue is full (", options_.max_queue_size,
                                         " requests waiting); retry later or raise max_queue_size")));
  } else {
    queue_.push_back(request);
    metrics_.pending_requests.fetch_add(1, std::memory_order_relaxed);
    changed_.notify_all();
  }
  return future;
}

void Batcher::abandon(const std::shared_ptr<PendingRequest>& request) {
  std::lock_guard lock(mutex_);
  request->abandoned = true;
  if (fail_queued(request, 499, "the client disconnected")) return;
  const std::shared_ptr<Batch> batch = request->batch.lock();
  if (batch && std::all_of(batch->requests.begin(), batch->requests.end(),
                           [](const auto& member) { return member->abandoned; })) {
    batch->control.cancel();
  }
}

bool Batcher::expire(const std::shared_ptr<PendingRequest>& request) {
  std::lock_guard lock(mutex_);
  return fail_queued(request, 504,
                     str_cat("the request's timeout expired after ",
                             microseconds(Clock::now() - request->arrived), " us in the queue"));
}

bool Batcher::fail_queued(const std::shared_ptr<PendingRequest>& request, int status,
                          const std::string& error) {
  const auto found = std::find(queue_.begin(), queue_.end(), request);
  if (found == queue_.end()) return false;
  queue_.erase(found);
  metrics_.pending_requests.fetch_sub(1, std::memory_order_relaxed);
  finish(*request, failed(status, error));
  changed_.notify_all();
  return true;
}

void Batcher::finish(PendingRequest& request, Outcome outcome) {
  if (request.finished) return;
  request.finished = true;
  request.outcome.set_value(std::move(outcome));
}

void Batcher::stop_accepting(const std::string& reason) {
  std::lock_guard lock(mutex_);
  accepting_ = false;
  stop_reason_ = reason;
  changed_.notify_all();
}

bool Batcher::accepting() const {
  std::lock_guard lock(mutex_);
  return accepting_;
}

void Batcher::abort(const std::string& reason) {
  std::lock_guard lock(mutex_);
  accepting_ = false;
  if (stop_reason_.empty()) stop_reason_ = reason;
  aborted_ = true;
  abort_reason_ = reason;
  for (const auto& request : queue_) finish(*request, failed(503, reason));
  metrics_.pending_requests.fetch_sub(static_cast<int64_t>(queue_.size()), std::memory_order_relaxed);
  queue_.clear();
  for (const auto& batch : running_) batch->control.cancel();
  changed_.notify_all();
}

void Batcher::join() {
  for (std::thread& instance : instances_) {
    if (instance.joinable()) instance.join();
  }
}

void Batcher::instance_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    std::shared_ptr<Batch> batch = next_batch(lock);
    if (!batch) return;
    running_.push_back(batch);
    lock.unlock();
    run_and_finish(*batch);
    lock.lock();
    std::erase(running_, batch);
  }
}

size_t Batcher::take_now(int64_t& rows, bool delay_over) const {
  const PendingRequest& first = *queue_.front();
  const bool merges = options_.max_batch_size > 0 && options_.dynamic_batching;
  const std::vector<int>& preferred = options_.preferred_batch_sizes;
  auto is_preferred = [&](int64_t value) {
    return std::find(preferred.begin(), preferred.end(), value) != preferred.end();
  };
  size_t count = 1;
  int64_t gathered = first.rows;
  size_t preferred_count = is_preferred(gathered) ? 1 : 0;  // the longest prefix of a preferred size
  int64_t preferred_rows = gathered;
  while (merges && count < queue_.size()) {
    const PendingRequest& next = *queue_[count];
    if (gathered + next.rows > options_.max_batch_size || !compatible(first, next)) break;
    gathered += next.rows;
    ++count;
    if (is_preferred(gathered)) {
      preferred_count = count;
      preferred_rows = gathered;
    }
  }
  if (merges && preferred_count > 0) {
    rows = preferred_rows;
    return preferred_count;
  }
  // Full when no queued request could join: the next one does not fit or is of another shape.
  const bool blocked = count < queue_.size();
  if (!merges || !accepting_ || blocked || gathered >= options_.max_batch_size || delay_over) {
    rows = gathered;
    return count;
  }
  return 0;
}

std::shared_ptr<Batch> Batcher::next_batch(std::unique_lock<std::mutex>& lock) {
  while (true) {
    changed_.wait(
        lock, [&] { return aborted_ || (!forming_ && !queue_.empty()) || (!accepting_ && queue_.empty()); });
    if (aborted_ || queue_.empty()) return nullptr;
    forming_ = true;
    while (!queue_.empty() && !aborted_) {
      const Clock::time_point leave_at = queue_.front()->arrived + options_.max_queue_delay;
      int64_t rows = 0;
      const size_t count = take_now(rows, Clock::now() >= leave_at);
      if (count > 0) {
        auto batch = std::make_shared<Batch>();
        batch->rows = rows;
        for (size_t i = 0; i < count; ++i) {
          batch->requests.push_back(queue_.front());
          queue_.front()->batch = batch;
          queue_.pop_front();
        }
        metrics_.pending_requests.fetch_sub(static_cast<int64_t>(count), std::memory_order_relaxed);
        forming_ = false;
        changed_.notify_all();
        return batch;
      }
      changed_.wait_until(lock, leave_at);
    }
    forming_ = false;
    changed_.notify_all();
    if (aborted_) return nullptr;
  }
}

// run(), and whatever escapes it (memory exhausted) still answers every request of the batch: an
// instance thread must not die with requests waiting on it.
void Batcher::run_and_finish(Batch& batch) {
  try {
    run(batch);
  } catch (const std::exception& error) {
    std::lock_guard lock(mutex_);
    for (const auto& request : batch.requests)
      finish(*request, failed(500, str_cat("the batch failed: ", error.what())));
  }
}

void Batcher::run(Batch& batch) {
  const Clock::time_point dispatched = Clock::now();
  for (const auto& request : batch.requests) {
    metrics_.queue_duration_us.fetch_add(microseconds(dispatched - request->arrived),
                                         std::memory_order_relaxed);
  }
  Outcome failure;
  TensorMap outputs;
  Clock::time_point merged_at = dispatched;
  Clock::time_point ran_at = dispatched;
  // While a live trace records (serve/live_trace.h), the batch is an event whose children are the
  // run and its steps, under its first traced request's event (on that request's thread).
  uint64_t traced_request = 0;
  for (const auto& request : batch.requests) {
    if (traced_request == 0) traced_request = request->trace_event;
  }
  std::optional<events::Scope> batch_event;
  batch_event.emplace(events::EventKind::annotation, events::recording() ? events::intern("batch") : nullptr,
                      batch.rows, traced_request);
  try {
    const TensorMap inputs = merge_inputs(batch);
    merged_at = Clock::now();
    outputs = session_.run(inputs, batch.control);
    ran_at = Clock::now();
  } catch (const Error& error) {
    failure = failed(status_code_of(error.kind()), error.what());
    if (error.kind() == ErrorKind::cancelled) {
      std::lock_guard lock(mutex_);
      failure.error = aborted_ ? abort_reason_ : "every client of the batch disconnected";
    }
  } catch (const std::exception& error) {
    failure = failed(500, str_cat("the run failed: ", error.what()));
  }
  metrics_.compute_input_duration_us.fetch_add(microseconds(merged_at - dispatched),
                                               std::memory_order_relaxed);
  if (failure.status == 200) {
    metrics_.compute_infer_duration_us.fetch_add(microseconds(ran_at - merged_at), std::memory_order_relaxed);
    metrics_.exec_count.fetch_add(1, std::memory_order_relaxed);
    metrics_.inference_count.fetch_add(static_cast<uint64_t>(batch.rows), std::memory_order_relaxed);
    metrics_.record_batch(static_cast<int>(batch.rows));
  }

  std::vector<Outcome> outcomes(batch.requests.size());
  int64_t first_row = 0;
  for (size_t i = 0; i < batch.requests.size(); ++i) {
    Outcome& outcome = outcomes[i];
    if (failure.status != 200) {
      outcome = failure;
    } else {
      try {
        outcome.outputs = split_outputs(outputs, batch, i, first_row);
      } catch (const std::exception& error) {
        outcome = failed(500, error.what());
      }
    }
    outcome.dispatched = dispatched;
    outcome.batch_rows = static_cast<int>(batch.rows);
    outcome.batch_requests = static_cast<int>(batch.requests.size());
    outcome.batch_event_start_ns = batch_event->start_ns();
    first_row += batch.requests[i]->rows;
  }
  metrics_.compute_output_duration_us.fetch_add(microseconds(Clock::now() - ran_at),
                                                std::memory_order_relaxed);
  batch_event.reset();  // ends before its requests can
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < batch.requests.size(); ++i) finish(*batch.requests[i], std::move(outcomes[i]));
}

}  // namespace kiln::serve
