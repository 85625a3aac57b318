// What `kiln serve` counts, in Prometheus' text format at /metrics. Triton's names where Triton has
// the metric (nv_inference_*, labelled by model and version; durations are cumulative microsecond
// counters, as Triton's are), kiln's own under kiln_*: the batch sizes the batcher formed, the
// threads runs hold and the budget they lease from, and the process's resident memory.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

namespace kiln::serve {

// One model version's counters; updated without locks from request and batch threads.
struct ModelMetrics {
  // Powers of two: a batch of n rows lands in the first bucket with n <= bound.
  static constexpr std::array<int, 11> kBatchBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};

  std::string model;
  std::string version;
  std::atomic<uint64_t> request_success{0};
  std::atomic<uint64_t> request_failure{0};
  std::atomic<uint64_t> inference_count{0};  // rows inferred (a request of batch n counts n)
  std::atomic<uint64_t> exec_count{0};       // model runs (batches)
  std::atomic<uint64_t> request_duration_us{0};
  std::atomic<uint64_t> queue_duration_us{0};
  std::atomic<uint64_t> compute_input_duration_us{0};   // merging requests into the batch's inputs
  std::atomic<uint64_t> compute_infer_duration_us{0};   // the run
  std::atomic<uint64_t> compute_output_duration_us{0};  // splitting and encoding outputs
  std::atomic<int64_t> pending_requests{0};             // queued, not yet running
  std::array<std::atomic<uint64_t>, kBatchBuckets.size() + 1> batch_size_buckets{};  // last: above all
  std::atomic<uint64_t> batch_size_sum{0};

  void record_batch(int rows);
};

class Metrics {
 public:
  // The counters of `model` `version`, created on first use; the reference stays valid.
  ModelMetrics& model(const std::string& model, const std::string& version);
  // Every metric, in Prometheus' text exposition format (version 0.0.4).
  std::string prometheus_text() const;

 private:
  mutable std::mutex mutex_;
  std::deque<ModelMetrics> models_;  // a deque keeps references stable as it grows
};

}  // namespace kiln::serve
