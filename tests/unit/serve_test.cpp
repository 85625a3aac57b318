// kiln serve's pieces without a network: config.pbtxt parsing and completion (and its JSON form), the
// inference request codecs (JSON and binary tensors over HTTP, protobuf messages over gRPC), the
// repository extension's bodies, and the dynamic batcher's merging, splitting and refusals.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "graph/session.h"
#include "graph_builder.h"
#include "serve/batcher.h"
#include "serve/control_codec.h"
#include "serve/grpc_codec.h"
#include "serve/infer_codec.h"
#include "serve/model_config.h"

namespace kiln::serve {
namespace {

using ::kiln::testing::GraphBuilder;
using ::kiln::testing::random_tensor;

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(ModelConfig, ReadsTritonsSubsetInEveryTextFormSpelling) {
  const ModelConfig config = parse_model_config(R"(
    name: "m"  platform: "onnxruntime_onnx"   # accepted, not acted on
    max_batch_size: 8
    input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, -1 ] } ]
    output { name: "y", data_type: TYPE_FP16, dims: 3 dims: 4 };
    dynamic_batching { max_queue_delay_microseconds: 2000 preferred_batch_size: [ 4, 8 ]
      default_queue_policy { max_queue_size: 16 default_timeout_microseconds: 100 } }
    instance_group [ { count: 2 kind: KIND_CPU }, { count: 1 } ]
    version_policy: { specific { versions: [1, 3] } }
    parameters { key: "threads" value: { string_value: "1" } }
    parameters: < key: 'conv_algorithm' value { string_value: "direct" } >
  )",
                                                "config.pbtxt");
  EXPECT_EQ(config.name, "m");
  EXPECT_EQ(config.max_batch_size, 8);
  ASSERT_EQ(config.inputs.size(), 1u);
  EXPECT_EQ(config.inputs[0].dtype, DType::f32);
  EXPECT_EQ(config.inputs[0].dims, (std::vector<int64_t>{3, -1}));
  EXPECT_EQ(config.outputs[0].dtype, DType::f16);
  EXPECT_EQ(config.outputs[0].dims, (std::vector<int64_t>{3, 4}));
  EXPECT_TRUE(config.dynamic_batching);
  EXPECT_EQ(config.max_queue_delay_us, 2000);
  EXPECT_EQ(config.preferred_batch_sizes, (std::vector<int>{4, 8}));
  EXPECT_EQ(config.max_queue_size, 16);
  EXPECT_EQ(config.default_timeout_us, 100);
  EXPECT_EQ(config.instance_count, 3);  // groups add up
  EXPECT_EQ(config.version_policy.kind, VersionPolicy::Kind::specific);
  EXPECT_EQ(config.version_policy.versions, (std::vector<int64_t>{1, 3}));
  ASSERT_EQ(config.parameters.size(), 2u);
  EXPECT_EQ(config.parameters[1], (std::pair<std::string, std::string>{"conv_algorithm", "direct"}));
  EXPECT_EQ(config.ignored_fields, (std::vector<std::string>{"platform"}));
}

TEST(ModelConfig, ErrorsNameTheLineAndTheField) {
  EXPECT_NE(error_of([] {
              parse_model_config("name: \"m\"\nmax_batch: 4\n", "c.pbtxt");
            }).find("c.pbtxt:2: unknown field 'max_batch'"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { parse_model_config("max_batch_size: \"4\"", "c.pbtxt"); }).find("expects an integer"),
      std::string::npos);
  EXPECT_NE(error_of([] { parse_model_config("max_batch_size: -2", "c.pbtxt"); }).find("must be in [0, "),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_model_config("input [ { name: \"x\" data_type: TYPE_STRING } ]", "c.pbtxt");
            }).find("TYPE_STRING is not one kiln serves"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_model_config("dynamic_batching {", "c.pbtxt"); }).find("missing '}'"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { parse_model_config("name: \"unterminated", "c.pbtxt"); }).find("unterminated string"),
      std::string::npos);
  EXPECT_NE(error_of([] { parse_model_config(std::string(100, '{'), "c.pbtxt"); }), "");
  EXPECT_NE(error_of([] { parse_model_config(std::string(200, 'a') + std::string(200, '{'), "c.pbtxt"); }),
            "");
}

