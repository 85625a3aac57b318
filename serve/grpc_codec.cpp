#include "serve/grpc_codec.h"

#include <cstring>
#include <limits>
#include <unordered_set>

#include "core/error.h"
#include "serve/model_config.h"

namespace kiln::serve {
namespace {

// Beyond any model's inputs or outputs, and any tensor's rank: refused before they are read.
constexpr int kMaxTensors = 4096;
constexpr int kMaxRank = 32;
constexpr int64_t kMaxTimeoutUs = int64_t{3600} * 1000 * 1000;

using Contents = inference::InferTensorContents;

// Which typed field a datatype's elements travel in (none for FP16 and BF16: raw only).
const char* typed_field(DType dtype) {
  switch (dtype) {
    case DType::boolean:
      return "bool_contents";
    case DType::i8:
    case DType::i16:
    case DType::i32:
      return "int_contents";
    case DType::i64:
      return "int64_contents";
    case DType::u8:
    case DType::u16:
    case DType::u32:
      return "uint_contents";
    case DType::u64:
      return "uint64_contents";
    case DType::f32:
      return "fp32_contents";
    case DType::f64:
      return "fp64_contents";
    default:
      return nullptr;
  }
}

// The typed fields that hold elements, by name, with their counts.
std::vector<std::pair<const char*, int>> filled_fields(const Contents& contents) {
  std::vector<std::pair<const char*, int>> filled;
  auto note = [&](const char* name, int size) {
    if (size > 0) filled.emplace_back(name, size);
  };
  note("bool_contents", contents.bool_contents_size());
  note("int_contents", contents.int_contents_size());
  note("int64_contents", contents.int64_contents_size());
  note("uint_contents", contents.uint_contents_size());
  note("uint64_contents", contents.uint64_contents_size());
  note("fp32_contents", contents.fp32_contents_size());
  note("fp64_contents", contents.fp64_contents_size());
  note("bytes_contents", contents.bytes_contents_size());
  return filled;
}

// Copies `values` into `tensor` as T, refusing values T cannot hold.
template <typename T, typename Values>
void store(const Values& values, Tensor& tensor, const std::string& where) {
  T* out = tensor.data<T>();
  for (int i = 0; i < values.size(); ++i) {
    const auto value = values.Get(i);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, decltype(value)>) {
      KILN_CHECK(value >= std::numeric_limits<T>::min() && value <= std::numeric_limits<T>::max(),
                 invalid_argument, where, ": ", value, " is out of the datatype's range");
    }
    out[i] = static_cast<T>(value);
  }
}

void fill_typed(const Contents& contents, Tensor& tensor, const std::string& where) {
  switch (tensor.dtype()) {
    case DType::boolean: {
      auto* out = tensor.data<uint8_t>();
      for (int i = 0; i < contents.bool_contents_size(); ++i) out[i] = contents.bool_contents(i) ? 1 : 0;
      return;
    }
    case DType::i8:
      return store<int8_t>(contents.int_contents(), tensor, where);
    case DType::i16:
      return store<int16_t>(contents.int_contents(), tensor, where);
    case DType::i32:
      return store<int32_t>(contents.int_contents(), tensor, where);
    case DType::i64:
      return store<int64_t>(contents.int64_contents(), tensor, where);
    case DType::u8:
      return store<uint8_t>(contents.uint_contents(), tensor, where);
    case DType::u16:
      return store<uint16_t>(contents.uint_contents(), tensor, where);
    case DType::u32:
      return store<uint32_t>(contents.uint_contents(), tensor, where);
    case DType::u64:
      return store<uint64_t>(contents.uint64_contents(), tensor, where);
    case DType::f32:
      return store<float>(contents.fp32_contents(), tensor, where);
    case DType::f64:
      return store<double>(contents.fp64_contents(), tensor, where);
    default:
      fail(ErrorKind::invalid_argument, where, ": no typed contents field for this datatype");
  }
}

void append_typed(const Tensor& tensor, Contents& contents) {
  const int64_t count = tensor.numel();
  auto copy = [count](const auto* values, auto* field) {
    field->Reserve(static_cast<int>(count));
    for (int64_t i = 0; i < count; ++i) field->Add(values[i]);
  };
  switch (tensor.dtype()) {
    case DType::boolean: {
      const auto* values = tensor.data<uint8_t>();
      for (int64_t i = 0; i < count; ++i) contents.add_bool_contents(values[i] != 0);
      return;
    }
    case DType::i8:
      return copy(tensor.data<int8_t>(), contents.mutable_int_contents());
    case DType::i16:
      return copy(tensor.data<int16_t>(), contents.mutable_int_contents());
    case DType::i32:
      return copy(tensor.data<int32_t>(), contents.mutable_int_contents());
    case DType::i64:
      return copy(tensor.data<int64_t>(), contents.mutable_int64_contents());
    case DType::u8:
      return copy(tensor.data<uint8_t>(), contents.mutable_uint_contents());
    case DType::u16:
      return copy(tensor.data<uint16_t>(), contents.mutable_uint_contents());
    case DType::u32:
      return copy(tensor.data<uint32_t>(), contents.mutable_uint_contents());
    case DType::u64:
      return copy(tensor.data<uint64_t>(), contents.mutable_uint64_contents());
    case DType::f32:
      return copy(tensor.data<float>(), contents.mutable_fp32_contents());
    case DType::f64:
      return copy(tensor.data<double>(), contents.mutable_fp64_contents());
    default:
      fail(ErrorKind::runtime, "no typed contents field for ", protocol_dtype_name(tensor.dtype()));
  }
}

Tensor decode_input(const inference::ModelInferRequest::InferInputTensor& input, std::string* raw,
                    const std::string& where) {
  const DType dtype = dtype_from_protocol_name(input.datatype());
  KILN_CHECK(input.datatype() != "BYTES", not_implemented, where,
             ": BYTES tensors are not supported (kiln has no string type)");
  KILN_CHECK(dtype != DType::undefined, invalid_argument, where, ": unknown datatype '", input.datatype(),
             "' (expected BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64 "
             "or BF16)");
  KILN_CHECK(input.shape_size() <= kMaxRank, invalid_argument, where, " has rank ", input.shape_size(),
             ", above kiln's limit of ", kMaxRank);
  Shape shape(input.shape().begin(), input.shape().end());
  for (int64_t dim : shape) {
    KILN_CHECK(dim >= 0, invalid_argument, where, "'s shape must hold non-negative integers, got ",
               shape_to_string(shape));
  }
  const int64_t numel = checked_numel(shape);
  const size_t element = dtype_size(dtype);
  if (raw != nullptr) {
    KILN_CHECK(!input.has_contents() || filled_fields(input.contents()).empty(), invalid_argument, where,
               " has typed contents and the request has raw_input_contents: use one or the other");
    // Compared by division: a product of a huge shape could wrap around to a small size.
    const bool matches = raw->size() % element == 0 && raw->size() / element == static_cast<uint64_t>(numel);
    KILN_CHECK(matches, invalid_argument, where, ": its raw_input_contents are ", raw->size(), " bytes, shape ",
               shape_to_string(shape), " of ", input.datatype(), " holds ", numel, " elements of ", element,
               " bytes");
    Tensor tensor = Tensor::empty(dtype, shape);
    if (!raw->empty()) std::memcpy(tensor.raw_data(), raw->data(), raw->size());
    std::string().swap(*raw);  // its bytes are in the tensor now
    return tensor;
  }
  const char* field = typed_field(dtype);
  KILN_CHECK(field != nullptr, invalid_argument, where, ": ", input.datatype(),
             " has no typed contents field; send it in raw_input_contents");
  const std::vector<std::pair<const char*, int>> filled = filled_fields(input.contents());
  int count = 0;
  for (const auto& [name, size] : filled) {
    KILN_CHECK(std::strcmp(name, field) == 0, invalid_argument, where, ": datatype ", input.datatype(),
               " takes its elements in ", field, ", got ", name);
    count = size;
  }
  KILN_CHECK(count == numel, invalid_argument, where, ": shape ", shape_to_string(shape), " holds ", numel,
             " elements, its ", field, " has ", count,
             numel > 0 && count == 0 ? " (no contents: set them, or send raw_input_contents)" : "");
  Tensor tensor = Tensor::empty(dtype, shape);
  if (numel > 0) fill_typed(input.contents(), tensor, where);
  return tensor;
}

}  // namespace

