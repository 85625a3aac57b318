// ONNX ModelProto -> kiln Model. Every field read from the file is validated here or in
// tensor_proto.cpp before it is used; graph-level consistency (names, order, op semantics) is the
// planner's job.
#include "graph/onnx_import.h"

#include <onnx/onnx_pb.h>  // defines ONNX_API, then includes onnx-ml.pb.h

#include <limits>
#include <set>
#include <string>

#include "core/error.h"
#include "core/mapped_file.h"
#include "graph/onnx_wire.h"
#include "graph/tensor_proto.h"
#include "ops/op_spec.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Nested graphs (If/Loop bodies) deeper than this are rejected: real models nest a few levels, and
// unbounded recursion would let a file overflow the stack.
constexpr int kMaxGraphDepth = 32;

class Importer {
 public:
  // `raw_data` holds the main graph's initializer bytes split off the proto (empty when they were
  // not), kept alive by `owner` (null: they are copied); `map_files` maps external data files.
  Importer(fs::path model_dir, std::vector<std::optional<std::span<const uint8_t>>> raw_data,
           std::shared_ptr<const void> owner, bool map_files)
      : model_dir_(std::move(model_dir)),
        raw_data_(std::move(raw_data)),
        owner_(std::move(owner)),
        map_files_(map_files) {}

  // depth 0 is the main graph; subgraphs (attributes of If, Loop, Scan) are 1 and deeper.
  Graph convert_graph(const onnx::GraphProto& proto, int depth) {
    KILN_CHECK(depth <= kMaxGraphDepth, invalid_model, "graphs are nested more than ", kMaxGraphDepth,
               " levels deep");
    Graph graph;
    graph.name = proto.name();
    KILN_CHECK(proto.sparse_initializer_size() == 0, not_implemented,
               "sparse initializers are not supported ('", proto.sparse_initializer(0).values().name(), "')");
    for (int i = 0; i < proto.initializer_size(); ++i) {
      const onnx::TensorProto& initializer = proto.initializer(i);
      KILN_CHECK(!initializer.name().empty(), invalid_model, "initializer #", i, " has no name");
      const size_t index = static_cast<size_t>(i);
      const bool split = depth == 0 && index < raw_data_.size() && raw_data_[index].has_value();
      const RawBytes raw{split ? *raw_data_[index] : std::span<const uint8_t>(), owner_};
      Tensor tensor = tensor_from_proto_labeled(initializer, model_dir_,
                                                str_cat("initializer '", initializer.name(), "'"),
                                                {split ? &raw : nullptr, map_files_});
      KILN_CHECK(graph.initializers.emplace(initializer.name(), std::move(tensor)).second, invalid_model,
                 "initializer '", initializer.name(), "' is defined twice");
    }
    std::set<std::string> input_names;
    for (const onnx::ValueInfoProto& input : proto.input()) {
      KILN_CHECK(!input.name().empty(), invalid_model, "a graph input has no name");
      KILN_CHECK(input_names.insert(input.name()).second, invalid_model, "graph input '", input.name(),
                 "' is declared twice");
      // Older exporters (IR < 4) list every initializer as an input too; those are constants that
      // the caller does not feed.
      if (graph.initializers.count(input.name())) continue;
      graph.inputs.push_back(convert_value_info(input, "graph input", depth));
    }
    for (const onnx::ValueInfoProto& output : proto.output()) {
      KILN_CHECK(!output.name().empty(), invalid_model, "a graph output has no name");
      graph.outputs.push_back(convert_value_info(output, "graph output", depth));
    }
    for (const onnx::ValueInfoProto& info : proto.value_info()) {
      // value_info is only a hint for intermediate values: entries kiln cannot represent (sequences,
      // maps, unsupported element types) are skipped; the nodes that produce them are rejected by the
      // planner with a clearer message, if at all. Malformed entries (negative dims) still fail.
      if (!info.type().has_tensor_type() || !is_supported_elem_type(info.type().tensor_type().elem_type()))
        continue;
      graph.value_info.push_back(convert_value_info(info, "value_info", depth));
    }
    graph.nodes.reserve(static_cast<size_t>(proto.node_size()));
    for (int i = 0; i < proto.node_size(); ++i) graph.nodes.push_back(convert_node(proto.node(i), i, depth));
    return graph;
  }