std::vector<ValueInfo> values(const std::string& name, DType dtype, std::vector<Dim> dims) {
  return {ValueInfo{name, dtype, true, std::move(dims)}};
}

TEST(ModelConfig, ItsJsonFormReadsAsTheTextFormDoes) {
  // As Triton's clients send it in a load request: protobuf's JSON, int64 as strings, camelCase or not.
  const ModelConfig config = parse_model_config_json(R"({
    "name": "m", "maxBatchSize": 8, "platform": "onnxruntime_onnx",
    "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": ["3", -1]}],
    "dynamic_batching": {"max_queue_delay_microseconds": "2000", "preferredBatchSize": [4, 8]},
    "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
    "parameters": {"threads": {"string_value": "1"}}})",
                                                     "the load request's config");
  EXPECT_EQ(config.name, "m");
  EXPECT_EQ(config.max_batch_size, 8);
  ASSERT_EQ(config.inputs.size(), 1u);
  EXPECT_EQ(config.inputs[0].dtype, DType::f32);
  EXPECT_EQ(config.inputs[0].dims, (std::vector<int64_t>{3, -1}));
  EXPECT_TRUE(config.dynamic_batching);
  EXPECT_EQ(config.max_queue_delay_us, 2000);
  EXPECT_EQ(config.preferred_batch_sizes, (std::vector<int>{4, 8}));
  EXPECT_EQ(config.instance_count, 2);
  ASSERT_EQ(config.parameters.size(), 1u);
  EXPECT_EQ(config.parameters[0], (std::pair<std::string, std::string>{"threads", "1"}));
  EXPECT_EQ(config.ignored_fields, (std::vector<std::string>{"platform"}));

  auto error = [](const std::string& json) {
    return error_of([&] { parse_model_config_json(json, "the load request's config"); });
  };
  EXPECT_EQ(error(R"({"max_batch_size": 5000})"),
            "the load request's config: 'max_batch_size' must be in [0, 1024], got 5000");
  EXPECT_NE(error(R"({"colour": 1})").find("unknown field 'colour'"), std::string::npos);
  EXPECT_NE(error("{").find("the load request's config: not JSON"), std::string::npos);
  EXPECT_NE(error("[1]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(error(R"({"input": [{"dims": null}]})").find("null"), std::string::npos);
}

TEST(RepositoryCodec, BodiesAreCheckedAndMayBeEmpty) {
  EXPECT_FALSE(parse_index_request(""));
  EXPECT_TRUE(parse_index_request(R"({"ready": true})"));
  EXPECT_FALSE(parse_load_request("{}"));
  EXPECT_EQ(parse_load_request(R"({"parameters": {"config": "{\"max_batch_size\": 2}"}})"),
            std::optional<std::string>(R"({"max_batch_size": 2})"));
  EXPECT_NO_THROW(parse_unload_request(" "));
  EXPECT_NE(error_of([] { parse_index_request(R"({"ready": 1})"); }).find("true or false"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_index_request("{]"); }).find("index request body is not JSON"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { parse_load_request(R"({"parameters": {"config": {}}})"); }).find("must be a string"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              parse_load_request(R"({"parameters": {"file:1/model.onnx": "AAAA"}})");
            }).find("model files come from the repository"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_unload_request(R"({"parameters": {"unload_dependents": true}})");
            }).find("\"unload_dependents\" is not one kiln takes"),
            std::string::npos);
}

