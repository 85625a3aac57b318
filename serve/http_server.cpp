#include "serve/http_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "core/json_writer.h"
#include "core/version.h"
#include "serve/control_codec.h"

namespace kiln::serve {
namespace {

// The socket of a request's connection, found by its addresses: cpp-httplib 0.11 does not give it
// to handlers, and a handler whose request waits polls it to see a client that went away. Looked up
// once per connection (each keeps its pool thread), checked again by address before reuse.
struct ConnectionSocket {
  int fd = -1;
  std::string remote_addr;
  int remote_port = -1;
  int local_port = -1;
};
thread_local ConnectionSocket tls_connection;

bool endpoint_matches(const sockaddr_storage& address, const std::string& host, int port) {
  char text[INET6_ADDRSTRLEN] = {};
  int found_port = -1;
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    found_port = ntohs(v4.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    found_port = ntohs(v6.sin6_port);
  } else {
    return false;
  }
  return found_port == port && host == text;
}

bool is_connection(int fd, const httplib::Request& request) {
  sockaddr_storage local = {};
  sockaddr_storage peer = {};
  socklen_t local_size = sizeof local;
  socklen_t peer_size = sizeof peer;
  return getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) == 0 &&
         getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_size) == 0 &&
         endpoint_matches(local, request.local_addr, request.local_port) &&
         endpoint_matches(peer, request.remote_addr, request.remote_port);
}

int connection_socket(const httplib::Request& request) {
  ConnectionSocket& cached = tls_connection;
  if (cached.fd >= 0 && cached.remote_addr == request.remote_addr &&
      cached.remote_port == request.remote_port && cached.local_port == request.local_port &&
      is_connection(cached.fd, request)) {
    return cached.fd;
  }
  cached = {};
  DIR* fds = opendir("/proc/self/fd");
  if (fds == nullptr) return -1;
  while (const dirent* entry = readdir(fds)) {
    const int fd = std::atoi(entry->d_name);
    if (entry->d_name[0] != '.' && fd > 2 && fd != dirfd(fds) && is_connection(fd, request)) {
      cached = {fd, request.remote_addr, request.remote_port, request.local_port};
      break;
    }
  }
  closedir(fds);
  return cached.fd;
}

// True when the peer closed its side (or the connection broke). Pipelined bytes of a next request
// mean the client is still there.
bool client_gone(int fd) {
  if (fd < 0) return false;
  char byte = 0;
  const ssize_t received = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (received == 0) return true;
  return received < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

std::string error_json(const std::string& message) {
  JsonWriter json;
  json.begin_object().key("error").value(message).end_object();
  return json.take();
}

void write_tensor_metadata(JsonWriter& json, const TensorConfig& tensor, int max_batch_size) {
  json.begin_object();
  json.key("name").value(tensor.name);
  json.key("datatype").value(protocol_dtype_name(tensor.dtype));
  std::vector<int64_t> shape;
  if (max_batch_size > 0) shape.push_back(-1);
  shape.insert(shape.end(), tensor.dims.begin(), tensor.dims.end());
  json.key("shape").value(shape);
  json.end_object();
}

void write_config_tensor(JsonWriter& json, const TensorConfig& tensor) {
  json.begin_object();
  json.key("name").value(tensor.name);
  json.key("data_type").value(triton_type_name(tensor.dtype));
  json.key("dims").value(tensor.dims);
  json.end_object();
}

std::string config_json(const ModelConfig& config) {
  JsonWriter json;
  json.begin_object();
  json.key("name").value(config.name);
  json.key("platform").value("kiln_onnx");
  json.key("max_batch_size").value(config.max_batch_size);
  json.key("input").begin_array();
  for (const TensorConfig& tensor : config.inputs) write_config_tensor(json, tensor);
  json.end_array();
  json.key("output").begin_array();
  for (const TensorConfig& tensor : config.outputs) write_config_tensor(json, tensor);
  json.end_array();
  if (config.dynamic_batching) {
    json.key("dynamic_batching").begin_object();
    json.key("max_queue_delay_microseconds").value(config.max_queue_delay_us);
    json.key("preferred_batch_size").value(config.preferred_batch_sizes);
    json.key("default_queue_policy").begin_object();
    json.key("max_queue_size").value(config.max_queue_size);
    json.key("default_timeout_microseconds").value(config.default_timeout_us);
    json.end_object().end_object();
  }
  json.key("instance_group").begin_array().begin_object();
  json.key("count").value(config.instance_count).key("kind").value("KIND_CPU");
  json.end_object().end_array();
  json.key("version_policy").begin_object();
  switch (config.version_policy.kind) {
    case VersionPolicy::Kind::latest:
      json.key("latest")
          .begin_object()
          .key("num_versions")
          .value(config.version_policy.num_versions)
          .end_object();
      break;
    case VersionPolicy::Kind::all:
      json.key("all").begin_object().end_object();
      break;
    case VersionPolicy::Kind::specific:
      json.key("specific").begin_object().key("versions").value(config.version_policy.versions).end_object();
      break;
  }
  json.end_object();
  json.key("default_model_filename").value(config.default_model_filename);
  json.key("parameters").begin_object();
  for (const auto& [key, text] : config.parameters) {
    json.key(key).begin_object().key("string_value").value(text).end_object();
  }
  json.end_object();
  json.end_object();
  return json.take();
}

}  // namespace

