// Helpers shared by the ONNX importer's two files (onnx_import.cpp, tensor_proto.cpp); not part of
// kiln's API.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/tensor.h"

namespace onnx {
class TensorProto;
}

namespace kiln {

// tensor_from_proto, but errors are prefixed with `label` ("initializer 'w'") instead of the
// tensor's own name; an empty label adds no prefix (the caller's context already names it).
Tensor tensor_from_proto_labeled(const onnx::TensorProto& proto, const std::filesystem::path& model_dir,
                                 const std::string& label);

// kiln's dtype for an element type code read from a file: UNDEFINED (0) is invalid_model, a valid
// code kiln lacks (STRING, COMPLEX64, ...) or an unknown one is not_implemented. Messages start with
// "has ...", to follow the caller's context ("initializer 'w': has element type STRING (8), ...").
DType checked_dtype_from_onnx(int64_t code);

// All bytes of `path`. A file that cannot be opened is invalid_argument
// "cannot open <what> '<path>': <reason>"; `what` is "model file", "tensor file", ...
std::string read_file_bytes(const std::filesystem::path& path, std::string_view what);

}  // namespace kiln
