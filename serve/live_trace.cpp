#include "serve/live_trace.h"

#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "core/json_writer.h"
#include "profiler/export.h"

namespace kiln::serve {
namespace {

std::string milliseconds_text(Clock::duration duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", std::chrono::duration<double, std::milli>(duration).count());
  return text;
}

}  // namespace

LiveTrace::LiveTrace(std::filesystem::path directory, Log log)
    : directory_(std::move(directory)), log_(std::move(log)) {}

// A trace still recording at shutdown is written with the requests it has.
LiveTrace::~LiveTrace() {
  std::lock_guard lock(mutex_);
  if (profile_) write_trace();
}

Status LiveTrace::start(int count, std::string& file) {
  if (directory_.empty()) return {400, "live traces are off: start kiln serve with --trace-dir DIR"};
  if (count < 1 || count > kMaxTracedRequests)
    return {400, str_cat("a trace takes 1 to ", kMaxTracedRequests, " requests, got ", count)};
  std::lock_guard lock(mutex_);
  if (profile_) {
    return {409, str_cat("a trace is already recording (", finished_, " of ", count_, " requests, into ", file_,
                         ")")};
  }
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto stamp = std::chrono::duration_cast<std::chrono::seconds>(now).count();
  file_ = (directory_ / str_cat("kiln-serve-trace-", stamp, "-", ++traces_written_, ".json")).string();
  auto profile = std::make_unique<profiler::Profile>(profiler::ProfileOptions{true, false});
  try {
    profile->start();
  } catch (const Error& error) {
    return {409, str_cat("the profiler is busy: ", error.what())};
  }
  profile_ = std::move(profile);
  count_ = count;
  admitted_ = 0;
  finished_ = 0;
  records_.clear();
  state_ = "recording";
  error_.clear();
  file = file_;
  log_(str_cat("tracing the next ", count, " requests into ", file_));
  return {};
}

std::string LiveTrace::state_json() const {
  std::lock_guard lock(mutex_);
  JsonWriter json;
  json.begin_object().member("state", state_).member("count", count_).member("traced", finished_);
  if (!file_.empty()) json.member("file", file_);
  if (!error_.empty()) json.member("error", error_);
  return json.end_object().take();
}

bool LiveTrace::admit() {
  std::lock_guard lock(mutex_);
  if (!profile_ || admitted_ >= count_) return false;
  ++admitted_;
  return true;
}

void LiveTrace::finish(int64_t start_ns, Record record) {
  std::lock_guard lock(mutex_);
  records_.emplace(start_ns, std::move(record));
  if (++finished_ == count_ && profile_) write_trace();
}

void LiveTrace::write_trace() {
  try {
    profiler::Trace trace = profile_->stop();
    profile_.reset();
    // The batches' events by their start, and the traced requests each merged.
    std::map<int64_t, uint64_t> batch_ids;
    for (const profiler::TraceEvent& event : trace.events) {
      if (event.kind == profiler::EventKind::annotation && event.name == "batch") batch_ids[event.start_ns] = event.id;
    }
    std::map<int64_t, std::vector<const Record*>> batch_requests;
    for (const auto& [start, record] : records_) batch_requests[record.batch_start_ns].push_back(&record);
    for (profiler::TraceEvent& event : trace.events) {
      if (event.kind != profiler::EventKind::annotation) continue;
      if (event.name == "batch") {
        const auto merged = batch_requests.find(event.start_ns);
        if (merged == batch_requests.end()) continue;
        const auto& first = merged->second.front()->attributes;
        std::string ids;
        for (const Record* record : merged->second) ids += (ids.empty() ? "" : ",") + record->attributes.at("id");
        event.attributes = {{"model", first.at("model")},
                            {"version", first.at("version")},
                            {"rows", first.count("batch_rows") ? first.at("batch_rows") : ""},
                            {"requests", first.count("batch_requests") ? first.at("batch_requests") : ""},
                            {"traced_requests", ids}};
      } else if (event.name == "request") {
        const auto record = records_.find(event.start_ns);
        if (record == records_.end()) continue;
        for (const auto& [key, value] : record->second.attributes) event.attributes.emplace_back(key, value);
        const auto batch = batch_ids.find(record->second.batch_start_ns);
        if (batch != batch_ids.end()) event.attributes.emplace_back("batch", std::to_string(batch->second));
      }
    }
    profiler::export_chrome_trace(trace, file_);
    state_ = "written";
    log_(str_cat("trace of ", finished_, finished_ == count_ ? "" : str_cat(" (of ", count_, ")"),
                 " requests written to ", file_));
  } catch (const std::exception& error) {
    profile_.reset();
    state_ = "failed";
    error_ = error.what();
    log_(str_cat("the trace into ", file_, " failed: ", error_));
  }
}

LiveTrace::Request::Request(LiveTrace& trace, const std::string& model, int64_t version) : trace_(trace) {
  if (!events::recording() || !trace_.admit()) return;
  event_.emplace(events::EventKind::annotation, events::intern("request"), 0);
  attributes_["model"] = model;
  attributes_["version"] = std::to_string(version);
}

void LiveTrace::Request::finished(const std::string& id, const Outcome& outcome, Clock::time_point arrived) {
  if (!event_) return;
  attributes_["id"] = id;
  attributes_["status"] = std::to_string(outcome.status);
  if (outcome.dispatched != Clock::time_point()) {
    attributes_["queue_ms"] = milliseconds_text(outcome.dispatched - arrived);
    attributes_["batch_rows"] = std::to_string(outcome.batch_rows);
    attributes_["batch_requests"] = std::to_string(outcome.batch_requests);
  }
  batch_start_ns_ = outcome.batch_event_start_ns;
}

LiveTrace::Request::~Request() {
  if (!event_) return;
  const int64_t start = event_->start_ns();
  event_.reset();  // written before the trace can stop
  Record record;
  record.attributes = std::move(attributes_);
  record.batch_start_ns = batch_start_ns_;
  trace_.finish(start, std::move(record));
}

}  // namespace kiln::serve