TEST(GrpcCodec, TypedContentsInEveryDatatypeAndRawBytes) {
  inference::ModelInferRequest message;
  message.set_id("g1");
  (*message.mutable_parameters())["timeout"].set_int64_param(2500);
  auto add = [&](const std::string& name, const std::string& datatype, std::vector<int64_t> shape) {
    auto* input = message.add_inputs();
    input->set_name(name);
    input->set_datatype(datatype);
    for (int64_t dim : shape) input->add_shape(dim);
    return input->mutable_contents();
  };
  auto* f = add("f", "FP32", {2, 2});
  for (float value : {1.5f, -2.0f, NAN, -INFINITY}) f->add_fp32_contents(value);
  add("d", "FP64", {1})->add_fp64_contents(0.1);
  auto* i8 = add("i8", "INT8", {2});
  i8->add_int_contents(-128);
  i8->add_int_contents(127);
  add("u16", "UINT16", {1})->add_uint_contents(65535);
  add("u64", "UINT64", {1})->add_uint64_contents(UINT64_MAX);
  add("i64", "INT64", {1})->add_int64_contents(INT64_MIN);
  auto* ok = add("ok", "BOOL", {2});
  ok->add_bool_contents(true);
  ok->add_bool_contents(false);
  message.add_outputs()->set_name("f");
  GrpcInferRequest decoded = decode_grpc_infer_request(message);
  const InferRequest& request = decoded.request;
  EXPECT_TRUE(decoded.typed_contents);
  EXPECT_EQ(request.id, "g1");
  EXPECT_EQ(request.timeout_us, 2500);
  ASSERT_EQ(request.inputs.size(), 7u);
  const Tensor& tensor = request.inputs[0].second;
  EXPECT_EQ(tensor.shape(), (Shape{2, 2}));
  EXPECT_EQ(tensor.data<float>()[1], -2.0f);
  EXPECT_TRUE(std::isnan(tensor.data<float>()[2]));
  EXPECT_EQ(request.inputs[1].second.data<double>()[0], 0.1);
  EXPECT_EQ(request.inputs[2].second.data<int8_t>()[0], -128);
  EXPECT_EQ(request.inputs[3].second.data<uint16_t>()[0], 65535);
  EXPECT_EQ(request.inputs[4].second.data<uint64_t>()[0], UINT64_MAX);
  EXPECT_EQ(request.inputs[5].second.data<int64_t>()[0], INT64_MIN);
  EXPECT_EQ(request.inputs[6].second.dtype(), DType::boolean);
  EXPECT_EQ(request.inputs[6].second.data<uint8_t>()[0], 1);
  ASSERT_EQ(request.outputs.size(), 1u);

  // Typed in, typed out; every value as it was sent.
  inference::ModelInferResponse response;
  encode_grpc_infer_response("m", "1", decoded, request.inputs, response);
  EXPECT_EQ(response.id(), "g1");
  EXPECT_EQ(response.raw_output_contents_size(), 0);
  ASSERT_EQ(response.outputs_size(), 7);
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_EQ(response.outputs(0).contents().fp32_contents(3), -INFINITY);
  EXPECT_EQ(response.outputs(2).contents().int_contents(0), -128);
  EXPECT_EQ(response.outputs(4).contents().uint64_contents(0), UINT64_MAX);
  EXPECT_FALSE(response.outputs(6).contents().bool_contents(1));

  // Raw in (FP16 and BF16 have no typed field), raw out, bytes unchanged.
  inference::ModelInferRequest raw;
  for (const char* datatype : {"FP16", "BF16", "INT32"}) {
    auto* input = raw.add_inputs();
    input->set_name(datatype);
    input->set_datatype(datatype);
    input->add_shape(1);
    input->add_shape(2);
  }
  raw.add_raw_input_contents(std::string("\x00\x3c\x00\xc0", 4));  // 1, -2 in FP16
  raw.add_raw_input_contents(std::string("\x80\x3f\x00\x40", 4));  // 1, 2 in BF16
  const int32_t ints[2] = {7, -9};
  raw.add_raw_input_contents(std::string(reinterpret_cast<const char*>(ints), 8));
  const GrpcInferRequest raw_decoded = decode_grpc_infer_request(raw);
  EXPECT_FALSE(raw_decoded.typed_contents);
  EXPECT_EQ(float16_to_float(raw_decoded.request.inputs[0].second.data<Float16>()[1]), -2.0f);
  EXPECT_EQ(bfloat16_to_float(raw_decoded.request.inputs[1].second.data<BFloat16>()[1]), 2.0f);
  EXPECT_EQ(raw_decoded.request.inputs[2].second.data<int32_t>()[1], -9);
  inference::ModelInferResponse raw_response;
  encode_grpc_infer_response("m", "1", raw_decoded, raw_decoded.request.inputs, raw_response);
  ASSERT_EQ(raw_response.raw_output_contents_size(), 3);
  EXPECT_EQ(raw_response.raw_output_contents(2), std::string(reinterpret_cast<const char*>(ints), 8));
  EXPECT_FALSE(raw_response.outputs(2).has_contents());
}

