// The Open Inference Protocol's inference request and response bodies over HTTP: JSON tensors
// (flat or nested row-major "data") and the binary tensor extension (a JSON header of
// Inference-Header-Content-Length bytes, then each binary input's raw little-endian bytes in input
// order; outputs likewise). Decoding knows nothing of models: it checks the body against itself
// (shape against data, sizes against the body) and never allocates more than the body implies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace kiln::serve {

struct RequestedOutput {
  std::string name;
  std::optional<bool> binary;  // the output's binary_data parameter, when given
};

struct InferRequest {
  std::string id;  // echoed in the response; may be empty
  std::vector<std::pair<std::string, Tensor>> inputs;
  std::vector<RequestedOutput> outputs;  // empty: every output of the model
  bool binary_output = false;            // the request's binary_data_output parameter
  int64_t timeout_us = 0;                // the request's timeout parameter (microseconds); 0: none
};

// Decodes a request body. `header_length` is the Inference-Header-Content-Length header's value
// (none: the whole body is JSON). Throws kiln::Error: invalid_argument for malformed JSON, a
// missing or wrong field, a shape that does not match the data, binary sizes that do not add up to
// the body; not_implemented for BYTES and extensions kiln does not serve (classification).
InferRequest decode_infer_request(std::string_view body, std::optional<size_t> header_length);

// "Inference-Header-Content-Length" as a number; throws kiln::Error (invalid_argument) otherwise.
size_t parse_header_length(std::string_view text);

struct InferResponse {
  std::string body;
  std::optional<size_t> header_length;  // set when binary outputs follow the JSON
};

// The response to `request`: `outputs` in the order they are listed, each as JSON data or, when
// asked for binary (its own parameter, else the request's binary_data_output), raw bytes after the
// JSON header. Floats are written in their shortest round-trip form; NaN and infinities as the
// literals NaN, Infinity, -Infinity (which JSON parsers of Python and RapidJSON accept).
InferResponse encode_infer_response(std::string_view model_name, std::string_view model_version,
                                    const InferRequest& request,
                                    const std::vector<std::pair<std::string, Tensor>>& outputs);

}  // namespace kiln::serve
