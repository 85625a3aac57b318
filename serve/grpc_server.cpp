#include "serve/grpc_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include <chrono>

#include "core/error.h"
#include "core/version.h"
#include "serve/grpc_codec.h"
#include "serve/proto/grpc_predict_v2.grpc.pb.h"

namespace kiln::serve {
namespace {

grpc::StatusCode grpc_code(int status) {
  switch (status) {
    case 200:
      return grpc::StatusCode::OK;
    case 400:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 404:
      return grpc::StatusCode::NOT_FOUND;
    case 413:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 499:
      return grpc::StatusCode::CANCELLED;
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    case 504:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

grpc::Status to_grpc(const Status& status) {
  return status.ok() ? grpc::Status::OK : grpc::Status(grpc_code(status.code), status.message);
}

void add_tensor_metadata(const TensorConfig& tensor, int max_batch_size,
                         inference::ModelMetadataResponse::TensorMetadata& metadata) {
  metadata.set_name(tensor.name);
  metadata.set_datatype(std::string(protocol_dtype_name(tensor.dtype)));
  if (max_batch_size > 0) metadata.add_shape(-1);
  for (int64_t dim : tensor.dims) metadata.add_shape(dim);
}

// The gRPC address of `host`: IPv6 literals in brackets.
std::string address(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

class InferenceServiceImpl final : public inference::GRPCInferenceService::Service {
 public:
  explicit InferenceServiceImpl(InferenceService& service) : service_(service) {}

  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return grpc::Status::OK;
  }

  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* response) override {
    response->set_ready(service_.not_ready_reason().empty());
    return grpc::Status::OK;
  }

  grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest* request,
                          inference::ModelReadyResponse* response) override {
    ResolvedModel resolved;
    const Status status = service_.resolve(request->name(), request->version(), resolved);
    // A model that exists and is not ready answers false; an unknown one is an error.
    if (status.code == 404) return to_grpc(status);
    response->set_ready(status.ok() && InferenceService::readiness(resolved).ok());
    return grpc::Status::OK;
  }

  grpc::Status ServerMetadata(grpc::ServerContext*, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse* response) override {
    response->set_name("kiln");
    response->set_version(std::string(kiln_version()));
    for (const char* extension : kServerExtensions) response->add_extensions(extension);
    return grpc::Status::OK;
  }

  grpc::Status ModelMetadata(grpc::ServerContext*, const inference::ModelMetadataRequest* request,
                             inference::ModelMetadataResponse* response) override {
    ResolvedModel resolved;
    const Status status = service_.resolve(request->name(), request->version(), resolved);
    if (!status.ok()) return to_grpc(status);
    const ServedModel& model = *resolved.model;
    response->set_name(model.name);
    for (const auto& [number, version] : model.versions) response->add_versions(std::to_string(number));
    response->set_platform("kiln_onnx");
    for (const TensorConfig& tensor : model.config.inputs)
      add_tensor_metadata(tensor, model.config.max_batch_size, *response->add_inputs());
    for (const TensorConfig& tensor : model.config.outputs)
      add_tensor_metadata(tensor, model.config.max_batch_size, *response->add_outputs());
    return grpc::Status::OK;
  }

  grpc::Status ModelInfer(grpc::ServerContext* context, const inference::ModelInferRequest* request,
                          inference::ModelInferResponse* response) override {
    const Clock::time_point arrived = Clock::now();
    ResolvedModel resolved;
    const Status status = service_.resolve(request->model_name(), request->model_version(), resolved);
    if (!status.ok()) return to_grpc(status);
    if (const Status ready = InferenceService::readiness(resolved); !ready.ok()) {
      service_.record_refusal(resolved, request->id().empty() ? "(not decoded)" : request->id(), ready);
      return to_grpc(ready);
    }
    GrpcInferRequest decoded;
    try {
      // The raw contents move into tensors instead of being copied twice.
      decoded = decode_grpc_infer_request(const_cast<inference::ModelInferRequest&>(*request));
    } catch (const Error& failure) {
      const Status refused{status_code_of(failure.kind()), failure.what()};
      service_.record_refusal(resolved, request->id().empty() ? "(not decoded)" : request->id(), refused);
      return to_grpc(refused);
    }
    // The call's deadline bounds the request's time in the queue, as its timeout parameter does.
    const auto deadline = context->deadline();
    if (deadline != std::chrono::system_clock::time_point::max()) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
                            deadline - std::chrono::system_clock::now())
                            .count();
      const int64_t timeout_us = std::max<int64_t>(1, left);
      InferRequest& inner = decoded.request;
      inner.timeout_us = inner.timeout_us > 0 ? std::min(inner.timeout_us, timeout_us) : timeout_us;
    }
    InferAnswer answer =
        service_.infer(resolved, decoded.request, arrived, [context] { return context->IsCancelled(); });
    if (!answer.status.ok()) return to_grpc(answer.status);
    const Clock::time_point encode_start = Clock::now();
    encode_grpc_infer_response(resolved.model->name, std::to_string(resolved.version->version), decoded,
                               answer.outputs, *response);
    service_.record_success(resolved, arrived, encode_start);
    return grpc::Status::OK;
  }

