// ONNX import: models are built with protobuf's API, written to a temporary folder and loaded back;
// every malformed variant must become a kiln::Error of the right kind naming the right thing.
#include "graph/onnx_import.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "graph/graph.h"
#include "graph/onnx_wire.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kConformanceCase = "/usr/share/libonnx-testdata/data/node/test_conv_with_strides_padding";

// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kiln_onnx_import_XXXXXX").string();
    KILN_ASSERT(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  KILN_ASSERT(file.good());
}

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

struct CaughtError {
  bool thrown = false;
  ErrorKind kind = ErrorKind::runtime;
  std::string what;
};

CaughtError catch_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& error) {
    return {true, error.kind(), error.what()};
  }
  return {};
}

// Expects `fn` to throw kiln::Error of `kind` whose message contains every one of `parts`.
void expect_error(const std::function<void()>& fn, ErrorKind kind, const std::vector<std::string>& parts) {
  const CaughtError error = catch_error(fn);
  ASSERT_TRUE(error.thrown) << "expected an error mentioning " << (parts.empty() ? "" : parts[0]);
  EXPECT_EQ(error_kind_name(error.kind), error_kind_name(kind)) << error.what;
  for (const std::string& part : parts) EXPECT_NE(error.what.find(part), std::string::npos) << error.what;
}

onnx::ModelProto empty_model(int64_t opset = 13) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("kiln-test");
  model.set_producer_version("1.0");
  onnx::OperatorSetIdProto* default_opset = model.add_opset_import();
  default_opset->set_domain("");
  default_opset->set_version(opset);
  model.mutable_graph()->set_name("test");
  return model;
}

void set_tensor_type(onnx::ValueInfoProto* info, int32_t elem_type, const std::vector<std::string>& dims) {
  onnx::TypeProto_Tensor* tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(elem_type);
  onnx::TensorShapeProto* shape = tensor->mutable_shape();
  for (const std::string& dim : dims) {
    onnx::TensorShapeProto_Dimension* added = shape->add_dim();
    if (dim == "?") continue;  // neither value nor parameter
    if (!dim.empty() && (std::isdigit(static_cast<unsigned char>(dim[0])) || dim[0] == '-')) {
      added->set_dim_value(std::stoll(dim));
    } else {
      added->set_dim_param(dim);
    }
  }
}

onnx::ValueInfoProto* add_input(onnx::GraphProto* graph, const std::string& name,
                                const std::vector<std::string>& dims,
                                int32_t elem_type = onnx::TensorProto_DataType_FLOAT) {
  onnx::ValueInfoProto* input = graph->add_input();
  input->set_name(name);
  set_tensor_type(input, elem_type, dims);
  return input;
}

onnx::ValueInfoProto* add_output(onnx::GraphProto* graph, const std::string& name) {
  onnx::ValueInfoProto* output = graph->add_output();
  output->set_name(name);
  set_tensor_type(output, onnx::TensorProto_DataType_FLOAT, {});
  return output;
}

onnx::TensorProto* add_raw_initializer(onnx::GraphProto* graph, const std::string& name, int32_t data_type,
                                       const std::vector<int64_t>& dims, const std::string& raw) {
  onnx::TensorProto* tensor = graph->add_initializer();
  tensor->set_name(name);
  tensor->set_data_type(data_type);
  for (int64_t dim : dims) tensor->add_dims(dim);
  tensor->set_raw_data(raw);
  return tensor;
}

onnx::NodeProto* add_node(onnx::GraphProto* graph, const std::string& op_type, const std::string& name,
                          const std::vector<std::string>& inputs, const std::vector<std::string>& outputs) {
  onnx::NodeProto* node = graph->add_node();
  node->set_op_type(op_type);
  if (!name.empty()) node->set_name(name);
  for (const std::string& input : inputs) node->add_input(input);
  for (const std::string& output : outputs) node->add_output(output);
  return node;
}

onnx::AttributeProto* add_attribute(onnx::NodeProto* node, const std::string& name,
                                    onnx::AttributeProto_AttributeType type) {
  onnx::AttributeProto* attribute = node->add_attribute();
  attribute->set_name(name);
  attribute->set_type(type);
  return attribute;
}

// A model with one Relu; tests break one field of it at a time.
onnx::ModelProto relu_model(int64_t opset = 13) {
  onnx::ModelProto model = empty_model(opset);
  onnx::GraphProto* graph = model.mutable_graph();
  add_input(graph, "x", {"batch", "4"});
  add_output(graph, "y");
  add_node(graph, "Relu", "relu", {"x"}, {"y"});
  return model;
}

Model parse(const onnx::ModelProto& proto, const fs::path& model_dir = {}) {
  const std::string bytes = proto.SerializeAsString();
  return parse_onnx_model(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), model_dir);
}

// Writes `proto` as dir/model.onnx and loads it.
Model save_and_load(const onnx::ModelProto& proto, const fs::path& dir) {
  write_file(dir / "model.onnx", proto.SerializeAsString());
  return load_onnx_model(dir / "model.onnx");
}

