// Fuzzes what `kiln serve` reads from gRPC clients: the bytes of a ModelInferRequest message, parsed
// by protobuf and decoded (serve/grpc_codec.h). Any message must decode or raise kiln::Error; what
// decodes must encode back into a response whose tensors hold exactly their shapes' bytes.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "serve/grpc_codec.h"

// Protobuf logs every message it refuses (invalid UTF-8 in a string field): noise at fuzzing speed.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  inference::ModelInferRequest message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return 0;
  try {
    kiln::serve::GrpcInferRequest decoded = kiln::serve::decode_grpc_infer_request(message);
    size_t total = 0;
    for (const auto& [name, tensor] : decoded.request.inputs) {
      if (!tensor.defined() || kiln::checked_numel(tensor.shape()) != tensor.numel()) std::abort();
      total += tensor.nbytes();
    }
    // Every element came from the message: at least one byte each (typed: packed varints or fixed
    // widths; raw: its own bytes), at most 8 bytes per byte (a packed bool becomes one byte; an
    // int8 from a one-byte varint, one).
    if (total > size * 8) std::abort();
    decoded.typed_contents = (size & 1) != 0;
    inference::ModelInferResponse response;
    kiln::serve::encode_grpc_infer_response("m", "1", decoded, decoded.request.inputs, response);
    if (response.outputs_size() != static_cast<int>(decoded.request.inputs.size())) std::abort();
  } catch (const kiln::Error&) {
    // Rejecting bad input with an error is the expected outcome.
  }
  return 0;
}
