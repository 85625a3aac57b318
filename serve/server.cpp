#include "serve/server.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace kiln::serve {
namespace {

// Signals reach the server through a pipe: the handler only writes a byte, whichever thread runs
// it. A second signal exits at once, for an operator who will not wait for the drain.
int g_signal_pipe[2] = {-1, -1};
std::atomic<int> g_signals{0};
// What the listener thread writes when it returns without being stopped (accept failed).
constexpr char kListenerFailed = 0;

void wake_main(char byte) {
  [[maybe_unused]] const ssize_t written = write(g_signal_pipe[1], &byte, 1);
}

void on_signal(int signal) {
  const int saved_errno = errno;
  if (signal != SIGUSR1 && g_signals.fetch_add(1) > 0) _exit(128 + signal);
  wake_main(static_cast<char>(signal));
  errno = saved_errno;
}

void log_line(const std::string& message) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  std::fprintf(stderr, "kiln serve: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace

int run_server(const ServeOptions& options) {
  std::error_code error;
  KILN_CHECK(std::filesystem::is_directory(options.model_repository, error), invalid_argument,
             "--model-repository ", options.model_repository.string(), " is not a directory");
  KILN_CHECK(pipe2(g_signal_pipe, O_CLOEXEC) == 0 && fcntl(g_signal_pipe[1], F_SETFL, O_NONBLOCK) == 0,
             runtime, "kiln serve: cannot create the signal pipe");
  struct sigaction action = {};
  action.sa_handler = on_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  // SIGUSR1: trace the next --trace-count requests (serve/live_trace.h).
  sigaction(SIGUSR1, &action, nullptr);
  // A client that disconnects while its answer is written must not kill the server.
  std::signal(SIGPIPE, SIG_IGN);

  Metrics metrics;
  ModelRepository repository(options.model_repository, options.models, metrics, log_line);
  std::atomic<bool> models_loaded{false};
  std::atomic<bool> stopping{false};
  LiveTrace live_trace(options.trace_dir, log_line);
  InferenceService service(repository, models_loaded, live_trace, log_line);
  HttpServer http(options.http, service, metrics);
  const int port = http.bind();
  std::unique_ptr<HttpServer> metrics_http;
  int metrics_port = 0;
  if (options.metrics_port) {
    HttpOptions metrics_options = options.http;
    metrics_options.port = *options.metrics_port;
    metrics_options.threads = 4;
    metrics_options.metrics_only = true;
    metrics_http = std::make_unique<HttpServer>(metrics_options, service, metrics);
    metrics_port = metrics_http->bind();
  }
  // gRPC answers from here on too, on its own threads.
  std::unique_ptr<GrpcServer> grpc;
  int grpc_port = 0;
  if (options.grpc) {
    grpc = std::make_unique<GrpcServer>(*options.grpc, service);
    grpc_port = grpc->start();
  }

  // HTTP answers from here on (live, not ready) while the models load.
  auto listen = [&](HttpServer& server) {
    server.serve();
    if (!stopping.load()) {
      log_line("the HTTP listener stopped by itself (accept failed); shutting down");
      wake_main(kListenerFailed);
    }
  };
  std::thread http_thread(listen, std::ref(http));
  std::thread metrics_thread;
  if (metrics_http) metrics_thread = std::thread(listen, std::ref(*metrics_http));
  std::thread loader([&] {
    try {
      repository.load_all();
    } catch (const std::exception& error) {
      log_line(std::string("cannot load the model repository: ") + error.what());
    }
    models_loaded.store(true);
    if (stopping.load()) return;
    log_line(str_cat("listening on http://", options.http.host, ":", port,
                     repository.all_ready() ? "" : " (not ready: a model failed to load)"));
    if (grpc) log_line(str_cat("listening on grpc://", options.grpc->host, ":", grpc_port));
    if (metrics_http)
      log_line(str_cat("metrics on http://", options.http.host, ":", metrics_port, "/metrics"));
  });

  char reason = 0;
  while (true) {
    const ssize_t got = read(g_signal_pipe[0], &reason, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got != 1 || reason != SIGUSR1) break;
    std::string file;
    const Status traced = live_trace.start(options.http.trace_count, file);
    if (!traced.ok()) log_line("SIGUSR1: no trace: " + traced.message);
  }
  stopping.store(true);
  if (reason != kListenerFailed) {
    log_line(str_cat("shutting down on ", reason == SIGINT ? "SIGINT" : "SIGTERM",
                     ": no new connections; answering the requests already read"));
  }
  http.stop();
  // gRPC refuses new calls at once; stop() returns when the calls in flight have answered.
  std::thread grpc_stopper;
  if (grpc) grpc_stopper = std::thread([&] { grpc->stop(); });
  if (metrics_http) metrics_http->stop();
  repository.stop_loading();
  loader.join();

  // Requests already read are answered; past the deadline, what still waits fails with 503.
  std::mutex mutex;
  std::condition_variable stopped;
  bool http_done = false;
  std::thread deadline([&] {
    std::unique_lock lock(mutex);
    if (!stopped.wait_for(lock, options.shutdown_timeout, [&] { return http_done; })) {
      log_line("shutdown timeout: failing the requests still queued");
      repository.abort("the server shut down before the request ran (--shutdown-timeout)");
    }
  });
  if (grpc_stopper.joinable()) grpc_stopper.join();
  http_thread.join();
  if (metrics_thread.joinable()) metrics_thread.join();
  {
    std::lock_guard lock(mutex);
    http_done = true;
  }
  stopped.notify_all();
  deadline.join();
  repository.stop_accepting();
  repository.join();
  log_line("stopped");
  return reason == kListenerFailed ? 1 : 0;
}

}  // namespace kiln::serve