TEST(GrpcCodec, BadMessagesAreErrorsSayingWhatWasExpected) {
  auto error = [](const std::function<void(inference::ModelInferRequest&)>& build) {
    inference::ModelInferRequest message;
    build(message);
    return error_of([&] { decode_grpc_infer_request(message); });
  };
  auto input = [](inference::ModelInferRequest& message, const std::string& datatype,
                  std::vector<int64_t> shape) {
    auto* tensor = message.add_inputs();
    tensor->set_name("x");
    tensor->set_datatype(datatype);
    for (int64_t dim : shape) tensor->add_shape(dim);
    return tensor;
  };
  EXPECT_EQ(error([](auto&) {}), "the request has no inputs");
  EXPECT_NE(error([&](auto& m) {
              input(m, "FP32", {2})->mutable_contents()->add_fp32_contents(1);
            }).find("shape [2] holds 2 elements, its fp32_contents has 1"),
            std::string::npos);
  EXPECT_NE(error([&](auto& m) {
              input(m, "FP32", {1})->mutable_contents()->add_int_contents(1);
            }).find("datatype FP32 takes its elements in fp32_contents, got int_contents"),
            std::string::npos);
  EXPECT_NE(error([&](auto& m) {
              input(m, "INT8", {1})->mutable_contents()->add_int_contents(300);
            }).find("300 is out of the datatype's range"),
            std::string::npos);
  EXPECT_NE(error([&](auto& m) {
              input(m, "FP16", {1})->mutable_contents()->add_fp32_contents(1);
            }).find("FP16 has no typed contents field; send it in raw_input_contents"),
            std::string::npos);
  EXPECT_NE(error([&](auto& m) { input(m, "BYTES", {1}); }).find("BYTES tensors are not supported"),
            std::string::npos);
  EXPECT_NE(error([&](auto& m) { input(m, "FP8", {1}); }).find("unknown datatype 'FP8'"), std::string::npos);
  EXPECT_NE(error([&](auto& m) { input(m, "FP32", {-1}); }).find("non-negative"), std::string::npos);
  // Raw contents: truncated, one missing, and both raw and typed.
  EXPECT_NE(error([&](auto& m) {
              input(m, "FP32", {2});
              m.add_raw_input_contents("1234");
            }).find("raw_input_contents are 4 bytes, shape [2] of FP32 holds 2 elements of 4 bytes"),
            std::string::npos);
  EXPECT_NE(error([&](auto& m) {
              input(m, "FP32", {1});
              input(m, "FP32", {1})->set_name("y");
              m.add_raw_input_contents("1234");
            }).find("2 inputs and 1 raw_input_contents"),
            std::string::npos);
  EXPECT_NE(error([&](auto& m) {
              input(m, "FP32", {1})->mutable_contents()->add_fp32_contents(1);
              m.add_raw_input_contents("1234");
            }).find("has typed contents and the request has raw_input_contents"),
            std::string::npos);
  EXPECT_NE(error([&](auto& m) {
              input(m, "FP32", {1});
              input(m, "FP32", {1});
              m.add_raw_input_contents("1234");
              m.add_raw_input_contents("1234");
            }).find("input 'x' is given twice"),
            std::string::npos);
  // A shape whose byte size wraps around to the raw size is refused before anything is allocated.
  EXPECT_NE(error([&](auto& m) {
              input(m, "INT64", {2305843009213693952});
              m.add_raw_input_contents("");
            }).find("raw_input_contents are 0 bytes"),
            std::string::npos);
  EXPECT_NE(error([&](auto& m) {
              input(m, "FP32", {1})->mutable_contents()->add_fp32_contents(1);
              (*m.mutable_parameters())["timeout"].set_string_param("soon");
            }).find("timeout parameter must be an int64_param"),
            std::string::npos);
}

TEST(ModelConfig, CompletedFromTheModelAsTritonsOnnxBackendDoes) {
  ModelConfig batching;
  complete_model_config(batching, values("x", DType::f32, {Dim{-1, "batch"}, Dim{3, ""}}),
                        values("y", DType::i64, {Dim{-1, "batch"}}));
  EXPECT_EQ(batching.max_batch_size, 4);
  EXPECT_EQ(batching.inputs[0].dims, (std::vector<int64_t>{3}));
  EXPECT_EQ(batching.outputs[0].dtype, DType::i64);
  EXPECT_TRUE(batching.outputs[0].dims.empty());

  ModelConfig fixed;
  complete_model_config(fixed, values("x", DType::f32, {Dim{2, ""}, Dim{3, ""}}),
                        values("y", DType::f32, {Dim{2, ""}}));
  EXPECT_EQ(fixed.max_batch_size, 0);
  EXPECT_EQ(fixed.inputs[0].dims, (std::vector<int64_t>{2, 3}));
}

