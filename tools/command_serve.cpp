// `kiln serve --model-repository DIR`: the Open Inference Protocol (KServe v2) over HTTP for the
// models of a Triton-layout repository (serve/server.h); docs/serving.md.
#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "runtime/thread_budget.h"
#include "serve/server.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/setting_options.h"

namespace kiln {

int command_serve(const std::vector<std::string>& args) {
  const std::vector<OptionSpec> specs = with_setting_options({
      {"model-repository", true,
       "DIR: models as DIR/<model>/<version>/model.onnx, each with an optional config.pbtxt"},
      {"host", true, "ADDR: the address to listen on (default 0.0.0.0; 127.0.0.1 for this machine only)"},
      {"http-port", true, "N: the HTTP port (default 8000; 0: any free port, printed when listening)"},
      {"grpc-port", true,
       "N: also serve the gRPC protocol on this port (Triton's is 8001; 0: any free port)"},
      {"metrics-port", true, "N: also serve /metrics alone on this port (it is always on the HTTP port too)"},
      {"http-threads", true, "N: connections served at once (default 64)"},
      {"max-request-bytes", true,
       "N: larger request bodies (gRPC: messages) are refused with 413 (RESOURCE_EXHAUSTED) (default "
       "67108864)"},
      {"model-control-mode", true,
       "none|explicit: explicit takes repository load and unload requests and loads only --load-model "
       "at start (default none: every model at start, no load or unload)"},
      {"load-model", true,
       "NAME[,NAME...]: with explicit model control, the models loaded at start ('*': all)"},
      {"trace-dir", true,
       "DIR: where live traces go (POST /v2/trace or SIGUSR1 trace the next requests; default: off)"},
      {"trace-count", true, "N: requests SIGUSR1 (or POST /v2/trace without a count) traces (default 50)"},
      {"max-queue-size", true,
       "N: requests waiting per model version before 503 (default 64; config.pbtxt may set it)"},
      {"request-timeout-ms", true, "MS: a request still queued after this fails with 504 (default 0: none)"},
      {"shutdown-timeout", true,
       "S: on SIGTERM, seconds to finish queued requests before failing them (default 30)"},
      {"thread-budget", true,
       "T: threads all models' runs share (default KILN_THREAD_BUDGET, else the physical cores)"},
      {"help", false, "show this help"},
  });
  const ParsedArgs parsed = parse_args("serve", args, specs);
  if (parsed.has("help")) {
    std::printf(
        "usage: kiln serve --model-repository DIR [options]\n\nServes the repository's models over the Open "
        "Inference Protocol (KServe v2) HTTP/REST and gRPC APIs until SIGTERM or SIGINT.\nThe settings "
        "options apply "
        "to every "
        "model; a model's config.pbtxt parameters override them.\n\n%s",
        options_help(specs).c_str());
    return 0;
  }
  KILN_CHECK(parsed.positional.empty(), invalid_argument, "kiln serve takes no positional arguments, got '",
             parsed.positional.front(), "'");
  KILN_CHECK(parsed.has("model-repository"), invalid_argument, "kiln serve needs --model-repository DIR");
  apply_setting_options(parsed);
  if (parsed.has("thread-budget")) set_thread_budget(parsed.int_value("thread-budget", 0, 0, kMaxThreads));

  serve::ServeOptions options;
  options.model_repository = parsed.value("model-repository");
  options.http.host = parsed.value("host", "0.0.0.0");
  options.http.port = parsed.int_value("http-port", 8000, 0, 65535);
  if (parsed.has("metrics-port")) options.metrics_port = parsed.int_value("metrics-port", 8002, 0, 65535);
  options.http.threads = parsed.int_value("http-threads", 64, 1, 4096);
  options.http.max_request_bytes =
      static_cast<size_t>(parsed.int_value("max-request-bytes", 64 << 20, 1, INT32_MAX));
  options.models.max_queue_size = parsed.int_value("max-queue-size", 64, 1, 1 << 20);
  options.models.request_timeout_us =
      int64_t{1000} * parsed.int_value("request-timeout-ms", 0, 0, 3600 * 1000);
  if (parsed.has("grpc-port")) {
    options.grpc.emplace();
    options.grpc->host = options.http.host;
    options.grpc->port = parsed.int_value("grpc-port", 8001, 0, 65535);
    options.grpc->max_request_bytes = options.http.max_request_bytes;
    options.grpc->threads = options.http.threads;
  }
  options.http.trace_count = parsed.int_value("trace-count", 50, 1, serve::kMaxTracedRequests);
  if (parsed.has("trace-dir")) {
    options.trace_dir = parsed.value("trace-dir");
    std::error_code error;
    KILN_CHECK(std::filesystem::is_directory(options.trace_dir, error), invalid_argument, "--trace-dir ",
               options.trace_dir.string(), " is not a directory");
  }
  const std::string control = parsed.value("model-control-mode", "none");
  KILN_CHECK(control == "none" || control == "explicit", invalid_argument,
             "--model-control-mode must be none or explicit, got '", control, "'");
  options.models.explicit_control = control == "explicit";
  if (parsed.has("load-model")) {
    KILN_CHECK(options.models.explicit_control, invalid_argument,
               "--load-model needs --model-control-mode explicit (without it every model loads at start)");
    const std::string names = parsed.value("load-model");
    for (size_t start = 0; start <= names.size();) {
      const size_t comma = std::min(names.find(',', start), names.size());
      if (comma > start) options.models.startup_models.push_back(names.substr(start, comma - start));
      start = comma + 1;
    }
  }
  options.shutdown_timeout =
      std::chrono::milliseconds(1000 * parsed.int_value("shutdown-timeout", 30, 0, 24 * 3600));
  return serve::run_server(options);
}

}  // namespace kiln
