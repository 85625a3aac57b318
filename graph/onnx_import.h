// Reads ONNX files into kiln's Graph. Nothing in the file is trusted: every count, index, dim,
// byte size, dtype code and external-data path is checked before use, and a problem becomes a
// kiln::Error (invalid_model, or not_implemented for valid features kiln lacks) naming the
// node/tensor/attribute concerned.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>

#include "core/tensor.h"
#include "graph/graph.h"

namespace onnx {
class TensorProto;
}

namespace kiln {

// Supported default-domain opsets.
inline constexpr int64_t kMinOpset = 7;
inline constexpr int64_t kMaxOpset = 21;

// Loads `path`; external data files are resolved against (and confined to) its folder.
// With `map_files` (the use_mmap setting) the file and its external data are mapped, not read
// (core/mapped_file.h): initializers whose bytes suit their element type's alignment are views of
// the mapping, costing memory only while they are read. Either way protobuf never copies the
// weights (graph/onnx_wire.h), so the model is held in one form only.
Model load_onnx_model(const std::filesystem::path& path, bool map_files = true);

// Parses a model from memory. External data is resolved against `model_dir`; when `model_dir` is
// empty, models that use external data are rejected.
Model parse_onnx_model(std::span<const uint8_t> bytes, const std::filesystem::path& model_dir);

// Converts one TensorProto (raw, typed or external data) into a Tensor; `model_dir` as above.
Tensor tensor_from_proto(const onnx::TensorProto& proto, const std::filesystem::path& model_dir);

// Reads a serialized TensorProto file (ONNX's test_data_set_*/input_*.pb).
Tensor load_tensor_file(const std::filesystem::path& path);
// A value of `kind` from a file: a TensorProto, a SequenceProto (elements of `dtype`) or an
// OptionalProto (empty: an undefined Tensor), as ONNX's test data stores them.
Tensor load_value_file(const std::filesystem::path& path, ValueKind kind, DType dtype);

}  // namespace kiln
