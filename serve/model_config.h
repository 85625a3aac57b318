// A model's serving configuration: the subset of Triton's config.pbtxt kiln reads (protobuf text
// format), completed from the model as Triton's ONNX backend completes it. Fields Triton defines
// that kiln does not act on are accepted and listed (ignored_fields), so a Triton repository loads
// unchanged; a field Triton does not define is an error naming its line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "graph/graph.h"

namespace kiln::serve {

// Limits of what a config may ask: batches up to 1024 rows, 256 instances of a model.
inline constexpr int kMaxBatchSize = 1024;
inline constexpr int kMaxInstances = 256;

struct TensorConfig {
  std::string name;
  DType dtype = DType::undefined;  // undefined: taken from the model
  bool has_dims = false;
  std::vector<int64_t> dims;  // -1 for a variable dim; without the batch dim when batching
};

struct VersionPolicy {
  enum class Kind { latest, all, specific };
  Kind kind = Kind::latest;
  int num_versions = 1;           // latest
  std::vector<int64_t> versions;  // specific
};

struct ModelConfig {
  std::string name;
  // -1: not given (completed from the model); 0: the model does not batch; N: requests carry a
  // batch dim of 1..N and the batcher merges them up to N rows.
  int max_batch_size = -1;
  std::vector<TensorConfig> inputs;
  std::vector<TensorConfig> outputs;
  bool dynamic_batching = false;
  int64_t max_queue_delay_us = 0;
  std::vector<int> preferred_batch_sizes;
  int max_queue_size = 0;          // 0: the server's default
  int64_t default_timeout_us = 0;  // 0: none (the request's own or the server's)
  int instance_count = 1;
  bool instance_count_given = false;  // several instance_group entries add up
  VersionPolicy version_policy;
  std::string default_model_filename = "model.onnx";
  // kiln settings by name ("threads", "conv_algorithm", "precision", ...), as text.
  std::vector<std::pair<std::string, std::string>> parameters;
  // Triton fields present in the file that kiln accepts and does not act on ("optimization", ...).
  std::vector<std::string> ignored_fields;
};

// Parses config.pbtxt text; `source` names the file in errors. Throws kiln::Error (invalid_argument)
// naming the line and field for syntax errors, unknown fields, wrong value types and values out
// of range.
ModelConfig parse_model_config(std::string_view text, std::string_view source);
// The same from protobuf's JSON form of a config (Triton's repository load "config" parameter):
// snake_case or lowerCamelCase names, 64-bit integers as numbers or strings; errors name `source`.
ModelConfig parse_model_config_json(std::string_view text, std::string_view source);

// Fills what the file left out from the model's declared inputs and outputs and checks what it
// gave against them: names, data types and dims (without the batch dim when max_batch_size > 0).
// max_batch_size not given: 4 (Triton's default) when every input and output has a variable first
// dim, else 0. Throws kiln::Error (invalid_argument) naming the field that contradicts the model.
void complete_model_config(ModelConfig& config, const std::vector<ValueInfo>& model_inputs,
                           const std::vector<ValueInfo>& model_outputs);

// Triton's names: TYPE_FP32 <-> f32, and the protocol's datatype names: "FP32" <-> f32.
DType dtype_from_triton_type(std::string_view type);    // undefined when unknown
std::string_view triton_type_name(DType dtype);         // "TYPE_FP32"
DType dtype_from_protocol_name(std::string_view name);  // undefined when unknown (BYTES included)
std::string_view protocol_dtype_name(DType dtype);      // "FP32"

}  // namespace kiln::serve