 private:
  static bool is_supported_elem_type(int32_t code) {
    try {
      checked_dtype_from_onnx(code);
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  ValueInfo convert_value_info(const onnx::ValueInfoProto& proto, const char* role, int depth) {
    return with_context(str_cat(role, " '", proto.name(), "'"), [&] {
      ValueInfo info;
      info.name = proto.name();
      // Subgraph inputs and outputs (Loop bodies) may leave their type to inference.
      if (!proto.has_type() && depth > 0) return info;
      KILN_CHECK(proto.has_type(), invalid_model, "has no type");
      const onnx::TypeProto_Tensor& tensor_type = tensor_type_of(proto.type(), info.kind);
      if (depth == 0 || tensor_type.elem_type() != onnx::TensorProto_DataType_UNDEFINED) {
        info.dtype = checked_dtype_from_onnx(tensor_type.elem_type());
      }
      info.has_shape = tensor_type.has_shape();
      for (int i = 0; i < tensor_type.shape().dim_size(); ++i) {
        const onnx::TensorShapeProto_Dimension& dim = tensor_type.shape().dim(i);
        Dim converted;  // neither value nor symbol: unknown
        if (dim.has_dim_value()) {
          KILN_CHECK(dim.dim_value() >= 0, invalid_model, "has negative dimension ", dim.dim_value(),
                     " at axis ", i);
          converted.value = dim.dim_value();
        } else if (dim.has_dim_param()) {
          converted.symbol = dim.dim_param();
        }
        info.shape.push_back(std::move(converted));
      }
      return info;
    });
  }

  // The tensor type of a tensor, a sequence of tensors, or an optional of either; `kind` says which.
  static const onnx::TypeProto_Tensor& tensor_type_of(const onnx::TypeProto& type, ValueKind& kind) {
    if (type.has_tensor_type()) {
      kind = ValueKind::tensor;
      return type.tensor_type();
    }
    if (type.has_sequence_type() && type.sequence_type().elem_type().has_tensor_type()) {
      kind = ValueKind::sequence;
      return type.sequence_type().elem_type().tensor_type();
    }
    if (type.has_optional_type()) {
      ValueKind inner = ValueKind::tensor;
      const onnx::TypeProto_Tensor& tensor = tensor_type_of(type.optional_type().elem_type(), inner);
      KILN_CHECK(!is_optional(inner), invalid_model, "is an optional of an optional");
      kind = inner == ValueKind::sequence ? ValueKind::optional_sequence : ValueKind::optional_tensor;
      return tensor;
    }
    fail(ErrorKind::not_implemented, "is ", type_kind(type),
         ", not a tensor, a sequence of tensors or an optional of either; kiln supports only those");
  }

  static const char* type_kind(const onnx::TypeProto& type) {
    if (type.has_sequence_type()) return "a sequence of non-tensors";
    if (type.has_sequence_type()) return "a sequence";
    if (type.has_map_type()) return "a map";
    if (type.has_optional_type()) return "an optional";
    if (type.has_sparse_tensor_type()) return "a sparse tensor";
    if (type.has_opaque_type()) return "an opaque value";
    return "a value of unknown type";
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
        node.attributes.set(attribute.name(),
                            with_context(str_cat("attribute '", attribute.name(), "'"),
                                         [&] { return convert_attribute(attribute, depth); }));
      }
      return node;
    });
  }

  Attribute convert_attribute(const onnx::AttributeProto& proto, int depth) {
    KILN_CHECK(proto.ref_attr_name().empty(), invalid_model, "refers to function attribute '",
               proto.ref_attr_name(), "', which only a function body may do");
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
        attribute.t = tensor_from_proto_labeled(proto.t(), model_dir_, "",  // the context names the attribute
                                                {nullptr, map_files_});
        break;
      case onnx::AttributeProto_AttributeType_GRAPH:
        attribute.type = Attribute::Type::g;
        attribute.g = std::make_shared<const Graph>(convert_subgraph(proto.g(), depth));
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
        for (int i = 0; i < proto.tensors_size(); ++i) {
          attribute.tensors.push_back(tensor_from_proto_labeled(
              proto.tensors(i), model_dir_, str_cat("tensor #", i), {nullptr, map_files_}));
        }
        break;
      case onnx::AttributeProto_AttributeType_GRAPHS:
        attribute.type = Attribute::Type::graphs;
        for (int i = 0; i < proto.graphs_size(); ++i) {
          attribute.graphs.push_back(std::make_shared<const Graph>(
              with_context(str_cat("graph #", i), [&] { return convert_subgraph(proto.graphs(i), depth); })));
        }
        break;
      case onnx::AttributeProto_AttributeType_TYPE_PROTO: {
        attribute.type = Attribute::Type::type;
        ValueKind kind = ValueKind::tensor;
        const onnx::TypeProto_Tensor& tensor_type = tensor_type_of(proto.tp(), kind);
        KILN_CHECK(!is_optional(kind), not_implemented,
                   "names an optional type, kiln takes a tensor or sequence");
        attribute.value_type.sequence = kind == ValueKind::sequence;
        attribute.value_type.dtype = checked_dtype_from_onnx(tensor_type.elem_type());
        break;
      }
      case onnx::AttributeProto_AttributeType_SPARSE_TENSOR:
      case onnx::AttributeProto_AttributeType_SPARSE_TENSORS:
      case onnx::AttributeProto_AttributeType_TYPE_PROTOS:
        fail(ErrorKind::not_implemented, "has type ", onnx::AttributeProto_AttributeType_Name(proto.type()),
             ", which kiln does not support");
      default:
        // protobuf maps type codes it does not know to UNDEFINED as well.
        fail(ErrorKind::invalid_model, "has no valid type (",
             onnx::AttributeProto_AttributeType_Name(proto.type()), ")");
    }
    return attribute;
  }

  Graph convert_subgraph(const onnx::GraphProto& proto, int depth) {
    return with_context(str_cat("subgraph '", proto.name(), "'"),
                        [&] { return convert_graph(proto, depth + 1); });
  }

  fs::path model_dir_;
  std::vector<std::optional<std::span<const uint8_t>>> raw_data_;
  std::shared_ptr<const void> owner_;
  bool map_files_;
};

