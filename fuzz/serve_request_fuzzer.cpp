// Fuzzes what `kiln serve` reads from HTTP clients and repositories: an inference request body
// (JSON and binary tensors, serve/infer_codec.h), a config.pbtxt and a load request's JSON config
// (serve/model_config.h), and the control bodies of the repository extension and live traces
// (serve/control_codec.h). The first byte picks which: 'c' a config.pbtxt, 'j' a JSON config, 'r' a
// control body; else a request, whose next two bytes (little-endian) give the
// Inference-Header-Content-Length when nonzero. Any bytes must decode or raise kiln::Error; what
// decodes must encode back into a response whose tensors hold exactly their shapes' bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "serve/control_codec.h"
#include "serve/infer_codec.h"
#include "serve/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    if (bytes[0] == 'c') {
      const kiln::serve::ModelConfig config = kiln::serve::parse_model_config(bytes.substr(1), "fuzz.pbtxt");
      if (config.instance_count < 1) std::abort();
      return 0;
    }
    if (bytes[0] == 'j') {
      const kiln::serve::ModelConfig config = kiln::serve::parse_model_config_json(bytes.substr(1), "fuzz");
      if (config.instance_count < 1) std::abort();
      return 0;
    }
    if (bytes[0] == 'r') {
      kiln::serve::parse_index_request(bytes.substr(1));
      kiln::serve::parse_load_request(bytes.substr(1));
      kiln::serve::parse_unload_request(bytes.substr(1));
      kiln::serve::parse_trace_request(bytes.substr(1), 50);
      return 0;
    }
    if (size < 3) return 0;
    const size_t header = static_cast<size_t>(data[1]) | static_cast<size_t>(data[2]) << 8;
    const std::string_view body = bytes.substr(3);
    kiln::serve::InferRequest request =
        kiln::serve::decode_infer_request(body, header == 0 ? std::nullopt : std::optional<size_t>(header));
    size_t total = 0;
    for (const auto& [name, tensor] : request.inputs) {
      if (!tensor.defined() || kiln::checked_numel(tensor.shape()) != tensor.numel()) std::abort();
      total += tensor.nbytes();
    }
    // Every element came from the body: at least one character (JSON) or its own bytes (binary).
    if (total > body.size() * 8) std::abort();
    request.binary_output = (size & 1) != 0;
    const kiln::serve::InferResponse response =
        kiln::serve::encode_infer_response("m", "1", request, request.inputs);
    if (response.header_length && *response.header_length > response.body.size()) std::abort();
  } catch (const kiln::Error&) {
    // Rejecting bad input with an error is the expected outcome.
  }
  return 0;
}