  grpc::Status RepositoryIndex(grpc::ServerContext*, const inference::RepositoryIndexRequest* request,
                               inference::RepositoryIndexResponse* response) override {
    if (const Status known = known_repository(request->repository_name()); !known.ok()) return to_grpc(known);
    for (const IndexEntry& entry : service_.repository().index(request->ready())) {
      auto* model = response->add_models();
      model->set_name(entry.name);
      model->set_version(entry.version);
      model->set_state(entry.state);
      model->set_reason(entry.reason);
    }
    return grpc::Status::OK;
  }

  grpc::Status RepositoryModelLoad(grpc::ServerContext*, const inference::RepositoryModelLoadRequest* request,
                                   inference::RepositoryModelLoadResponse*) override {
    if (const Status known = known_repository(request->repository_name()); !known.ok()) return to_grpc(known);
    std::optional<std::string> config;
    for (const auto& [name, parameter] : request->parameters()) {
      if (name != "config") {
        return to_grpc({400, "the load request's parameter \"" + name + "\" is not one kiln takes" +
                                 (name.rfind("file:", 0) == 0 ? " (model files come from the repository)" : "")});
      }
      if (parameter.parameter_choice_case() != inference::ModelRepositoryParameter::kStringParam) {
        return to_grpc({400, "the load request's \"config\" must be a string_param holding the model "
                             "configuration as JSON"});
      }
      config = parameter.string_param();
    }
    return to_grpc(service_.repository().load(request->model_name(), config));
  }

  grpc::Status RepositoryModelUnload(grpc::ServerContext*, const inference::RepositoryModelUnloadRequest* request,
                                     inference::RepositoryModelUnloadResponse*) override {
    if (const Status known = known_repository(request->repository_name()); !known.ok()) return to_grpc(known);
    if (!request->parameters().empty()) {
      return to_grpc({400, "the unload request's parameter \"" + request->parameters().begin()->first +
                               "\" is not one kiln takes"});
    }
    return to_grpc(service_.repository().unload(request->model_name()));
  }

 private:
  // kiln serves one repository: an empty name or that directory's name.
  Status known_repository(const std::string& name) const {
    const std::string served = service_.repository().root().filename().string();
    if (name.empty() || name == served) return {};
    return {404, "unknown repository '" + name + "' (this server's is '" + served + "')"};
  }

  InferenceService& service_;
};

}  // namespace

class GrpcServer::Impl {
 public:
  Impl(GrpcOptions options, InferenceService& service) : options_(std::move(options)), service_(service) {}

  int start() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(address(options_.host, options_.port), grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<size_t>(options_.max_request_bytes, INT32_MAX)));
    builder.SetMaxSendMessageSize(-1);
    // Each call holds a thread while its request waits in the batcher: the threads bound the calls
    // served at once, as HTTP's pool bounds its connections.
    grpc::ResourceQuota quota("kiln-grpc");
    quota.SetMaxThreads(options_.threads);
    builder.SetResourceQuota(quota);
    server_ = builder.BuildAndStart();
    KILN_CHECK(server_ != nullptr && port > 0, invalid_argument, "cannot listen for gRPC on ", options_.host, ":",
               options_.port, " (in use, or not an address of this machine)");
    return port;
  }

  void stop() {
    if (server_) server_->Shutdown();
  }

 private:
  GrpcOptions options_;
  InferenceServiceImpl service_;
  std::unique_ptr<grpc::Server> server_;
};

GrpcServer::GrpcServer(GrpcOptions options, InferenceService& service)
    : impl_(std::make_unique<Impl>(std::move(options), service)) {}
GrpcServer::~GrpcServer() {
  impl_->stop();
}
int GrpcServer::start() {
  return impl_->start();
}
void GrpcServer::stop() {
  impl_->stop();
}

}  // namespace kiln::serve