TEST(ModelConfig, ContradictingTheModelIsAnErrorNamingTheField) {
  auto complete = [](const std::string& text) {
    ModelConfig config = parse_model_config(text, "c.pbtxt");
    complete_model_config(config, values("x", DType::f32, {Dim{-1, "batch"}, Dim{3, ""}}),
                          values("y", DType::f32, {Dim{-1, "batch"}, Dim{3, ""}}));
  };
  EXPECT_NE(error_of([&] { complete("input [ { name: \"z\" } ]"); }).find("config input 'z' is not one of"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              complete("input [ { name: \"x\" data_type: TYPE_INT32 } ]");
            }).find("has data_type TYPE_INT32, the model declares TYPE_FP32"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              complete("max_batch_size: 2 input [ { name: \"x\" dims: [ 4 ] } ]");
            }).find("has dims [4], the model declares [batch, 3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              complete("max_batch_size: 2 dynamic_batching { preferred_batch_size: 4 }");
            }).find("preferred_batch_size 4 is above max_batch_size 2"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { complete("max_batch_size: 2 input [ { name: \"x\" dims: [ 3 ] } ]"); }), "");
}

TEST(InferCodec, JsonDataFlatOrNestedInEveryDatatype) {
  const InferRequest request = decode_infer_request(R"({"id": "r1", "inputs": [
      {"name": "f", "shape": [2, 2], "datatype": "FP32", "data": [[1.5, -2], [NaN, -Infinity]]},
      {"name": "h", "shape": [2], "datatype": "FP16", "data": [1, 0.5]},
      {"name": "b", "shape": [2], "datatype": "BF16", "data": [2, -3]},
      {"name": "d", "shape": [1], "datatype": "FP64", "data": [0.1]},
      {"name": "i8", "shape": [2], "datatype": "INT8", "data": [-128, 127]},
      {"name": "u64", "shape": [1], "datatype": "UINT64", "data": [18446744073709551615]},
      {"name": "i64", "shape": [1], "datatype": "INT64", "data": [-9223372036854775808]},
      {"name": "ok", "shape": [3], "datatype": "BOOL", "data": [true, false, true]}],
      "parameters": {"timeout": 2500}})",
                                                    std::nullopt);
  EXPECT_EQ(request.id, "r1");
  EXPECT_EQ(request.timeout_us, 2500);
  ASSERT_EQ(request.inputs.size(), 8u);
  const Tensor& f = request.inputs[0].second;
  EXPECT_EQ(f.shape(), (Shape{2, 2}));
  EXPECT_EQ(f.data<float>()[1], -2.0f);
  EXPECT_TRUE(std::isnan(f.data<float>()[2]));
  EXPECT_EQ(f.data<float>()[3], -INFINITY);
  EXPECT_EQ(float16_to_float(request.inputs[1].second.data<Float16>()[1]), 0.5f);
  EXPECT_EQ(bfloat16_to_float(request.inputs[2].second.data<BFloat16>()[1]), -3.0f);
  EXPECT_EQ(request.inputs[3].second.data<double>()[0], 0.1);
  EXPECT_EQ(request.inputs[4].second.data<int8_t>()[0], -128);
  EXPECT_EQ(request.inputs[5].second.data<uint64_t>()[0], UINT64_MAX);
  EXPECT_EQ(request.inputs[6].second.data<int64_t>()[0], INT64_MIN);
  EXPECT_EQ(request.inputs[7].second.dtype(), DType::boolean);
  EXPECT_EQ(request.inputs[7].second.data<uint8_t>()[1], 0);

  // Encoded back, every value reads as it was written.
  const InferResponse response = encode_infer_response("m", "1", request, request.inputs);
  EXPECT_FALSE(response.header_length);
  const InferRequest again = decode_infer_request(
      "{\"inputs\": " + response.body.substr(response.body.find("\"outputs\": ") + 11, std::string::npos),
      std::nullopt);
  ASSERT_EQ(again.inputs.size(), request.inputs.size());
  for (size_t i = 0; i < again.inputs.size(); ++i) {
    const Tensor& a = request.inputs[i].second;
    const Tensor& b = again.inputs[i].second;
    ASSERT_EQ(a.dtype(), b.dtype()) << request.inputs[i].first;
    ASSERT_EQ(a.shape(), b.shape());
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << request.inputs[i].first;
  }
}