// The model of RoundTrip: every initializer storage, every attribute type, symbolic dims.
onnx::ModelProto rich_model() {
  onnx::ModelProto model = empty_model(13);
  onnx::OperatorSetIdProto* custom = model.add_opset_import();
  custom->set_domain("com.example");
  custom->set_version(2);
  onnx::GraphProto* graph = model.mutable_graph();

  add_input(graph, "x", {"batch", "3", "?"});
  add_input(graph, "w", {"2", "3"});  // also an initializer: not a caller input
  add_output(graph, "y");
  onnx::ValueInfoProto* hint = graph->add_value_info();
  hint->set_name("t");
  set_tensor_type(hint, onnx::TensorProto_DataType_FLOAT, {"batch", "2"});
  onnx::ValueInfoProto* sequence_hint = graph->add_value_info();  // skipped: only a hint
  sequence_hint->set_name("s");
  sequence_hint->mutable_type()->mutable_sequence_type();

  add_raw_initializer(graph, "w", onnx::TensorProto_DataType_FLOAT, {2, 3},
                      bytes_of(std::vector<float>{1, 2, 3, 4, 5, 6.5f}));
  onnx::TensorProto* typed_float = graph->add_initializer();
  typed_float->set_name("b");
  typed_float->set_data_type(onnx::TensorProto_DataType_FLOAT);
  typed_float->add_dims(2);
  typed_float->add_float_data(-1.5f);
  typed_float->add_float_data(2.25f);
  onnx::TensorProto* typed_i64 = graph->add_initializer();
  typed_i64->set_name("shape");
  typed_i64->set_data_type(onnx::TensorProto_DataType_INT64);
  typed_i64->add_dims(3);
  for (int64_t value : {int64_t{-1}, int64_t{1} << 40, int64_t{7}}) typed_i64->add_int64_data(value);
  onnx::TensorProto* typed_i8 = graph->add_initializer();
  typed_i8->set_name("i8");
  typed_i8->set_data_type(onnx::TensorProto_DataType_INT8);
  typed_i8->add_dims(3);
  for (int32_t value : {-128, 0, 127}) typed_i8->add_int32_data(value);
  onnx::TensorProto* typed_f16 = graph->add_initializer();
  typed_f16->set_name("f16");
  typed_f16->set_data_type(onnx::TensorProto_DataType_FLOAT16);
  typed_f16->add_dims(2);
  typed_f16->add_int32_data(0x3C00);  // 1.0
  typed_f16->add_int32_data(0xC000);  // -2.0
  onnx::TensorProto* typed_bool = graph->add_initializer();
  typed_bool->set_name("flags");
  typed_bool->set_data_type(onnx::TensorProto_DataType_BOOL);
  typed_bool->add_dims(2);
  typed_bool->add_int32_data(1);
  typed_bool->add_int32_data(0);
  add_raw_initializer(graph, "raw_bool", onnx::TensorProto_DataType_BOOL, {3},
                      std::string("\x00\x01\x07", 3));
  onnx::TensorProto* typed_u32 = graph->add_initializer();
  typed_u32->set_name("u32");
  typed_u32->set_data_type(onnx::TensorProto_DataType_UINT32);
  typed_u32->add_uint64_data(4000000000u);  // a scalar: no dims
  onnx::TensorProto* typed_f64 = graph->add_initializer();
  typed_f64->set_name("f64");
  typed_f64->set_data_type(onnx::TensorProto_DataType_DOUBLE);
  typed_f64->add_dims(1);
  typed_f64->add_double_data(0.1);
  add_raw_initializer(graph, "empty", onnx::TensorProto_DataType_INT32, {0, 5}, "");

  onnx::NodeProto* gemm = add_node(graph, "Gemm", "", {"x", "w", "b"}, {"t"});
  gemm->set_domain("ai.onnx");
  add_attribute(gemm, "alpha", onnx::AttributeProto_AttributeType_FLOAT)->set_f(0.5f);
  add_attribute(gemm, "transB", onnx::AttributeProto_AttributeType_INT)->set_i(1);
  add_attribute(gemm, "mode", onnx::AttributeProto_AttributeType_STRING)->set_s("fast");
  onnx::TensorProto* value =
      add_attribute(gemm, "value", onnx::AttributeProto_AttributeType_TENSOR)->mutable_t();
  value->set_data_type(onnx::TensorProto_DataType_INT32);
  value->add_dims(2);
  value->add_int32_data(-3);
  value->add_int32_data(9);
  onnx::GraphProto* body = add_attribute(gemm, "body", onnx::AttributeProto_AttributeType_GRAPH)->mutable_g();
  body->set_name("body");
  add_input(body, "a", {"1"});
  onnx::ValueInfoProto* untyped = body->add_output();  // subgraph values may leave types to inference
  untyped->set_name("c");
  add_node(body, "Neg", "neg", {"a"}, {"c"});
  onnx::AttributeProto* floats = add_attribute(gemm, "scales", onnx::AttributeProto_AttributeType_FLOATS);
  floats->add_floats(1.5f);
  floats->add_floats(-2);
  onnx::AttributeProto* ints = add_attribute(gemm, "axes", onnx::AttributeProto_AttributeType_INTS);
  ints->add_ints(0);
  ints->add_ints(-1);
  ints->add_ints(int64_t{1} << 50);
  onnx::AttributeProto* strings = add_attribute(gemm, "names", onnx::AttributeProto_AttributeType_STRINGS);
  strings->add_strings("a");
  strings->add_strings("");
  onnx::AttributeProto* tensors = add_attribute(gemm, "tensors", onnx::AttributeProto_AttributeType_TENSORS);
  onnx::TensorProto* first = tensors->add_tensors();
  first->set_data_type(onnx::TensorProto_DataType_INT64);
  first->add_int64_data(42);
  onnx::AttributeProto* graphs = add_attribute(gemm, "branches", onnx::AttributeProto_AttributeType_GRAPHS);
  graphs->add_graphs()->set_name("g0");
  graphs->add_graphs()->set_name("g1");

  onnx::NodeProto* custom_node = add_node(graph, "MyOp", "mine", {"t"}, {"y"});
  custom_node->set_domain("com.example");
  return model;
}