class HttpServer::Impl {
 public:
  Impl(HttpOptions options, InferenceService& service, Metrics& metrics)
      : options_(std::move(options)), service_(service), metrics_(metrics) {
    const int threads = options_.threads;
    server_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    server_.set_payload_max_length(options_.max_request_bytes);
    // A client sends many requests over one connection; cpp-httplib's default closes it after 5.
    server_.set_keep_alive_max_count(1u << 30);
    // Small answers leave at once instead of waiting for the client's delayed ACK (40 ms on Linux).
    server_.set_tcp_nodelay(true);
    server_.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& request, httplib::Response& response) {
          if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          std::string message = "no such endpoint: " + request.method + " " + request.path;
          if (response.status == 413) {
            message = body_limit_message();
          } else if (response.status != 404) {
            message = str_cat("HTTP ", response.status, " for ", request.method, " ", request.path);
          }
          response.set_content(error_json(message), "application/json");
          return httplib::Server::HandlerResponse::Handled;
        }));
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
      response.set_content(metrics_.prometheus_text(), "text/plain; version=0.0.4");
    });
    if (options_.metrics_only) return;
    server_.Get("/v2/health/live",
                [](const httplib::Request&, httplib::Response& response) { response.status = 200; });
    server_.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& response) {
      const std::string reason = service_.not_ready_reason();
      if (!reason.empty()) error(response, 503, reason);
    });
    server_.Get("/v2", [](const httplib::Request&, httplib::Response& response) {
      JsonWriter json;
      json.begin_object().key("name").value("kiln").key("version").value(kiln_version());
      json.key("extensions").begin_array();
      for (const char* extension : kServerExtensions) json.value(extension);
      json.end_array();
      response.set_content(json.end_object().take(), "application/json");
    });
    const std::string model_path = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";
    server_.Get(model_path, [this](const httplib::Request& request, httplib::Response& response) {
      with_model(request, response, [&](const ResolvedModel& resolved) {
        response.set_content(model_metadata(*resolved.model), "application/json");
      });
    });
    server_.Get(model_path + "/ready", [this](const httplib::Request& request, httplib::Response& response) {
      with_model(request, response, [&](const ResolvedModel& resolved) {
        const Status ready = InferenceService::readiness(resolved);
        if (!ready.ok()) error(response, ready.code, ready.message);
      });
    });
    server_.Get(model_path + "/config", [this](const httplib::Request& request, httplib::Response& response) {
      with_model(request, response, [&](const ResolvedModel& resolved) {
        response.set_content(config_json(resolved.model->config), "application/json");
      });
    });
    // The body is read here rather than by cpp-httplib, which refuses form-encoded bodies (curl -d's
    // default Content-Type) above 8 KiB whatever the payload limit.
    server_.Post(model_path + "/infer", [this](const httplib::Request& request, httplib::Response& response,
                                               const httplib::ContentReader& content_reader) {
      std::string body;
      body.reserve(
          std::min<size_t>(request.get_header_value<uint64_t>("Content-Length"), options_.max_request_bytes));
      // cpp-httplib checks Content-Length against the limit; a chunked body is counted here.
      bool too_large = false;
      const bool read = content_reader([&](const char* data, size_t length) {
        too_large = body.size() + length > options_.max_request_bytes;
        if (!too_large) body.append(data, length);
        return !too_large;
      });
      if (too_large || response.status == 413) {
        // The rest of the body is still on the connection, where it would read as the next request.
        response.set_header("Connection", "close");
        return error(response, 413, body_limit_message());
      }
      if (!read) return error(response, 400, "the request body could not be read");
      with_model(request, response,
                 [&](ResolvedModel& resolved) { infer(request, body, response, resolved); });
    });
    add_control_routes();
  }

  int bind() {
    const int port = options_.port == 0
                         ? server_.bind_to_any_port(options_.host)
                         : (server_.bind_to_port(options_.host, options_.port) ? options_.port : -1);
    KILN_CHECK(port > 0, invalid_argument, "cannot listen on ", options_.host, ":", options_.port,
               " (in use, or not an address of this machine)");
    return port;
  }
  void serve() {
    server_.listen_after_bind();
    serve_returned_.store(true);
  }
  // cpp-httplib's stop() does nothing before the listener runs: a signal that comes that early waits
  // for it.
  void stop() {
    while (!server_.is_running() && !serve_returned_.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    server_.stop();
  }

 private:
  std::string body_limit_message() const {
    return str_cat("the request body is larger than the server's limit of ", options_.max_request_bytes,
                   " bytes (--max-request-bytes)");
  }

  void error(httplib::Response& response, int status, const std::string& message) {
    response.status = status;
    response.set_content(error_json(message), "application/json");
  }

  std::string model_metadata(const ServedModel& model) const {
    JsonWriter json;
    json.begin_object().key("name").value(model.name);
    json.key("versions").begin_array();
    for (const auto& [number, version] : model.versions) json.value(std::to_string(number));
    json.end_array();
    json.key("platform").value("kiln_onnx");
    json.key("inputs").begin_array();
    for (const TensorConfig& tensor : model.config.inputs)
      write_tensor_metadata(json, tensor, model.config.max_batch_size);
    json.end_array().key("outputs").begin_array();
    for (const TensorConfig& tensor : model.config.outputs)
      write_tensor_metadata(json, tensor, model.config.max_batch_size);
    json.end_array();
    return json.end_object().take();
  }

  // Resolves the path's model and version and calls `body`, answering 404/503 itself.
  template <typename Body>
  void with_model(const httplib::Request& request, httplib::Response& response, Body body) {
    ResolvedModel resolved;
    const Status status = service_.resolve(request.matches[1], request.matches[2], resolved);
    if (!status.ok()) return error(response, status.code, status.message);
    body(resolved);
  }

  void infer(const httplib::Request& http, const std::string& body, httplib::Response& response,
             ResolvedModel& resolved) {
    const Clock::time_point arrived = Clock::now();
    if (const Status ready = InferenceService::readiness(resolved); !ready.ok()) {
      service_.record_refusal(resolved, "(not decoded)", ready);
      return error(response, ready.code, ready.message);
    }
    InferRequest request;
    try {
      std::optional<size_t> header_length;
      if (http.has_header("Inference-Header-Content-Length")) {
        header_length = parse_header_length(http.get_header_value("Inference-Header-Content-Length"));
      }
      request = decode_infer_request(body, header_length);
    } catch (const Error& failure) {
      const Status status{status_code_of(failure.kind()), failure.what()};
      service_.record_refusal(resolved, "(not decoded)", status);
      return error(response, status.code, status.message);
    }
    int socket = -1;
    bool looked_up = false;  // once per request: a failed lookup is not repeated every poll
    auto client_gone_now = [&] {
      // Most requests are answered before a client could go away: the socket is found only for
      // those that wait.
      if (!looked_up && Clock::now() - arrived > std::chrono::milliseconds(20)) {
        looked_up = true;
        socket = connection_socket(http);
      }
      return client_gone(socket);
    };
    InferAnswer answer = service_.infer(resolved, request, arrived, client_gone_now);
    if (!answer.status.ok()) return error(response, answer.status.code, answer.status.message);

    const Clock::time_point encode_start = Clock::now();
    InferResponse encoded = encode_infer_response(
        resolved.model->name, std::to_string(resolved.version->version), request, answer.outputs);
    if (encoded.header_length) {
      response.set_header("Inference-Header-Content-Length", std::to_string(*encoded.header_length));
      response.set_content(std::move(encoded.body), "application/octet-stream");
    } else {
      response.set_content(std::move(encoded.body), "application/json");
    }
    service_.record_success(resolved, arrived, encode_start);
  }

  // The model-repository extension: POST /v2/repository/index, …/models/{m}/load and …/unload;
  // and live traces: POST /v2/trace starts one, GET /v2/trace says how it goes.
  void add_control_routes() {
    server_.Post("/v2/trace", [this](const httplib::Request& request, httplib::Response& response) {
      int count = 0;
      try {
        count = parse_trace_request(request.body, options_.trace_count);
      } catch (const Error& failure) {
        return error(response, 400, failure.what());
      }
      std::string file;
      const Status status = service_.live_trace().start(count, file);
      if (!status.ok()) return error(response, status.code, status.message);
      response.set_content(service_.live_trace().state_json(), "application/json");
    });
    server_.Get("/v2/trace", [this](const httplib::Request&, httplib::Response& response) {
      response.set_content(service_.live_trace().state_json(), "application/json");
    });
    server_.Post("/v2/repository/index",
                 [this](const httplib::Request& request, httplib::Response& response) {
                   bool ready_only = false;
                   try {
                     ready_only = parse_index_request(request.body);
                   } catch (const Error& failure) {
                     return error(response, 400, failure.what());
                   }
                   JsonWriter json;
                   json.begin_array();
                   for (const IndexEntry& entry : service_.repository().index(ready_only)) {
                     json.begin_object().key("name").value(entry.name);
                     if (!entry.version.empty()) json.key("version").value(entry.version);
                     json.key("state").value(entry.state);
                     if (!entry.reason.empty()) json.key("reason").value(entry.reason);
                     json.end_object();
                   }
                   response.set_content(json.end_array().take(), "application/json");
                 });
    server_.Post(R"(/v2/repository/models/([^/]+)/load)",
                 [this](const httplib::Request& request, httplib::Response& response) {
                   std::optional<std::string> config;
                   try {
                     config = parse_load_request(request.body);
                   } catch (const Error& failure) {
                     return error(response, 400, failure.what());
                   }
                   const Status status = service_.repository().load(request.matches[1], config);
                   if (!status.ok()) error(response, status.code, status.message);
                 });
    server_.Post(R"(/v2/repository/models/([^/]+)/unload)",
                 [this](const httplib::Request& request, httplib::Response& response) {
                   try {
                     parse_unload_request(request.body);
                   } catch (const Error& failure) {
                     return error(response, 400, failure.what());
                   }
                   const Status status = service_.repository().unload(request.matches[1]);
                   if (!status.ok()) error(response, status.code, status.message);
                 });
  }

  HttpOptions options_;
  InferenceService& service_;
  Metrics& metrics_;
  httplib::Server server_;
  std::atomic<bool> serve_returned_{false};
};

HttpServer::HttpServer(HttpOptions options, InferenceService& service, Metrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(options), service, metrics)) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  return impl_->bind();
}
void HttpServer::serve() {
  impl_->serve();
}
void HttpServer::stop() {
  impl_->stop();
}

}  // namespace kiln::serve