TEST(InferCodec, BinaryInputsAndOutputsFollowTheJsonHeader) {
  const std::string header =
      R"({"inputs": [{"name": "a", "shape": [2], "datatype": "INT32", "parameters": {"binary_data_size": 8}},
                     {"name": "b", "shape": [1], "datatype": "FP32", "data": [4]}],
          "outputs": [{"name": "a", "parameters": {"binary_data": true}}, {"name": "b"}]})";
  std::string body = header;
  const int32_t values[2] = {7, -9};
  body.append(reinterpret_cast<const char*>(values), sizeof values);
  const InferRequest request = decode_infer_request(body, header.size());
  EXPECT_EQ(request.inputs[0].second.data<int32_t>()[1], -9);
  EXPECT_EQ(request.inputs[1].second.data<float>()[0], 4.0f);

  const InferResponse response = encode_infer_response("m", "1", request, request.inputs);
  ASSERT_TRUE(response.header_length);
  const std::string json = response.body.substr(0, *response.header_length);
  EXPECT_NE(
      json.find(R"("name": "a", "datatype": "INT32", "shape": [2], "parameters": {"binary_data_size": 8})"),
      std::string::npos);
  EXPECT_NE(json.find(R"("name": "b", "datatype": "FP32", "shape": [1], "data": [4])"), std::string::npos);
  ASSERT_EQ(response.body.size(), *response.header_length + 8);
  EXPECT_EQ(std::memcmp(response.body.data() + *response.header_length, values, 8), 0);
}

TEST(InferCodec, BadBodiesAreErrorsSayingWhatWasExpected) {
  auto error = [](const std::string& body, std::optional<size_t> header = std::nullopt) {
    return error_of([&] { decode_infer_request(body, header); });
  };
  EXPECT_NE(error("{\"inputs\": [").find("malformed JSON at offset"), std::string::npos);
  EXPECT_NE(error("[]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error("{}").find("needs \"inputs\""), std::string::npos);
  EXPECT_NE(error(R"({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1]}]})")
                .find("shape [2] holds 2 elements, \"data\" has 1"),
            std::string::npos);
  EXPECT_NE(error(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "INT8", "data": [300]}]})")
                .find("out of the datatype's range"),
            std::string::npos);
  EXPECT_NE(error(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "BOOL", "data": [1]}]})")
                .find("BOOL data must be true or false"),
            std::string::npos);
  EXPECT_NE(error(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "BYTES", "data": ["a"]}]})")
                .find("BYTES tensors are not supported"),
            std::string::npos);
  EXPECT_NE(error(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP8", "data": [1]}]})")
                .find("unknown datatype 'FP8'"),
            std::string::npos);
  EXPECT_NE(error(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]},
                                 {"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]})")
                .find("input 'x' is given twice"),
            std::string::npos);
  const std::string binary = R"({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32",
                                           "parameters": {"binary_data_size": 8}}]})";
  EXPECT_NE(error(binary + "1234", binary.size()).find("only 4 remain in the body"), std::string::npos);
  EXPECT_NE(error(binary + "123456789", binary.size()).find("1 bytes after the JSON header"),
            std::string::npos);
  EXPECT_NE(error(binary, binary.size() + 1).find("Inference-Header-Content-Length is"), std::string::npos);
  // A shape whose byte size wraps around to the declared size is refused before anything is allocated.
  EXPECT_NE(error(R"({"inputs": [{"name": "x", "shape": [2305843009213693952], "datatype": "INT64",
                                  "parameters": {"binary_data_size": 0}}]})")
                .find("binary_data_size is 0 bytes"),
            std::string::npos);
  EXPECT_NE(error(std::string(100000, '[') + std::string(100000, ']')), "");
  EXPECT_NE(error_of([] { parse_header_length("12x"); }).find("Inference-Header-Content-Length"),
            std::string::npos);
}