TEST(OnnxImport, RoundTripsAValidModel) {
  TempDir dir;
  const Model model = save_and_load(rich_model(), dir.path());
  EXPECT_EQ(model.ir_version, 8);
  EXPECT_EQ(model.producer, "kiln-test 1.0");
  EXPECT_EQ(model.path, dir.path() / "model.onnx");
  EXPECT_EQ(model.default_opset(), 13);
  EXPECT_EQ(model.opsets.at("com.example"), 2);
  const Graph& graph = model.graph;
  EXPECT_EQ(graph.name, "test");

  ASSERT_EQ(graph.inputs.size(), 1u);  // "w" is an initializer
  const ValueInfo& x = graph.inputs[0];
  EXPECT_EQ(x.name, "x");
  EXPECT_EQ(x.dtype, DType::f32);
  EXPECT_TRUE(x.has_shape);
  ASSERT_EQ(x.shape.size(), 3u);
  EXPECT_FALSE(x.shape[0].is_known());
  EXPECT_EQ(x.shape[0].symbol, "batch");
  EXPECT_EQ(x.shape[1].value, 3);
  EXPECT_FALSE(x.shape[2].is_known());
  EXPECT_EQ(x.shape[2].symbol, "");
  EXPECT_EQ(dims_to_string(x.shape), "[batch, 3, ?]");
  ASSERT_EQ(graph.outputs.size(), 1u);
  EXPECT_EQ(graph.outputs[0].name, "y");
  EXPECT_TRUE(graph.outputs[0].has_shape);
  EXPECT_TRUE(graph.outputs[0].shape.empty());
  ASSERT_EQ(graph.value_info.size(), 1u);
  EXPECT_EQ(graph.value_info[0].name, "t");
  EXPECT_EQ(dims_to_string(graph.value_info[0].shape), "[batch, 2]");

  ASSERT_EQ(graph.initializers.size(), 10u);
  const Tensor& w = graph.initializers.at("w");
  EXPECT_EQ(w.dtype(), DType::f32);
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  EXPECT_EQ(std::vector<float>(w.values<float>().begin(), w.values<float>().end()),
            (std::vector<float>{1, 2, 3, 4, 5, 6.5f}));
  const Tensor& b = graph.initializers.at("b");
  EXPECT_EQ(std::vector<float>(b.values<float>().begin(), b.values<float>().end()),
            (std::vector<float>{-1.5f, 2.25f}));
  EXPECT_EQ(graph.initializers.at("shape").to_int64_vector(),
            (std::vector<int64_t>{-1, int64_t{1} << 40, 7}));
  const Tensor& i8 = graph.initializers.at("i8");
  EXPECT_EQ(i8.dtype(), DType::i8);
  EXPECT_EQ(i8.to_int64_vector(), (std::vector<int64_t>{-128, 0, 127}));
  const Tensor& f16 = graph.initializers.at("f16");
  EXPECT_EQ(f16.dtype(), DType::f16);
  EXPECT_EQ(float16_to_float(f16.data<Float16>()[0]), 1.0f);
  EXPECT_EQ(float16_to_float(f16.data<Float16>()[1]), -2.0f);
  const Tensor& flags = graph.initializers.at("flags");
  EXPECT_EQ(flags.dtype(), DType::boolean);
  EXPECT_EQ(flags.data<uint8_t>()[0], 1);
  EXPECT_EQ(flags.data<uint8_t>()[1], 0);
  const Tensor& raw_bool = graph.initializers.at("raw_bool");
  EXPECT_EQ(std::vector<uint8_t>(raw_bool.data<uint8_t>(), raw_bool.data<uint8_t>() + 3),
            (std::vector<uint8_t>{0, 1, 1}));  // any nonzero byte is true, stored as 1
  const Tensor& u32 = graph.initializers.at("u32");
  EXPECT_EQ(u32.dtype(), DType::u32);
  EXPECT_EQ(u32.rank(), 0);
  EXPECT_EQ(u32.data<uint32_t>()[0], 4000000000u);
  EXPECT_EQ(graph.initializers.at("f64").data<double>()[0], 0.1);
  EXPECT_EQ(graph.initializers.at("empty").shape(), (Shape{0, 5}));

  ASSERT_EQ(graph.nodes.size(), 2u);
  const Node& gemm = graph.nodes[0];
  EXPECT_EQ(gemm.name, "Gemm_0");  // unnamed nodes get <op_type>_<index>
  EXPECT_EQ(gemm.op_type, "Gemm");
  EXPECT_EQ(gemm.domain, "");  // "ai.onnx" is the default domain
  EXPECT_EQ(gemm.inputs, (std::vector<std::string>{"x", "w", "b"}));
  EXPECT_EQ(gemm.outputs, (std::vector<std::string>{"t"}));
  const Attributes& attributes = gemm.attributes;
  EXPECT_EQ(attributes.all().size(), 10u);
  EXPECT_EQ(attributes.get_float("alpha", 0), 0.5f);
  EXPECT_EQ(attributes.get_int("transB", 0), 1);
  EXPECT_EQ(attributes.get_string("mode", ""), "fast");
  const Tensor& value = attributes.require_tensor("value");
  EXPECT_EQ(value.dtype(), DType::i32);
  EXPECT_EQ(value.to_int64_vector(), (std::vector<int64_t>{-3, 9}));
  const Attribute* body = attributes.find("body");
  ASSERT_NE(body, nullptr);
  ASSERT_EQ(body->type, Attribute::Type::g);
  EXPECT_EQ(body->g->name, "body");
  ASSERT_EQ(body->g->nodes.size(), 1u);
  EXPECT_EQ(body->g->nodes[0].op_type, "Neg");
  ASSERT_EQ(body->g->outputs.size(), 1u);
  EXPECT_EQ(body->g->outputs[0].dtype, DType::undefined);
  EXPECT_EQ(attributes.get_floats("scales"), (std::vector<float>{1.5f, -2}));
  EXPECT_EQ(attributes.get_ints("axes"), (std::vector<int64_t>{0, -1, int64_t{1} << 50}));
  const Attribute* names = attributes.find("names");
  ASSERT_NE(names, nullptr);
  EXPECT_EQ(names->type, Attribute::Type::strings);
  EXPECT_EQ(names->strings, (std::vector<std::string>{"a", ""}));
  const Attribute* tensors = attributes.find("tensors");
  ASSERT_NE(tensors, nullptr);
  EXPECT_EQ(tensors->type, Attribute::Type::tensors);
  ASSERT_EQ(tensors->tensors.size(), 1u);
  EXPECT_EQ(tensors->tensors[0].rank(), 0);
  EXPECT_EQ(tensors->tensors[0].int_at(0), 42);
  const Attribute* branches = attributes.find("branches");
  ASSERT_NE(branches, nullptr);
  EXPECT_EQ(branches->type, Attribute::Type::graphs);
  ASSERT_EQ(branches->graphs.size(), 2u);
  EXPECT_EQ(branches->graphs[1]->name, "g1");

  const Node& mine = graph.nodes[1];
  EXPECT_EQ(mine.name, "mine");
  EXPECT_EQ(mine.domain, "com.example");
}

