// kiln's in-memory model: an ONNX graph after import, before planning. Names connect values
// (ONNX's SSA form); "" names an absent optional input or output.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/attributes.h"
#include "ops/op_spec.h"

namespace kiln {

// One dimension of a declared shape: a known size, or a symbol ("batch") / unknown (empty symbol).
struct Dim {
  int64_t value = -1;  // >= 0 when known
  std::string symbol;

  bool is_known() const { return value >= 0; }
};

// A declared graph input, output or intermediate value (ONNX ValueInfoProto).
struct ValueInfo {
  std::string name;
  DType dtype = DType::undefined;  // a sequence's or optional's: its tensors'; shape likewise
  bool has_shape = false;  // false: rank unknown
  std::vector<Dim> shape;
  ValueKind kind = ValueKind::tensor;
};

std::string dims_to_string(const std::vector<Dim>& dims);  // "[batch, 3, 224, 224]"

struct Node {
  std::string name;  // may be empty in ONNX; the importer names unnamed nodes "<op_type>_<index>"
  std::string op_type;
  std::string domain;  // "" for ai.onnx
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  Attributes attributes;
};

class Graph {
 public:
  std::string name;
  std::vector<Node> nodes;                     // in file order (not necessarily topological)
  std::map<std::string, Tensor> initializers;  // constant tensors by name
  std::vector<ValueInfo> inputs;               // inputs the caller feeds (initializers excluded)
  std::vector<ValueInfo> outputs;
  std::vector<ValueInfo> value_info;  // optional shape hints for intermediate values
};

struct Model {
  Graph graph;
  std::map<std::string, int64_t> opsets;  // domain ("" for ai.onnx) -> version
  int64_t ir_version = 0;
  std::string producer;  // "pytorch 1.13.1"
  std::filesystem::path path;

  int64_t default_opset() const;  // version of the "" domain (0 when absent)
};

}  // namespace kiln