// Numbers are read by std::from_chars, correctly rounded. The decimal the request fuzzer found, which
// sent RapidJSON 1.1.0's full-precision reader out of bounds of its power table, is an error naming it.
TEST(InferCodec, NumbersReadCorrectlyRoundedAndOutOfRangeOnesAreErrors) {
  auto fp64_request = [](const std::vector<std::string>& numbers) {
    std::string data;
    for (const std::string& number : numbers) data += (data.empty() ? "" : ", ") + number;
    return str_cat(R"({"inputs": [{"name": "d", "shape": [)", numbers.size(),
                   R"(], "datatype": "FP64", "data": [)", data, "]}]}");
  };
  std::vector<std::string> texts{"0.1",  "2.2250738585072014e-308", "4.9406564584124654e-324",
                                 "-0.0", "1.7976931348623157e308",  "9007199254740993",
                                 "1E+5"};
  // Many zeros after the point, and more digits than 64 bits hold.
  texts.push_back("0." + std::string(300, '0') + "1234567890123456789012345");
  texts.push_back("123456789012345678901234567890");
  const InferRequest request = decode_infer_request(fp64_request(texts), std::nullopt);
  const double* values = request.inputs.at(0).second.data<double>();
  for (size_t i = 0; i < texts.size(); ++i) {
    const double expected = std::strtod(texts[i].c_str(), nullptr);
    EXPECT_EQ(std::memcmp(&values[i], &expected, sizeof expected), 0) << texts[i];
  }

  auto error = [&](const std::string& number) {
    return error_of([&] { decode_infer_request(fp64_request({number}), std::nullopt); });
  };
  // The fuzzer's number: 450 zeros after the point, then 19 digits.
  const std::string fuzzed = "0." + std::string(450, '0') + "1000000000000000000";
  EXPECT_NE(error(fuzzed).find("is beyond a double's range"), std::string::npos) << error(fuzzed);
  // Zeros after the point and a negative exponent together: 1e-350, below the smallest double.
  const std::string tiny = "0." + std::string(26, '0') + "1e-323";
  EXPECT_NE(error(tiny).find("is beyond a double's range"), std::string::npos) << error(tiny);
  EXPECT_NE(error("1e400").find("malformed JSON at offset"), std::string::npos);
  EXPECT_NE(error("1.5x").find("malformed JSON at offset"), std::string::npos);
}

// y = x @ W, x [batch, 4]: rows are independent, so a merged batch must give each request its own rows.
Model matmul_model() {
  GraphBuilder builder({2, 4});
  const std::string y = builder.add("MatMul", {"x", builder.weights({4, 3})});
  Model model = builder.finish({y});
  model.graph.inputs[0].shape[0] = Dim{-1, "batch"};
  return model;
}

std::shared_ptr<PendingRequest> pending(const Tensor& x) {
  auto request = std::make_shared<PendingRequest>();
  request->inputs.emplace("x", x);
  request->rows = x.dim(0);
  return request;
}

TEST(Batcher, MergedRequestsGetTheirOwnRowsBack) {
  Session session(matmul_model());
  ModelMetrics metrics;
  BatcherOptions options;
  options.max_batch_size = 8;
  options.dynamic_batching = true;
  options.max_queue_delay = std::chrono::seconds(5);  // only a full batch leaves early
  Batcher batcher(session, options, metrics);
  std::vector<Tensor> inputs;
  std::vector<std::future<Outcome>> futures;
  for (int i = 0; i < 4; ++i) {
    inputs.push_back(random_tensor({2, 4}, 100 + i));
    futures.push_back(batcher.submit(pending(inputs.back())));
  }
  for (int i = 0; i < 4; ++i) {
    Outcome outcome = futures[i].get();
    ASSERT_EQ(outcome.status, 200) << outcome.error;
    EXPECT_EQ(outcome.batch_rows, 8);
    const Tensor expected = session.run({{"x", inputs[i]}}).begin()->second;
    const Tensor& got = outcome.outputs.begin()->second;
    ASSERT_EQ(got.shape(), (Shape{2, 3}));
    for (int64_t j = 0; j < got.numel(); ++j)
      EXPECT_NEAR(got.data<float>()[j], expected.data<float>()[j], 1e-5);
  }
  EXPECT_EQ(metrics.exec_count.load(), 1u);
  EXPECT_EQ(metrics.inference_count.load(), 8u);
  EXPECT_EQ(metrics.batch_size_buckets[3].load(), 1u);  // the bucket le=8
}