TEST(OnnxImport, ParsesFromMemoryAndFormatsDims) {
  const Model model = parse(relu_model());
  EXPECT_EQ(model.graph.nodes.size(), 1u);
  EXPECT_TRUE(model.path.empty());
  EXPECT_EQ(dims_to_string({}), "[]");
  EXPECT_EQ(dims_to_string({Dim{-1, "n"}, Dim{0, ""}, Dim{}}), "[n, 0, ?]");
  Model no_default;
  no_default.opsets["com.example"] = 1;
  EXPECT_EQ(no_default.default_opset(), 0);
}

TEST(OnnxImport, LoadsConformanceModelAndTensor) {
  if (!fs::exists(kConformanceCase)) GTEST_SKIP() << "libonnx-testdata is not installed";
  const Model model = load_onnx_model(kConformanceCase / "model.onnx");
  EXPECT_EQ(model.default_opset(), 11);
  const Graph& graph = model.graph;
  ASSERT_EQ(graph.inputs.size(), 2u);
  EXPECT_EQ(graph.inputs[1].name, "W");
  EXPECT_EQ(dims_to_string(graph.inputs[0].shape), "[1, 1, 7, 5]");
  ASSERT_EQ(graph.nodes.size(), 1u);
  const Node& conv = graph.nodes[0];
  EXPECT_EQ(conv.op_type, "Conv");
  EXPECT_EQ(conv.attributes.get_ints("strides"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(conv.attributes.get_ints("pads"), (std::vector<int64_t>{1, 1, 1, 1}));

  const Tensor x = load_tensor_file(kConformanceCase / "test_data_set_0" / "input_0.pb");
  EXPECT_EQ(x.dtype(), DType::f32);
  EXPECT_EQ(x.shape(), (Shape{1, 1, 7, 5}));
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(x.data<float>()[i], static_cast<float>(i));  // 0..34
}

TEST(OnnxImport, MissingFilesAreInvalidArguments) {
  TempDir dir;
  const fs::path missing = dir.path() / "missing.onnx";
  expect_error([&] { load_onnx_model(missing); }, ErrorKind::invalid_argument,
               {"cannot open model file '" + missing.string() + "'", std::strerror(ENOENT)});
  expect_error([&] { load_onnx_model(dir.path()); }, ErrorKind::invalid_argument, {"folder"});
  expect_error([&] { load_tensor_file(dir.path() / "input_0.pb"); }, ErrorKind::invalid_argument,
               {"cannot open tensor file", "input_0.pb"});
}

TEST(OnnxImport, RejectsTruncatedFiles) {
  TempDir dir;
  const std::string bytes = rich_model().SerializeAsString();
  const fs::path path = dir.path() / "model.onnx";
  for (size_t size : {bytes.size() / 2, bytes.size() - 1, size_t{1}}) {
    write_file(path, bytes.substr(0, size));
    expect_error([&] { load_onnx_model(path); }, ErrorKind::invalid_model, {"'" + path.string() + "'"});
  }
  write_file(path, "");
  expect_error([&] { load_onnx_model(path); }, ErrorKind::invalid_model, {"has no graph"});
  // Every prefix either loads or fails with kiln::Error; none may crash.
  for (size_t size = 0; size < bytes.size(); ++size) {
    const std::string prefix = bytes.substr(0, size);
    try {
      parse_onnx_model(std::span(reinterpret_cast<const uint8_t*>(prefix.data()), prefix.size()), {});
    } catch (const Error&) {
    }
  }
}

TEST(OnnxImport, RejectsRandomBytes) {
  std::mt19937 random(1234);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint8_t> bytes(static_cast<size_t>(1 + trial * 7));
    for (uint8_t& byte : bytes) byte = static_cast<uint8_t>(random());
    expect_error([&] { parse_onnx_model(bytes, {}); }, ErrorKind::invalid_model, {"the model data"});
  }
  TempDir dir;
  write_file(dir.path() / "junk.pb", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff");
  expect_error([&] { load_tensor_file(dir.path() / "junk.pb"); }, ErrorKind::invalid_model,
               {"junk.pb", "not a valid serialized ONNX TensorProto"});
}

TEST(OnnxImport, RejectsAProtobufThatIsNotAModel) {
  TempDir dir;
  onnx::TensorProto tensor;
  tensor.set_name("weights");
  tensor.set_data_type(onnx::TensorProto_DataType_FLOAT);
  tensor.add_dims(2);
  tensor.add_float_data(1);
  tensor.add_float_data(2);
  // Its name (field 8) does not parse as ModelProto's opset_import (also field 8)...
  write_file(dir.path() / "model.onnx", tensor.SerializeAsString());
  expect_error([&] { load_onnx_model(dir.path() / "model.onnx"); }, ErrorKind::invalid_model,
               {"model.onnx' is not a valid ONNX model"});
  // ...without it the bytes parse (dims land in ir_version, the rest in unknown fields), but no graph.
  tensor.clear_name();
  write_file(dir.path() / "model.onnx", tensor.SerializeAsString());
  expect_error([&] { load_onnx_model(dir.path() / "model.onnx"); }, ErrorKind::invalid_model,
               {"model.onnx' is not an ONNX model: it has no graph"});

  onnx::ModelProto no_ir = relu_model();
  no_ir.clear_ir_version();
  expect_error([&] { parse(no_ir); }, ErrorKind::invalid_model, {"ir_version"});
  onnx::ModelProto no_opset = relu_model();
  no_opset.clear_opset_import();
  expect_error([&] { parse(no_opset); }, ErrorKind::invalid_model, {"imports no opset"});
}

TEST(OnnxImport, ChecksOpsetRange) {
  for (int64_t opset : {6, 22}) {
    expect_error([&] { parse(relu_model(opset)); }, ErrorKind::not_implemented,
                 {"opset " + std::to_string(opset), "opsets 7 to 21"});
  }
  EXPECT_EQ(parse(relu_model(7)).default_opset(), 7);
  EXPECT_EQ(parse(relu_model(21)).default_opset(), 21);
  onnx::ModelProto named = relu_model();
  named.mutable_opset_import(0)->set_domain("ai.onnx");
  named.mutable_opset_import(0)->set_version(22);
  expect_error([&] { parse(named); }, ErrorKind::not_implemented, {"opset 22"});
  onnx::ModelProto conflicting = relu_model(13);
  onnx::OperatorSetIdProto* again = conflicting.add_opset_import();
  again->set_domain("ai.onnx");
  again->set_version(11);
  expect_error([&] { parse(conflicting); }, ErrorKind::invalid_model, {"twice"});
  // Other domains are recorded whatever their version; the planner rejects their nodes.
  onnx::ModelProto custom = relu_model(13);
  onnx::OperatorSetIdProto* ml = custom.add_opset_import();
  ml->set_domain("ai.onnx.ml");
  ml->set_version(3);
  EXPECT_EQ(parse(custom).opsets.at("ai.onnx.ml"), 3);
}

TEST(OnnxImport, RejectsBadInitializers) {
  auto with_initializer = [](const std::function<void(onnx::TensorProto*)>& edit) {
    onnx::ModelProto model = relu_model();
    onnx::TensorProto* tensor = model.mutable_graph()->add_initializer();
    tensor->set_name("w");
    tensor->set_data_type(onnx::TensorProto_DataType_FLOAT);
    tensor->add_dims(4);
    tensor->set_raw_data(bytes_of(std::vector<float>{1, 2, 3, 4}));
    edit(tensor);
    return model;
  };
  EXPECT_EQ(parse(with_initializer([](onnx::TensorProto*) {})).graph.initializers.at("w").numel(), 4);
  expect_error(
      [&] {
        parse(with_initializer([](onnx::TensorProto* t) {
          t->set_raw_data(bytes_of(std::vector<float>{1, 2, 3}));
        }));
      },
      ErrorKind::invalid_model, {"initializer 'w': has 12 bytes of data, expected 16 for shape [4] float32"});
  expect_error([&] { parse(with_initializer([](onnx::TensorProto* t) { t->set_dims(0, -4); })); },
               ErrorKind::invalid_model, {"initializer 'w'", "negative dimension -4"});
  expect_error(
      [&] {
        parse(with_initializer([](onnx::TensorProto* t) {
          t->set_dims(0, int64_t{1} << 40);
          t->add_dims(int64_t{1} << 40);
        }));
      },
      ErrorKind::invalid_model, {"initializer 'w'", "too many elements"});
  expect_error([&] { parse(with_initializer([](onnx::TensorProto* t) { t->set_data_type(99); })); },
               ErrorKind::not_implemented, {"initializer 'w'", "UNKNOWN (99)"});
  expect_error(
      [&] {
        parse(with_initializer(
            [](onnx::TensorProto* t) { t->set_data_type(onnx::TensorProto_DataType_STRING); }));
      },
      ErrorKind::not_implemented, {"initializer 'w'", "STRING (8)"});
  expect_error(
      [&] {
        parse(with_initializer(
            [](onnx::TensorProto* t) { t->set_data_type(onnx::TensorProto_DataType_COMPLEX64); }));
      },
      ErrorKind::not_implemented, {"initializer 'w'", "COMPLEX64"});
  expect_error([&] { parse(with_initializer([](onnx::TensorProto* t) { t->clear_data_type(); })); },
               ErrorKind::invalid_model, {"initializer 'w'", "no element type"});
  expect_error(
      [&] {
        parse(with_initializer([](onnx::TensorProto* t) {
          t->clear_raw_data();
          for (float value : {1.0f, 2.0f, 3.0f}) t->add_float_data(value);
        }));
      },
      ErrorKind::invalid_model, {"initializer 'w'", "3 values in float_data, expected 4"});
  expect_error(
      [&] {
        parse(with_initializer([](onnx::TensorProto* t) {
          t->clear_raw_data();
          t->set_data_type(onnx::TensorProto_DataType_INT8);
          for (int32_t value : {1, 2, 300, 4}) t->add_int32_data(value);
        }));
      },
      ErrorKind::invalid_model, {"initializer 'w'", "int32_data[2] = 300", "int8"});
  expect_error([&] { parse(with_initializer([](onnx::TensorProto* t) { t->set_name(""); })); },
               ErrorKind::invalid_model, {"initializer #0 has no name"});
  onnx::ModelProto twice = with_initializer([](onnx::TensorProto*) {});
  *twice.mutable_graph()->add_initializer() = twice.graph().initializer(0);
  expect_error([&] { parse(twice); }, ErrorKind::invalid_model, {"'w' is defined twice"});
  onnx::ModelProto sparse = relu_model();
  sparse.mutable_graph()->add_sparse_initializer()->mutable_values()->set_name("s");
  expect_error([&] { parse(sparse); }, ErrorKind::not_implemented, {"sparse", "'s'"});
}

TEST(OnnxImport, RejectsBadValueInfos) {
  onnx::ModelProto negative = relu_model();
  negative.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->set_dim_value(-2);
  expect_error([&] { parse(negative); }, ErrorKind::invalid_model,
               {"graph input 'x'", "negative dimension -2"});
  onnx::ModelProto sequence = relu_model();
  sequence.mutable_graph()->mutable_input(0)->mutable_type()->mutable_sequence_type();
  expect_error([&] { parse(sequence); }, ErrorKind::not_implemented, {"graph input 'x'", "sequence"});
  onnx::ModelProto strings = relu_model();
  strings.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto_DataType_STRING);
  expect_error([&] { parse(strings); }, ErrorKind::not_implemented, {"graph output 'y'", "STRING"});
  onnx::ModelProto untyped = relu_model();
  untyped.mutable_graph()->mutable_input(0)->clear_type();
  expect_error([&] { parse(untyped); }, ErrorKind::invalid_model, {"graph input 'x'", "no type"});
}

TEST(OnnxImport, RejectsBadAttributes) {
  auto with_attribute = [](const std::function<void(onnx::AttributeProto*)>& edit) {
    onnx::ModelProto model = relu_model();
    onnx::AttributeProto* attribute = model.mutable_graph()->mutable_node(0)->add_attribute();
    attribute->set_name("alpha");
    attribute->set_type(onnx::AttributeProto_AttributeType_FLOAT);
    edit(attribute);
    return model;
  };
  EXPECT_TRUE(parse(with_attribute([](onnx::AttributeProto*) {})).graph.nodes[0].attributes.has("alpha"));
  expect_error([&] { parse(with_attribute([](onnx::AttributeProto* a) { a->clear_type(); })); },
               ErrorKind::invalid_model, {"node 'relu' (Relu): attribute 'alpha'", "no valid type"});
  expect_error([&] { parse(with_attribute([](onnx::AttributeProto* a) { a->set_ref_attr_name("outer"); })); },
               ErrorKind::invalid_model, {"node 'relu'", "attribute 'alpha'", "'outer'"});
  expect_error(
      [&] {
        parse(with_attribute(
            [](onnx::AttributeProto* a) { a->set_type(onnx::AttributeProto_AttributeType_SPARSE_TENSOR); }));
      },
      ErrorKind::not_implemented, {"attribute 'alpha'", "SPARSE_TENSOR"});
  expect_error(
      [&] {
        parse(with_attribute([](onnx::AttributeProto* a) {
          a->set_type(onnx::AttributeProto_AttributeType_TENSOR);
          a->mutable_t()->set_data_type(onnx::TensorProto_DataType_FLOAT);
          a->mutable_t()->add_dims(2);
          a->mutable_t()->add_float_data(1);
        }));
      },
      ErrorKind::invalid_model,
      {"node 'relu' (Relu): attribute 'alpha': has 1 values in float_data, expected 2"});
  onnx::ModelProto twice = with_attribute([](onnx::AttributeProto*) {});
  *twice.mutable_graph()->mutable_node(0)->add_attribute() = twice.graph().node(0).attribute(0);
  expect_error([&] { parse(twice); }, ErrorKind::invalid_model, {"node 'relu'", "'alpha' is given twice"});
  onnx::ModelProto no_op = relu_model();
  no_op.mutable_graph()->mutable_node(0)->clear_op_type();
  expect_error([&] { parse(no_op); }, ErrorKind::invalid_model, {"has no op_type"});
}

// A chain of If nodes, each holding the next graph in its then_branch.
onnx::ModelProto nested_model(int depth) {
  onnx::ModelProto model = relu_model();
  onnx::GraphProto* graph = model.mutable_graph();
  for (int level = 0; level < depth; ++level) {
    onnx::NodeProto* node = add_node(graph, "If", "if" + std::to_string(level), {"x"}, {"z"});
    graph = add_attribute(node, "then_branch", onnx::AttributeProto_AttributeType_GRAPH)->mutable_g();
    graph->set_name("level" + std::to_string(level + 1));
  }
  add_node(graph, "Bad", "innermost", {}, {})->add_attribute()->set_name("broken");  // no type
  return model;
}

TEST(OnnxImport, ReportsErrorsInsideSubgraphsAndLimitsNesting) {
  expect_error([&] { parse(nested_model(2)); }, ErrorKind::invalid_model,
               {"node 'if0' (If): attribute 'then_branch': subgraph 'level1': node 'if1' (If)",
                "node 'innermost' (Bad): attribute 'broken'"});
  // Too deep either for protobuf's recursion limit or for kiln's: an error, not a stack overflow.
  expect_error([&] { parse(nested_model(40)); }, ErrorKind::invalid_model, {});
  expect_error([&] { parse(nested_model(1000)); }, ErrorKind::invalid_model, {});
}

// Writes a model whose initializer "w" (float32 [2, 2]) lives in an external file.
class ExternalData : public ::testing::Test {
 protected:
  onnx::ModelProto model_with(const std::string& location, const std::string& offset = "",
                              const std::string& length = "") {
    onnx::ModelProto model = relu_model();
    onnx::TensorProto* tensor = model.mutable_graph()->add_initializer();
    tensor->set_name("w");
    tensor->set_data_type(onnx::TensorProto_DataType_FLOAT);
    tensor->add_dims(2);
    tensor->add_dims(2);
    tensor->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
    auto add_entry = [&](const std::string& key, const std::string& value) {
      if (value.empty()) return;
      onnx::StringStringEntryProto* entry = tensor->add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    };
    add_entry("location", location);
    add_entry("offset", offset);
    add_entry("length", length);
    return model;
  }

  fs::path model_dir() const { return dir_.path() / "model"; }

  void SetUp() override {
    fs::create_directories(model_dir() / "data");
    // 8 bytes of padding, then the four floats.
    write_file(model_dir() / "weights.bin",
               std::string(8, '\x7f') + bytes_of(std::vector<float>{1, -2, 3.5f, 4}));
    write_file(model_dir() / "data" / "w.bin", bytes_of(std::vector<float>{5, 6, 7, 8}));
    write_file(dir_.path() / "secret.bin", bytes_of(std::vector<float>{9, 9, 9, 9}));
  }

  TempDir dir_;
};

TEST_F(ExternalData, LoadsFromFilesInsideTheModelFolder) {
  const Model model = save_and_load(model_with("weights.bin", "8", "16"), model_dir());
  const Tensor& w = model.graph.initializers.at("w");
  EXPECT_EQ(w.shape(), (Shape{2, 2}));
  EXPECT_EQ(std::vector<float>(w.values<float>().begin(), w.values<float>().end()),
            (std::vector<float>{1, -2, 3.5f, 4}));
  const Model nested = save_and_load(model_with("data/w.bin"), model_dir());
  const Tensor& w2 = nested.graph.initializers.at("w");
  EXPECT_EQ(std::vector<float>(w2.values<float>().begin(), w2.values<float>().end()),
            (std::vector<float>{5, 6, 7, 8}));
  // ".." that stays inside the folder is fine.
  EXPECT_EQ(save_and_load(model_with("data/../data/w.bin"), model_dir()).graph.initializers.at("w").numel(),
            4);
}

TEST_F(ExternalData, RejectsPathsOutsideTheModelFolder) {
  expect_error([&] { save_and_load(model_with("../secret.bin"), model_dir()); }, ErrorKind::invalid_model,
               {"initializer 'w'", "'../secret.bin'", "escapes the model's folder"});
  expect_error([&] { save_and_load(model_with("data/../../secret.bin"), model_dir()); },
               ErrorKind::invalid_model, {"initializer 'w'", "escapes"});
  const std::string absolute = (dir_.path() / "secret.bin").string();
  expect_error([&] { save_and_load(model_with(absolute), model_dir()); }, ErrorKind::invalid_model,
               {"initializer 'w'", "'" + absolute + "'", "absolute"});
  fs::create_symlink(dir_.path() / "secret.bin", model_dir() / "link.bin");
  expect_error([&] { save_and_load(model_with("link.bin"), model_dir()); }, ErrorKind::invalid_model,
               {"initializer 'w'", "'link.bin'", "escapes"});
  fs::create_directory_symlink(dir_.path(), model_dir() / "up");
  expect_error([&] { save_and_load(model_with("up/secret.bin"), model_dir()); }, ErrorKind::invalid_model,
               {"initializer 'w'", "escapes"});
  expect_error([&] { save_and_load(model_with("."), model_dir()); }, ErrorKind::invalid_model,
               {"initializer 'w'"});
  expect_error([&] { save_and_load(model_with("data"), model_dir()); }, ErrorKind::invalid_model,
               {"initializer 'w'", "not a regular file"});
}

TEST_F(ExternalData, ChecksOffsetsLengthsAndFiles) {
  expect_error([&] { save_and_load(model_with("weights.bin", "100"), model_dir()); },
               ErrorKind::invalid_model,
               {"initializer 'w'", "'weights.bin' has 24 bytes, too few for 16 bytes at offset 100"});
  expect_error([&] { save_and_load(model_with("weights.bin", "9"), model_dir()); }, ErrorKind::invalid_model,
               {"initializer 'w'", "offset 9"});
  expect_error([&] { save_and_load(model_with("weights.bin", "8", "12"), model_dir()); },
               ErrorKind::invalid_model, {"initializer 'w'", "length 12, expected 16 bytes"});
  for (const std::string offset : {"-5", "abc", "8 ", "99999999999999999999"}) {
    expect_error([&] { save_and_load(model_with("weights.bin", offset), model_dir()); },
                 ErrorKind::invalid_model, {"initializer 'w'", "offset '" + offset + "'"});
  }
  expect_error([&] { save_and_load(model_with("missing.bin"), model_dir()); }, ErrorKind::invalid_model,
               {"initializer 'w'", "'missing.bin' does not exist"});
  expect_error([&] { save_and_load(model_with(""), model_dir()); }, ErrorKind::invalid_model,
               {"initializer 'w'", "no location"});
  expect_error([&] { parse(model_with("weights.bin", "8")); }, ErrorKind::invalid_model,
               {"initializer 'w'", "not loaded from a file"});
}

// A model with raw, typed and boolean initializers of several element sizes, and a subgraph whose
// initializer keeps its raw_data (only the main graph's are split off).
onnx::ModelProto weights_model() {
  onnx::ModelProto model = relu_model();
  onnx::GraphProto* graph = model.mutable_graph();
  const auto add_raw = [&](const std::string& name, int32_t type, const std::string& bytes, int64_t count) {
    onnx::TensorProto* tensor = graph->add_initializer();
    tensor->set_name(name);
    tensor->set_data_type(type);
    tensor->add_dims(count);
    tensor->set_raw_data(bytes);
  };
  std::vector<float> floats(1000);
  for (size_t i = 0; i < floats.size(); ++i) floats[i] = static_cast<float>(i) * 0.25f - 7;
  add_raw("f0", onnx::TensorProto_DataType_FLOAT, bytes_of(floats), 1000);
  add_raw("i8", onnx::TensorProto_DataType_INT8, std::string("\x01\xff\x7f"), 3);
  add_raw("f1", onnx::TensorProto_DataType_FLOAT, bytes_of(std::vector<float>{1, 2, 3}), 3);
  add_raw("b", onnx::TensorProto_DataType_BOOL, std::string("\x00\x05", 2), 2);
  add_raw("i64", onnx::TensorProto_DataType_INT64, bytes_of(std::vector<int64_t>{-3, 1LL << 40}), 2);
  onnx::TensorProto* typed = graph->add_initializer();
  typed->set_name("typed");
  typed->set_data_type(onnx::TensorProto_DataType_FLOAT);
  typed->add_dims(2);
  typed->add_float_data(0.5f);
  typed->add_float_data(-1.5f);
  onnx::NodeProto* branch = graph->add_node();
  branch->set_op_type("If");
  branch->set_name("if");
  branch->add_input("cond");
  branch->add_output("z");
  onnx::AttributeProto* then_branch = branch->add_attribute();
  then_branch->set_name("then_branch");
  then_branch->set_type(onnx::AttributeProto_AttributeType_GRAPH);
  onnx::TensorProto* inner = then_branch->mutable_g()->add_initializer();
  inner->set_name("inner");
  inner->set_data_type(onnx::TensorProto_DataType_FLOAT);
  inner->add_dims(1);
  inner->set_raw_data(bytes_of(std::vector<float>{42}));
  return model;
}

TEST(OnnxWire, SplitsOffTheMainGraphsRawDataAndKeepsEverythingElse) {
  const onnx::ModelProto original = weights_model();
  const std::string bytes = original.SerializeAsString();
  const std::span<const uint8_t> span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  const std::optional<SplitModel> split = split_initializer_data(span);
  ASSERT_TRUE(split.has_value());
  onnx::ModelProto skeleton;
  ASSERT_TRUE(skeleton.ParseFromString(split->skeleton));
  const onnx::GraphProto& graph = skeleton.graph();
  ASSERT_EQ(graph.initializer_size(), original.graph().initializer_size());
  ASSERT_EQ(split->raw_data.size(), static_cast<size_t>(graph.initializer_size()));
  for (int i = 0; i < graph.initializer_size(); ++i) {
    const onnx::TensorProto& before = original.graph().initializer(i);
    EXPECT_FALSE(graph.initializer(i).has_raw_data()) << before.name();
    // Everything but raw_data is unchanged.
    onnx::TensorProto without = before;
    without.clear_raw_data();
    EXPECT_EQ(graph.initializer(i).SerializeAsString(), without.SerializeAsString()) << before.name();
    ASSERT_EQ(split->raw_data[static_cast<size_t>(i)].has_value(), before.has_raw_data()) << before.name();
    if (!before.has_raw_data()) continue;
    const std::span<const uint8_t> raw = *split->raw_data[static_cast<size_t>(i)];
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(raw.data()), raw.size()), before.raw_data());
    // The bytes are where they lie in the input, not a copy.
    EXPECT_TRUE(raw.data() >= span.data() && raw.data() + raw.size() <= span.data() + span.size());
  }
  // Nested graphs keep their initializers' bytes; the rest of the model is unchanged.
  EXPECT_EQ(graph.node(1).attribute(0).g().initializer(0).raw_data(), bytes_of(std::vector<float>{42}));
  EXPECT_EQ(graph.node_size(), original.graph().node_size());
  EXPECT_EQ(skeleton.producer_name(), "kiln-test");
  // Malformed bytes are left to protobuf's parse (and its error).
  EXPECT_FALSE(split_initializer_data(span.first(span.size() - 3)).has_value());
  const std::string garbage = "\x0f\x01\x02";  // wire type 7 does not exist
  EXPECT_FALSE(split_initializer_data(std::span(reinterpret_cast<const uint8_t*>(garbage.data()), 3)));
}