GrpcInferRequest decode_grpc_infer_request(inference::ModelInferRequest& message) {
  GrpcInferRequest decoded;
  InferRequest& request = decoded.request;
  request.id = message.id();
  for (const auto& [name, parameter] : message.parameters()) {
    if (name == "timeout") {
      KILN_CHECK(parameter.parameter_choice_case() == inference::InferParameter::kInt64Param &&
                     parameter.int64_param() >= 0 && parameter.int64_param() <= kMaxTimeoutUs,
                 invalid_argument, "the request's timeout parameter must be an int64_param of microseconds in [0, ",
                 kMaxTimeoutUs, "]");
      request.timeout_us = parameter.int64_param();
    }
  }
  KILN_CHECK(message.inputs_size() > 0, invalid_argument, "the request has no inputs");
  KILN_CHECK(message.inputs_size() <= kMaxTensors, invalid_argument, "the request has ", message.inputs_size(),
             " inputs, more than kiln serves (", kMaxTensors, ")");
  const bool raw = message.raw_input_contents_size() > 0;
  KILN_CHECK(!raw || message.raw_input_contents_size() == message.inputs_size(), invalid_argument,
             "the request has ", message.inputs_size(), " inputs and ", message.raw_input_contents_size(),
             " raw_input_contents: give one per input, in input order");
  decoded.typed_contents = !raw;
  std::unordered_set<std::string> names;
  for (int i = 0; i < message.inputs_size(); ++i) {
    const auto& input = message.inputs(i);
    const std::string where = input.name().empty() ? str_cat("inputs[", i, "]") : "input '" + input.name() + "'";
    KILN_CHECK(!input.name().empty(), invalid_argument, where, " has no name");
    KILN_CHECK(names.insert(input.name()).second, invalid_argument, where, " is given twice");
    std::string* raw_contents = raw ? message.mutable_raw_input_contents(i) : nullptr;
    request.inputs.emplace_back(input.name(), decode_input(input, raw_contents, where));
  }
  KILN_CHECK(message.outputs_size() <= kMaxTensors, invalid_argument, "the request asks for ",
             message.outputs_size(), " outputs, more than kiln serves (", kMaxTensors, ")");
  std::unordered_set<std::string> output_names;
  for (const auto& output : message.outputs()) {
    KILN_CHECK(output_names.insert(output.name()).second, invalid_argument, "output '", output.name(),
               "' is asked twice");
    KILN_CHECK(output.parameters().count("classification") == 0, not_implemented, "output '", output.name(),
               "': the classification extension is not supported");
    request.outputs.push_back({output.name(), std::nullopt});
  }
  return decoded;
}

void encode_grpc_infer_response(std::string_view model_name, std::string_view model_version,
                                const GrpcInferRequest& request,
                                const std::vector<std::pair<std::string, Tensor>>& outputs,
                                inference::ModelInferResponse& response) {
  response.set_model_name(std::string(model_name));
  response.set_model_version(std::string(model_version));
  response.set_id(request.request.id);
  bool typed = request.typed_contents;
  for (const auto& [name, tensor] : outputs) typed = typed && typed_field(tensor.dtype()) != nullptr;
  for (const auto& [name, tensor] : outputs) {
    auto* output = response.add_outputs();
    output->set_name(name);
    output->set_datatype(std::string(protocol_dtype_name(tensor.dtype())));
    for (int64_t dim : tensor.shape()) output->add_shape(dim);
    if (typed) {
      append_typed(tensor, *output->mutable_contents());
    } else {
      response.add_raw_output_contents()->assign(static_cast<const char*>(tensor.raw_data()), tensor.nbytes());
    }
  }
}

}  // namespace kiln::serve