TEST(Batcher, AFullQueueRefusesAndQueuedRequestsCanBeAbandonedExpiredOrAborted) {
  Session session(matmul_model());
  ModelMetrics metrics;
  BatcherOptions options;
  options.max_batch_size = 64;
  options.dynamic_batching = true;
  options.max_queue_delay = std::chrono::seconds(30);  // nothing leaves while the test runs
  options.max_queue_size = 3;
  Batcher batcher(session, options, metrics);
  std::vector<std::shared_ptr<PendingRequest>> requests;
  std::vector<std::future<Outcome>> futures;
  for (int i = 0; i < 4; ++i) {
    requests.push_back(pending(random_tensor({1, 4}, i)));
    futures.push_back(batcher.submit(requests.back()));
  }
  const Outcome refused = futures[3].get();
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.error.find("queue is full (3 requests waiting)"), std::string::npos);
  EXPECT_EQ(metrics.pending_requests.load(), 3);

  batcher.abandon(requests[0]);
  EXPECT_EQ(futures[0].get().status, 499);
  EXPECT_TRUE(batcher.expire(requests[1]));
  const Outcome expired = futures[1].get();
  EXPECT_EQ(expired.status, 504);
  EXPECT_NE(expired.error.find("timeout expired"), std::string::npos);

  batcher.abort("stopping the test");
  const Outcome aborted = futures[2].get();
  EXPECT_EQ(aborted.status, 503);
  EXPECT_EQ(aborted.error, "stopping the test");
  EXPECT_EQ(metrics.pending_requests.load(), 0);
  EXPECT_EQ(batcher.submit(pending(random_tensor({1, 4}, 9))).get().status, 503);
  batcher.join();
  EXPECT_EQ(metrics.exec_count.load(), 0u);
}

TEST(Batcher, APreferredSizeLeavesAtOnceCutAtTheLargestOneReached) {
  Session session(matmul_model());
  ModelMetrics metrics;
  BatcherOptions options;
  options.max_batch_size = 16;
  options.dynamic_batching = true;
  options.max_queue_delay = std::chrono::seconds(30);  // only a preferred size leaves while the test runs
  options.preferred_batch_sizes = {2, 4};
  Batcher batcher(session, options, metrics);
  // Rows 1, 1, 2, 1: the prefixes reach 2 and then 4, so the first batch is the first three
  // requests; the last waits alone (1 row is no preferred size) until the batcher stops.
  std::vector<std::future<Outcome>> futures;
  for (int64_t rows : {1, 1, 2, 1}) futures.push_back(batcher.submit(pending(random_tensor({rows, 4}, 7))));
  for (int i = 0; i < 3; ++i) {
    const Outcome outcome = futures[i].get();
    EXPECT_EQ(outcome.status, 200) << outcome.error;
    EXPECT_EQ(outcome.batch_rows, 4);
  }
  EXPECT_EQ(futures[3].wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  batcher.stop_accepting();
  EXPECT_EQ(futures[3].get().batch_rows, 1);
  batcher.join();
}

TEST(Batcher, StopAcceptingRunsWhatIsQueuedWithoutWaitingForTheDelay) {
  Session session(matmul_model());
  ModelMetrics metrics;
  BatcherOptions options;
  options.max_batch_size = 16;
  options.dynamic_batching = true;
  options.max_queue_delay = std::chrono::seconds(30);
  options.instances = 2;
  Batcher batcher(session, options, metrics);
  std::vector<std::shared_ptr<PendingRequest>> requests;
  std::vector<std::future<Outcome>> futures;
  for (int i = 0; i < 5; ++i) {
    requests.push_back(pending(random_tensor({1 + i % 2, 4}, i)));
    futures.push_back(batcher.submit(requests.back()));
  }
  const auto start = std::chrono::steady_clock::now();
  batcher.stop_accepting();
  for (auto& future : futures) EXPECT_EQ(future.get().status, 200);
  batcher.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(metrics.inference_count.load(), 7u);
  // A request does not keep its batch (and the batch every request's inputs) alive.
  for (const auto& request : requests) EXPECT_TRUE(request->batch.expired());
}

}  // namespace
}  // namespace kiln::serve