TEST(OnnxImport, MappedAndReadLoadsGiveTheSameInitializersAndMappedOnesAreViewsWhenAligned) {
  TempDir dir;
  const std::string bytes = weights_model().SerializeAsString();
  write_file(dir.path() / "model.onnx", bytes);
  const Model mapped = load_onnx_model(dir.path() / "model.onnx", true);
  const Model read = load_onnx_model(dir.path() / "model.onnx", false);
  const std::optional<SplitModel> split =
      split_initializer_data(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  ASSERT_TRUE(split.has_value());
  const std::vector<std::string> names = {"f0", "i8", "f1", "b", "i64", "typed"};
  for (size_t i = 0; i < names.size(); ++i) {
    const Tensor& a = mapped.graph.initializers.at(names[i]);
    const Tensor& b = read.graph.initializers.at(names[i]);
    ASSERT_EQ(a.dtype(), b.dtype()) << names[i];
    ASSERT_EQ(a.shape(), b.shape()) << names[i];
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << names[i];
    EXPECT_FALSE(is_mapped(b.raw_data(), b.nbytes())) << names[i];
    // A view where the file's offset suits the element type; bools (normalized) and typed data
    // are always copies.
    bool view = false;
    if (split->raw_data[i] && names[i] != "b") {
      const auto offset =
          static_cast<size_t>(split->raw_data[i]->data() - reinterpret_cast<const uint8_t*>(bytes.data()));
      view = offset % dtype_size(a.dtype()) == 0;
    }
    EXPECT_EQ(is_mapped(a.raw_data(), a.nbytes()), view) << names[i];
  }
  EXPECT_EQ(static_cast<const uint8_t*>(mapped.graph.initializers.at("b").raw_data())[1], 1);
  EXPECT_EQ(mapped.graph.initializers.at("i8").values<int8_t>()[1], -1);
  // Releasing a view's pages loses nothing: they are read back from the file.
  const Tensor& f0 = mapped.graph.initializers.at("f0");
  release_mapped_pages(f0.raw_data(), f0.nbytes());
  EXPECT_EQ(std::memcmp(f0.raw_data(), read.graph.initializers.at("f0").raw_data(), f0.nbytes()), 0);
}

TEST(OnnxImport, AFileLoadedTwiceSharesOneMapping) {
  TempDir dir;
  write_file(dir.path() / "model.onnx", weights_model().SerializeAsString());
  const std::shared_ptr<const MappedFile> first = MappedFile::open(dir.path() / "model.onnx", "model file");
  const std::shared_ptr<const MappedFile> second = MappedFile::open(dir.path() / "model.onnx", "model file");
  EXPECT_EQ(first.get(), second.get());
  // Only ranges inside the mapping count as mapped: memory past its end (the heap, another
  // mapping) is never released.
  const std::span<const uint8_t> bytes = first->bytes();
  EXPECT_TRUE(is_mapped(bytes.data(), bytes.size()));
  EXPECT_FALSE(is_mapped(bytes.data() + bytes.size() - 1, 2));
  EXPECT_FALSE(is_mapped(bytes.data() + bytes.size() + (1 << 20), 16));
  EXPECT_FALSE(is_mapped(bytes.data() - 16, 32));
  std::vector<float> heap(1 << 16, 3.0f);
  EXPECT_FALSE(is_mapped(heap.data(), heap.size() * sizeof(float)));
  release_mapped_pages(heap.data(), heap.size() * sizeof(float));
  EXPECT_EQ(heap[heap.size() / 2], 3.0f);
  expect_error([&] { MappedFile::open(dir.path() / "missing.onnx", "model file"); },
               ErrorKind::invalid_argument, {"cannot open model file", "missing.onnx"});
  expect_error([&] { MappedFile::open(dir.path(), "model file"); }, ErrorKind::invalid_argument,
               {"it is a folder"});
}

}  // namespace
}  // namespace kiln
