// Helpers shared by the ONNX importer's two files (onnx_import.cpp, tensor_proto.cpp); not part of
// kiln's API.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/tensor.h"

namespace onnx {
class TensorProto;
}

namespace kiln {

// A tensor's raw_data found outside its TensorProto (onnx_wire.h), and what keeps those bytes
// alive: the MappedFile they lie in, or null when they must be copied before the call returns.
struct RawBytes {
  std::span<const uint8_t> bytes;
  std::shared_ptr<const void> owner;
};

// How a tensor's data may be read: `raw`, when given, replaces the proto's raw_data; with
// `map_files`, external data files are mapped (core/mapped_file.h) instead of read.
struct TensorDataSource {
  const RawBytes* raw = nullptr;
  bool map_files = false;
};

// tensor_from_proto, but errors are prefixed with `label` ("initializer 'w'") instead of the
// tensor's own name; an empty label adds no prefix (the caller's context already names it).
// Data in a mapped file becomes a view of it when its offset suits the element type (a copy
// otherwise, whose source pages are then released).
Tensor tensor_from_proto_labeled(const onnx::TensorProto& proto, const std::filesystem::path& model_dir,
                                 const std::string& label, TensorDataSource source = {});

// kiln's dtype for an element type code read from a file: UNDEFINED (0) is invalid_model, a valid
// code kiln lacks (STRING, COMPLEX64, ...) or an unknown one is not_implemented. Messages start with
// "has ...", to follow the caller's context ("initializer 'w': has element type STRING (8), ...").
DType checked_dtype_from_onnx(int64_t code);

// All bytes of `path`. A file that cannot be opened is invalid_argument
// "cannot open <what> '<path>': <reason>"; `what` is "model file", "tensor file", ...
std::string read_file_bytes(const std::filesystem::path& path, std::string_view what);

}  // namespace kiln
