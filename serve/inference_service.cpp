#include "serve/inference_service.h"

#include <chrono>
#include <future>

#include "core/error.h"

namespace kiln::serve {
namespace {

std::string not_ready_message(const ServedModel& model, const ModelVersion& version) {
  return "model '" + model.name + "' version " + std::to_string(version.version) +
         " is not ready: " + (version.error.empty() ? "it is loading" : version.error);
}

uint64_t microseconds(Clock::duration duration) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(duration).count());
}

// Queues `pending` and waits for its outcome, dropping it when its client goes away and failing it
// when its deadline passes while it is still queued. The client is checked 2 ms after submission,
// then at doubling intervals up to 100 ms: every waiting request's wake-up takes a core from the
// runs (16 requests polling every 5 ms cost resnet50 a fifth of its throughput on 2 cores), and a
// client that left is found within 100 ms. Deadlines are waited for exactly.
Outcome wait(Batcher& batcher, const std::shared_ptr<PendingRequest>& pending,
             const std::function<bool()>& client_gone) {
  constexpr auto kFirstPoll = std::chrono::milliseconds(2);
  constexpr auto kLongestPoll = std::chrono::milliseconds(100);
  std::future<Outcome> future = batcher.submit(pending);
  bool abandoned = false;
  bool expired = false;
  Clock::duration poll = kFirstPoll;
  while (true) {
    const Clock::time_point wake =
        expired ? Clock::now() + poll : std::min(Clock::now() + poll, pending->deadline);
    if (future.wait_until(wake) == std::future_status::ready) break;
    if (!abandoned && client_gone()) {
      abandoned = true;
      batcher.abandon(pending);
    }
    if (!expired && Clock::now() >= pending->deadline) {
      expired = true;
      batcher.expire(pending);
    }
    poll = std::min<Clock::duration>(poll * 2, kLongestPoll);
  }
  return future.get();
}

}  // namespace

InferenceService::InferenceService(ModelRepository& repository, const std::atomic<bool>& models_loaded,
                                   LiveTrace& live_trace, Log log)
    : repository_(repository), models_loaded_(models_loaded), live_trace_(live_trace), log_(std::move(log)) {}

std::string InferenceService::not_ready_reason() const {
  if (!models_loaded_.load()) return "the server is loading its models";
  for (const auto& model : repository_.models()) {
    if (!model->ready()) return "model '" + model->name + "' is not ready";
  }
  return "";
}

Status InferenceService::resolve(const std::string& name, const std::string& version,
                                 ResolvedModel& resolved) const {
  if (!models_loaded_.load()) return {503, "the server is loading its models"};
  std::shared_ptr<const ServedModel> model = repository_.find(name);
  if (model == nullptr) {
    return {404, repository_.explicit_control() ? "model '" + name + "' is not loaded (unknown, or unloaded)"
                                                : "unknown model '" + name + "'"};
  }
  if (!model->error.empty()) return {503, "model '" + name + "' is not ready: " + model->error};
  const ModelVersion* found = model->find(version);
  if (found == nullptr) return {404, "model '" + name + "' has no version '" + version + "'"};
  resolved = {std::move(model), found};
  return {};
}

Status InferenceService::readiness(const ResolvedModel& resolved) {
  if (resolved.version->ready) return {};
  return {503, not_ready_message(*resolved.model, *resolved.version)};
}

void InferenceService::record_refusal(const ResolvedModel& resolved, const std::string& id,
                                      const Status& status) {
  if (resolved.version->metrics != nullptr)
    resolved.version->metrics->request_failure.fetch_add(1, std::memory_order_relaxed);
  log_("request " + id + " to model '" + resolved.model->name + "' version " +
       std::to_string(resolved.version->version) + ": " + std::to_string(status.code) + " " + status.message);
}

InferAnswer InferenceService::infer(ResolvedModel& resolved, InferRequest& request,
                                    Clock::time_point arrived, const std::function<bool()>& client_gone) {
  InferAnswer answer;
  answer.id = request.id.empty() ? str_cat("#", ++request_counter_) : request.id;
  auto refuse = [&](Status status) {
    record_refusal(resolved, answer.id, status);
    answer.status = std::move(status);
    return std::move(answer);
  };
  if (Status ready = readiness(resolved); !ready.ok()) return refuse(std::move(ready));
  ValidatedRequest validated;
  try {
    validated = repository_.validate(*resolved.model, request, arrived);
  } catch (const Error& failure) {
    return refuse({status_code_of(failure.kind()), failure.what()});
  }

  LiveTrace::Request traced(live_trace_, resolved.model->name, resolved.version->version);
  validated.pending->trace_event = traced.event();
  Outcome outcome = wait(*resolved.version->batcher, validated.pending, client_gone);
  // A reload swapped the model between resolve() and submit(): the old one refused the request
  // without running it, so it goes to the model serving now (once: a second reload is a 503),
  // checked against that model's config as a new request would be (a reload may change it).
  if (outcome.status == 503 && !resolved.version->batcher->accepting()) {
    ResolvedModel current;
    if (resolve(resolved.model->name, std::to_string(resolved.version->version), current).ok() &&
        current.model != resolved.model && readiness(current).ok()) {
      request.inputs.clear();  // validate() moved them into the request that was refused
      for (auto& [name, tensor] : validated.pending->inputs)
        request.inputs.emplace_back(name, std::move(tensor));
      resolved = std::move(current);
      try {
        validated = repository_.validate(*resolved.model, request, arrived);
        validated.pending->trace_event = traced.event();
        outcome = wait(*resolved.version->batcher, validated.pending, client_gone);
      } catch (const Error& failure) {
        outcome.status = status_code_of(failure.kind());
        outcome.error = failure.what();
      }
    }
  }
  traced.finished(answer.id, outcome, arrived);
  if (outcome.status != 200) return refuse({outcome.status, std::move(outcome.error)});
  for (const std::string& name : validated.outputs) answer.outputs.emplace_back(name, outcome.outputs.at(name));
  return answer;
}

void InferenceService::record_success(const ResolvedModel& resolved, Clock::time_point arrived,
                                      Clock::time_point encode_start) {
  ModelMetrics* metrics = resolved.version->metrics;
  const Clock::time_point done = Clock::now();
  metrics->compute_output_duration_us.fetch_add(microseconds(done - encode_start), std::memory_order_relaxed);
  metrics->request_duration_us.fetch_add(microseconds(done - arrived), std::memory_order_relaxed);
  metrics->request_success.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace kiln::serve