// `source` names the bytes in messages: "'model.onnx'" or "the model data". `owner` keeps `bytes`
// alive after the call (a MappedFile), so initializers may view them; null: they are copied.
Model parse_model(std::span<const uint8_t> bytes, const fs::path& model_dir, const std::string& source,
                  std::shared_ptr<const void> owner, bool map_files) {
  // The weights are split off before protobuf sees the model, so it parses only the rest.
  std::optional<SplitModel> split = split_initializer_data(bytes);
  const std::span<const uint8_t> parsed =
      split ? std::span(reinterpret_cast<const uint8_t*>(split->skeleton.data()), split->skeleton.size())
            : bytes;
  KILN_CHECK(
      parsed.size() <= static_cast<size_t>(std::numeric_limits<int>::max()), not_implemented, source,
      " is larger than 2 GiB, more than protobuf can parse (large weights belong in external data files)");
  onnx::ModelProto proto;
  KILN_CHECK(proto.ParseFromArray(parsed.data(), static_cast<int>(parsed.size())), invalid_model, source,
             " is not a valid ONNX model (protobuf parse failed)");
  // Any byte string that happens to parse (another message type, a few stray bytes) lacks these.
  KILN_CHECK(proto.has_graph(), invalid_model, source, " is not an ONNX model: it has no graph");
  KILN_CHECK(proto.ir_version() > 0, invalid_model, source, " is not an ONNX model: its ir_version is ",
             proto.ir_version());
  KILN_CHECK(proto.opset_import_size() > 0, invalid_model, source,
             " is not an ONNX model: it imports no opset");

  Model model;
  model.ir_version = proto.ir_version();
  model.producer =
      str_cat(proto.producer_name(), proto.producer_version().empty() ? "" : " ", proto.producer_version());
  for (const onnx::OperatorSetIdProto& opset : proto.opset_import()) {
    const std::string domain = is_default_domain(opset.domain()) ? "" : opset.domain();
    const auto [it, added] = model.opsets.emplace(domain, opset.version());
    KILN_CHECK(added || it->second == opset.version(), invalid_model, source, " imports opset domain '",
               opset.domain(), "' twice, as versions ", it->second, " and ", opset.version());
  }
  // Nodes of other domains are left to the planner, which rejects them as unknown ops.
  if (model.opsets.count("")) {
    const int64_t opset = model.default_opset();
    KILN_CHECK(opset >= kMinOpset && opset <= kMaxOpset, not_implemented, source, " uses ONNX opset ", opset,
               "; kiln supports opsets ", kMinOpset, " to ", kMaxOpset);
  }
  Importer importer(model_dir, split ? std::move(split->raw_data) : decltype(split->raw_data){},
                    std::move(owner), map_files);
  model.graph = with_context(source, [&] { return importer.convert_graph(proto.graph(), 0); });
  return model;
}

}  // namespace

Model parse_onnx_model(std::span<const uint8_t> bytes, const fs::path& model_dir) {
  return parse_model(bytes, model_dir, "the model data", nullptr, false);
}

Model load_onnx_model(const fs::path& path, bool map_files) {
  const fs::path folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const std::string source = str_cat("'", path.string(), "'");
  Model model;
  if (map_files) {
    std::shared_ptr<const MappedFile> file = MappedFile::open(path, "model file");
    const std::span<const uint8_t> bytes = file->bytes();
    model = parse_model(bytes, folder, source, std::move(file), true);
  } else {
    const std::string bytes = read_file_bytes(path, "model file");
    model = parse_model(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), folder,
                        source, nullptr, false);
  }
  model.path = path;
  return model;
}

}  // namespace kiln
