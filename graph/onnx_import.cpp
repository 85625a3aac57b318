// ONNX ModelProto -> kiln Model. Every field read from the file is validated here or in
// tensor_from_proto before it is used; graph-level consistency (names, order) is the planner's job.
#include "graph/onnx_import.h"

#include <onnx/onnx_pb.h>  // defines ONNX_API, then includes onnx-ml.pb.h

#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include "core/error.h"
#include "ops/onnx_dtype.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Nested graphs (If/Loop bodies) deeper than this are rejected: real models nest a few levels, and
// unbounded recursion would let a file overflow the stack.
constexpr int kMaxGraphDepth = 32;
// protobuf parses at most 2 GiB from one buffer; larger models must keep weights in external data.
constexpr size_t kMaxModelBytes = static_cast<size_t>(std::numeric_limits<int>::max());

bool is_default_domain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

class Importer {
 public:
  explicit Importer(fs::path model_dir) : model_dir_(std::move(model_dir)) {}

  Graph convert_graph(const onnx::GraphProto& proto, int depth) {
    KILN_CHECK(depth <= kMaxGraphDepth, invalid_model, "graphs are nested more than ", kMaxGraphDepth, " levels deep");
    Graph graph;
    graph.name = proto.name();
    KILN_CHECK(proto.sparse_initializer_size() == 0, not_implemented, "sparse initializers are not supported");
    for (const onnx::TensorProto& initializer : proto.initializer()) {
      KILN_CHECK(!initializer.name().empty(), invalid_model, "an initializer has no name");
      Tensor tensor = with_context(str_cat("initializer '", initializer.name(), "'"),
                                   [&] { return tensor_from_proto(initializer, model_dir_); });
      KILN_CHECK(graph.initializers.emplace(initializer.name(), std::move(tensor)).second, invalid_model,
                 "initializer '", initializer.name(), "' is defined twice");
    }
    std::set<std::string> input_names;
    for (const onnx::ValueInfoProto& input : proto.input()) {
      KILN_CHECK(!input.name().empty(), invalid_model, "a graph input has no name");
      KILN_CHECK(input_names.insert(input.name()).second, invalid_model, "graph input '", input.name(),
                 "' is declared twice");
      // Older exporters list initializers as inputs too; those are constants, not caller inputs.
      if (graph.initializers.count(input.name())) continue;
      graph.inputs.push_back(convert_value_info(input, "graph input", depth));
    }
    for (const onnx::ValueInfoProto& output : proto.output()) {
      KILN_CHECK(!output.name().empty(), invalid_model, "a graph output has no name");
      graph.outputs.push_back(convert_value_info(output, "graph output", depth));
    }
    for (const onnx::ValueInfoProto& info : proto.value_info()) {
      // value_info is only a hint: skip entries kiln cannot represent instead of failing the model.
      if (info.type().has_tensor_type()) graph.value_info.push_back(convert_value_info(info, "value_info", depth));
    }
    graph.nodes.reserve(static_cast<size_t>(proto.node_size()));
    for (int i = 0; i < proto.node_size(); ++i) graph.nodes.push_back(convert_node(proto.node(i), i, depth));
    return graph;
  }

 private:
  // Inputs and outputs of nested graphs (Loop bodies) may leave their type to inference.
  ValueInfo convert_value_info(const onnx::ValueInfoProto& proto, const char* role, int depth) {
    return with_context(str_cat(role, " '", proto.name(), "'"), [&] {
      ValueInfo info;
      info.name = proto.name();
      if (!proto.has_type() && depth > 0) return info;
      KILN_CHECK(proto.has_type(), invalid_model, "has no type");
      KILN_CHECK(proto.type().has_tensor_type(), not_implemented,
                 "is not a tensor (sequence, map and optional values are not supported)");
      const onnx::TypeProto_Tensor& tensor_type = proto.type().tensor_type();
      info.dtype = dtype_from_onnx(tensor_type.elem_type());
      KILN_CHECK(info.dtype != DType::undefined, not_implemented, "has element type ",
                 onnx_dtype_name(tensor_type.elem_type()), " (", tensor_type.elem_type(), "), which kiln does not support");
      info.has_shape = tensor_type.has_shape();
      for (const onnx::TensorShapeProto_Dimension& dim : tensor_type.shape().dim()) {
        Dim converted;
        if (dim.has_dim_value()) {
          KILN_CHECK(dim.dim_value() >= 0, invalid_model, "has negative dimension ", dim.dim_value());
          converted.value = dim.dim_value();
        } else if (dim.has_dim_param()) {
          converted.symbol = dim.dim_param();
        }
        info.shape.push_back(std::move(converted));
      }
      return info;
    });
  }

