#include "serve/metrics.h"

#include <unistd.h>

#include <fstream>

#include "runtime/thread_budget.h"

namespace kiln::serve {
namespace {

// Model and version as Prometheus labels; names come from directory names, so quotes, backslashes
// and newlines are escaped.
std::string labels(const ModelMetrics& metrics, const std::string& extra = "") {
  auto escape = [](const std::string& text) {
    std::string out;
    for (char c : text) {
      if (c == '\\' || c == '"') out += '\\';
      out += c == '\n' ? 'n' : c;
    }
    return out;
  };
  std::string text = "{model=\"" + escape(metrics.model) + "\",version=\"" + escape(metrics.version) + "\"";
  if (!extra.empty()) text += "," + extra;
  return text + "}";
}

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t total_pages = 0;
  int64_t resident_pages = 0;
  statm >> total_pages >> resident_pages;
  return resident_pages * sysconf(_SC_PAGESIZE);
}

}  // namespace

void ModelMetrics::record_batch(int rows) {
  size_t bucket = 0;
  while (bucket < kBatchBuckets.size() && rows > kBatchBuckets[bucket]) ++bucket;
  batch_size_buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  batch_size_sum.fetch_add(static_cast<uint64_t>(rows), std::memory_order_relaxed);
}

ModelMetrics& Metrics::model(const std::string& model, const std::string& version) {
  std::lock_guard lock(mutex_);
  for (ModelMetrics& metrics : models_) {
    if (metrics.model == model && metrics.version == version) return metrics;
  }
  ModelMetrics& metrics = models_.emplace_back();
  metrics.model = model;
  metrics.version = version;
  return metrics;
}

std::string Metrics::prometheus_text() const {
  struct Counter {
    const char* name;
    const char* help;
    std::atomic<uint64_t> ModelMetrics::*field;
  };
  static constexpr Counter kCounters[] = {
      {"nv_inference_request_success", "Number of successful inference requests",
       &ModelMetrics::request_success},
      {"nv_inference_request_failure", "Number of failed inference requests", &ModelMetrics::request_failure},
      {"nv_inference_count", "Number of inferences performed (a request of batch n counts n)",
       &ModelMetrics::inference_count},
      {"nv_inference_exec_count", "Number of model executions performed (batches)",
       &ModelMetrics::exec_count},
      {"nv_inference_request_duration_us", "Cumulative inference request duration in microseconds",
       &ModelMetrics::request_duration_us},
      {"nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds",
       &ModelMetrics::queue_duration_us},
      {"nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds",
       &ModelMetrics::compute_input_duration_us},
      {"nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds",
       &ModelMetrics::compute_infer_duration_us},
      {"nv_inference_compute_output_duration_us",
       "Cumulative inference compute output duration in microseconds",
       &ModelMetrics::compute_output_duration_us},
  };
  std::lock_guard lock(mutex_);
  std::string text;
  for (const Counter& counter : kCounters) {
    text += std::string("# HELP ") + counter.name + " " + counter.help + "\n# TYPE " + counter.name +
            " counter\n";
    for (const ModelMetrics& metrics : models_) {
      text += counter.name + labels(metrics) + " " +
              std::to_string((metrics.*counter.field).load(std::memory_order_relaxed)) + "\n";
    }
  }
  text +=
      "# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting "
      "execution\n"
      "# TYPE nv_inference_pending_request_count gauge\n";
  for (const ModelMetrics& metrics : models_) {
    text += "nv_inference_pending_request_count" + labels(metrics) + " " +
            std::to_string(metrics.pending_requests.load(std::memory_order_relaxed)) + "\n";
  }
  text +=
      "# HELP kiln_batch_size Rows per model execution, as the dynamic batcher formed them\n"
      "# TYPE kiln_batch_size histogram\n";
  for (const ModelMetrics& metrics : models_) {
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= ModelMetrics::kBatchBuckets.size(); ++b) {
      cumulative += metrics.batch_size_buckets[b].load(std::memory_order_relaxed);
      const std::string bound =
          b < ModelMetrics::kBatchBuckets.size() ? std::to_string(ModelMetrics::kBatchBuckets[b]) : "+Inf";
      text += "kiln_batch_size_bucket" + labels(metrics, "le=\"" + bound + "\"") + " " +
              std::to_string(cumulative) + "\n";
    }
    text += "kiln_batch_size_sum" + labels(metrics) + " " +
            std::to_string(metrics.batch_size_sum.load(std::memory_order_relaxed)) + "\n";
    text += "kiln_batch_size_count" + labels(metrics) + " " + std::to_string(cumulative) + "\n";
  }
  text +=
      "# HELP kiln_threads_in_use Intra-op threads leased by runs in flight\n# TYPE kiln_threads_in_use "
      "gauge\n";
  text += "kiln_threads_in_use " + std::to_string(leased_threads()) + "\n";
  text +=
      "# HELP kiln_thread_budget Threads all runs share (0: no budget)\n# TYPE kiln_thread_budget gauge\n";
  text += "kiln_thread_budget " + std::to_string(get_thread_budget()) + "\n";
  text +=
      "# HELP process_resident_memory_bytes Resident memory size in bytes\n"
      "# TYPE process_resident_memory_bytes gauge\n";
  text += "process_resident_memory_bytes " + std::to_string(resident_bytes()) + "\n";
  return text;
}

}  // namespace kiln::serve
