// The Open Inference Protocol's gRPC ModelInfer messages (serve/proto/grpc_predict_v2.proto) to and
// from kiln's requests and tensors. Decoding knows nothing of models: it checks the message against
// itself (each input's contents against its shape and datatype, raw_input_contents one per input)
// and never allocates more than the message's own bytes imply.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "serve/infer_codec.h"
#include "serve/proto/grpc_predict_v2.pb.h"

namespace kiln::serve {

struct GrpcInferRequest {
  InferRequest request;
  // The inputs came as typed contents: outputs are answered the same way (raw when one of them
  // has no typed field, FP16 and BF16).
  bool typed_contents = false;
};

// Throws kiln::Error: invalid_argument for a malformed request (a datatype kiln does not know, a
// shape its contents do not fill, raw contents of the wrong size or count, typed contents in the
// wrong field, both raw and typed contents, an input named twice); not_implemented for BYTES and
// classification outputs. Moves the raw contents out of `message`.
GrpcInferRequest decode_grpc_infer_request(inference::ModelInferRequest& message);

void encode_grpc_infer_response(std::string_view model_name, std::string_view model_version,
                                const GrpcInferRequest& request,
                                const std::vector<std::pair<std::string, Tensor>>& outputs,
                                inference::ModelInferResponse& response);

}  // namespace kiln::serve