  Node convert_node(const onnx::NodeProto& proto, int index, int depth) {
    Node node;
    node.op_type = proto.op_type();
    node.name = proto.name().empty() ? str_cat(proto.op_type(), "_", index) : proto.name();
    node.domain = is_default_domain(proto.domain()) ? "" : proto.domain();
    return with_context(str_cat("node '", node.name, "' (", node.op_type, ")"), [&] {
      KILN_CHECK(!node.op_type.empty(), invalid_model, "has no op_type");
      node.inputs.assign(proto.input().begin(), proto.input().end());
      node.outputs.assign(proto.output().begin(), proto.output().end());
      for (const onnx::AttributeProto& attribute : proto.attribute()) {
        KILN_CHECK(!attribute.name().empty(), invalid_model, "has an attribute without a name");
        KILN_CHECK(!node.attributes.has(attribute.name()), invalid_model, "attribute '", attribute.name(),
                   "' is given twice");
        node.attributes.set(attribute.name(), with_context(str_cat("attribute '", attribute.name(), "'"), [&] {
                              return convert_attribute(attribute, depth);
                            }));
      }
      return node;
    });
  }

  Attribute convert_attribute(const onnx::AttributeProto& proto, int depth) {
    KILN_CHECK(proto.ref_attr_name().empty(), invalid_model, "refers to a function attribute ('",
               proto.ref_attr_name(), "') outside a function");
    Attribute attribute;
    switch (proto.type()) {
      case onnx::AttributeProto_AttributeType_FLOAT:
        attribute.type = Attribute::Type::f;
        attribute.f = proto.f();
        break;
      case onnx::AttributeProto_AttributeType_INT:
        attribute.type = Attribute::Type::i;
        attribute.i = proto.i();
        break;
      case onnx::AttributeProto_AttributeType_STRING:
        attribute.type = Attribute::Type::s;
        attribute.s = proto.s();
        break;
      case onnx::AttributeProto_AttributeType_TENSOR:
        attribute.type = Attribute::Type::t;
        attribute.t = tensor_from_proto(proto.t(), model_dir_);
        break;
      case onnx::AttributeProto_AttributeType_GRAPH:
        attribute.type = Attribute::Type::g;
        attribute.g = std::make_shared<const Graph>(convert_graph(proto.g(), depth + 1));
        break;
      case onnx::AttributeProto_AttributeType_FLOATS:
        attribute.type = Attribute::Type::floats;
        attribute.floats.assign(proto.floats().begin(), proto.floats().end());
        break;
      case onnx::AttributeProto_AttributeType_INTS:
        attribute.type = Attribute::Type::ints;
        attribute.ints.assign(proto.ints().begin(), proto.ints().end());
        break;
      case onnx::AttributeProto_AttributeType_STRINGS:
        attribute.type = Attribute::Type::strings;
        attribute.strings.assign(proto.strings().begin(), proto.strings().end());
        break;
      case onnx::AttributeProto_AttributeType_TENSORS:
        attribute.type = Attribute::Type::tensors;
        for (const onnx::TensorProto& tensor : proto.tensors()) {
          attribute.tensors.push_back(tensor_from_proto(tensor, model_dir_));
        }
        break;
      case onnx::AttributeProto_AttributeType_GRAPHS:
        attribute.type = Attribute::Type::graphs;
        for (const onnx::GraphProto& graph : proto.graphs()) {
          attribute.graphs.push_back(std::make_shared<const Graph>(convert_graph(graph, depth + 1)));
        }
        break;
      default:
        fail(ErrorKind::invalid_model, "has undefined or unsupported attribute type ", static_cast<int>(proto.type()));
    }
    return attribute;
  }

  fs::path model_dir_;
};

}  // namespace

Model parse_onnx_model(std::span<const uint8_t> bytes, const fs::path& model_dir) {
  KILN_CHECK(bytes.size() <= kMaxModelBytes, not_implemented, "models over 2 GiB must keep their weights in "
             "external data files");
  onnx::ModelProto proto;
  KILN_CHECK(proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), invalid_model,
             "not a valid ONNX model (protobuf parse failed: truncated or not a model file)");
  KILN_CHECK(proto.ir_version() > 0, invalid_model, "not an ONNX model (no ir_version)");
  KILN_CHECK(proto.has_graph(), invalid_model, "not an ONNX model (it has no graph)");
  KILN_CHECK(proto.opset_import_size() > 0, invalid_model, "the model imports no opset");

  Model model;
  model.ir_version = proto.ir_version();
  model.producer = str_cat(proto.producer_name(), proto.producer_version().empty() ? "" : " ",
                           proto.producer_version());
  for (const onnx::OperatorSetIdProto& opset : proto.opset_import()) {
    const std::string domain = is_default_domain(opset.domain()) ? "" : opset.domain();
    model.opsets[domain] = opset.version();
  }
  const int64_t opset = model.default_opset();
  KILN_CHECK(model.opsets.count("") == 0 || (opset >= kMinOpset && opset <= kMaxOpset), not_implemented,
             "the model uses ONNX opset ", opset, "; kiln supports opsets ", kMinOpset, " to ", kMaxOpset);
  model.graph = Importer(model_dir).convert_graph(proto.graph(), 0);
  return model;
}

Model load_onnx_model(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file.good()) {
    fail(ErrorKind::invalid_argument, "cannot open model file '", path.string(), "': ", std::strerror(errno));
  }
  KILN_CHECK(!fs::is_directory(path), invalid_argument, "model path '", path.string(), "' is a folder");
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  Model model = with_context(str_cat("'", path.string(), "'"), [&] {
    return parse_onnx_model(bytes, path.has_parent_path() ? path.parent_path() : fs::path("."));
  });
  model.path = path;
  return model;
}

}  // namespace kiln
