#include "serve/infer_codec.h"

#include <rapidjson/document.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "core/error.h"
#include "core/json_writer.h"
#include "serve/json_document.h"
#include "serve/model_config.h"

namespace kiln::serve {
namespace {

// Deeper nesting than any tensor's rank is malformed data, refused before it is walked.
constexpr int kMaxNesting = 32;
// More inputs or outputs than any model has: refused before they are read.
constexpr unsigned kMaxTensors = 4096;

using Json = rapidjson::Value;

const Json* member(const Json& object, const char* name) {
  const auto found = object.FindMember(name);
  return found == object.MemberEnd() ? nullptr : &found->value;
}

std::string string_member(const Json& object, const char* name, std::string_view where) {
  const Json* value = member(object, name);
  KILN_CHECK(value != nullptr, invalid_argument, where, " has no \"", name, "\"");
  KILN_CHECK(value->IsString(), invalid_argument, where, "'s \"", name, "\" must be a string");
  return std::string(value->GetString(), value->GetStringLength());
}

// The "parameters" object of `object`, or null when absent.
const Json* parameters_of(const Json& object, std::string_view where) {
  const Json* parameters = member(object, "parameters");
  if (parameters == nullptr) return nullptr;
  KILN_CHECK(parameters->IsObject(), invalid_argument, where, "'s \"parameters\" must be an object");
  return parameters;
}

std::optional<bool> bool_parameter(const Json* parameters, const char* name, std::string_view where) {
  if (parameters == nullptr) return std::nullopt;
  const Json* value = member(*parameters, name);
  if (value == nullptr) return std::nullopt;
  KILN_CHECK(value->IsBool(), invalid_argument, where, "'s parameter \"", name, "\" must be true or false");
  return value->GetBool();
}

// Counts the numbers (or booleans) in possibly nested arrays, refusing other values.
int64_t count_elements(const Json& data, int depth, std::string_view where) {
  if (!data.IsArray()) return 1;
  KILN_CHECK(depth < kMaxNesting, invalid_argument, where, "'s \"data\" is nested more than ", kMaxNesting,
             " levels deep");
  int64_t count = 0;
  for (const Json& element : data.GetArray()) count += count_elements(element, depth + 1, where);
  return count;
}

template <typename T>
T integer_element(const Json& value, std::string_view where) {
  if (value.IsInt64()) {
    const int64_t number = value.GetInt64();
    if constexpr (std::is_signed_v<T>) {
      KILN_CHECK(number >= std::numeric_limits<T>::min() && number <= std::numeric_limits<T>::max(),
                 invalid_argument, where, ": ", number, " is out of the datatype's range");
    } else {
      KILN_CHECK(number >= 0 && static_cast<uint64_t>(number) <= std::numeric_limits<T>::max(),
                 invalid_argument, where, ": ", number, " is out of the datatype's range");
    }
    return static_cast<T>(number);
  }
  if (value.IsUint64()) {
    const uint64_t number = value.GetUint64();
    KILN_CHECK(number <= static_cast<uint64_t>(std::numeric_limits<T>::max()), invalid_argument, where, ": ",
               number, " is out of the datatype's range");
    return static_cast<T>(number);
  }
  fail(ErrorKind::invalid_argument, where, ": expected integers in \"data\"");
}

double float_element(const Json& value, std::string_view where) {
  KILN_CHECK(value.IsNumber(), invalid_argument, where, ": expected numbers in \"data\"");
  return value.GetDouble();
}

// A finite number the datatype cannot hold is refused, as an integer out of range is; NaN and
// infinities given as such pass.
template <typename Half>
Half narrowed(double value, Half (*convert)(float), float (*back)(Half), std::string_view where) {
  const Half half = convert(static_cast<float>(value));
  KILN_CHECK(!std::isfinite(value) || std::isfinite(back(half)), invalid_argument, where, ": ", value,
             " is out of the datatype's range");
  return half;
}

float narrowed_float(double value, std::string_view where) {
  return narrowed<float>(
      value, [](float f) { return f; }, [](float f) { return f; }, where);
}

// Writes the leaves of `data` (row-major) into `out` as `dtype`.
void fill_elements(const Json& data, DType dtype, uint8_t*& out, std::string_view where) {
  if (data.IsArray()) {
    for (const Json& element : data.GetArray()) fill_elements(element, dtype, out, where);
    return;
  }
  auto store = [&out](auto element) {
    std::memcpy(out, &element, sizeof element);
    out += sizeof element;
  };
  switch (dtype) {
    case DType::boolean:
      KILN_CHECK(data.IsBool(), invalid_argument, where, ": BOOL data must be true or false");
      return store(static_cast<uint8_t>(data.GetBool() ? 1 : 0));
    case DType::u8:
      return store(integer_element<uint8_t>(data, where));
    case DType::u16:
      return store(integer_element<uint16_t>(data, where));
    case DType::u32:
      return store(integer_element<uint32_t>(data, where));
    case DType::u64:
      return store(integer_element<uint64_t>(data, where));
    case DType::i8:
      return store(integer_element<int8_t>(data, where));
    case DType::i16:
      return store(integer_element<int16_t>(data, where));
    case DType::i32:
      return store(integer_element<int32_t>(data, where));
    case DType::i64:
      return store(integer_element<int64_t>(data, where));
    case DType::f16:
      return store(narrowed(float_element(data, where), float_to_float16, float16_to_float, where).bits);
    case DType::bf16:
      return store(narrowed(float_element(data, where), float_to_bfloat16, bfloat16_to_float, where).bits);
    case DType::f32:
      return store(narrowed_float(float_element(data, where), where));
    case DType::f64:
      return store(float_element(data, where));
    case DType::undefined:
      break;
  }
  fail(ErrorKind::runtime, where, ": no element type");
}

Shape read_shape(const Json& input, std::string_view where) {
  const Json* shape = member(input, "shape");
  KILN_CHECK(shape != nullptr && shape->IsArray(), invalid_argument, where,
             " needs \"shape\", an array of dims");
  KILN_CHECK(shape->Size() <= static_cast<unsigned>(kMaxNesting), invalid_argument, where, " has rank ",
             shape->Size(), ", above kiln's limit of ", kMaxNesting);
  Shape dims;
  for (const Json& dim : shape->GetArray()) {
    KILN_CHECK(dim.IsInt64() && dim.GetInt64() >= 0, invalid_argument, where,
               "'s shape must hold non-negative integers");
    dims.push_back(dim.GetInt64());
  }
  return dims;
}

struct PendingBinary {
  size_t input;  // index into InferRequest::inputs
  size_t bytes;
  DType dtype;
  Shape shape;
};

void decode_input(const Json& input, size_t index, InferRequest& request,
                  std::unordered_set<std::string>& names, std::vector<PendingBinary>& binaries) {
  std::string where = str_cat("inputs[", index, "]");
  KILN_CHECK(input.IsObject(), invalid_argument, where, " must be an object");
  const std::string name = string_member(input, "name", where);
  where = "input '" + name + "'";
  KILN_CHECK(names.insert(name).second, invalid_argument, where, " is given twice");
  const std::string datatype = string_member(input, "datatype", where);
  const DType dtype = dtype_from_protocol_name(datatype);
  KILN_CHECK(datatype != "BYTES", not_implemented, where,
             ": BYTES tensors are not supported (kiln has no string type)");
  KILN_CHECK(dtype != DType::undefined, invalid_argument, where, ": unknown datatype '", datatype,
             "' (expected BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64 "
             "or BF16)");
  const Shape shape = read_shape(input, where);
  const int64_t numel = checked_numel(shape);

  const Json* parameters = parameters_of(input, where);
  const Json* binary_size = parameters != nullptr ? member(*parameters, "binary_data_size") : nullptr;
  const Json* data = member(input, "data");
  if (binary_size != nullptr) {
    KILN_CHECK(binary_size->IsUint64(), invalid_argument, where,
               "'s binary_data_size must be a non-negative integer");
    KILN_CHECK(data == nullptr, invalid_argument, where, " has both \"data\" and binary_data_size");
    const uint64_t bytes = binary_size->GetUint64();
    // Compared by division: a product of a huge shape could wrap around to a small size.
    const bool matches =
        bytes % dtype_size(dtype) == 0 && bytes / dtype_size(dtype) == static_cast<uint64_t>(numel);
    KILN_CHECK(matches, invalid_argument, where, ": binary_data_size is ", bytes, " bytes, shape ",
               shape_to_string(shape), " of ", datatype, " holds ", numel, " elements of ", dtype_size(dtype),
               " bytes");
    binaries.push_back({request.inputs.size(), static_cast<size_t>(bytes), dtype, shape});
    request.inputs.emplace_back(name, Tensor());  // filled from the binary part once all sizes are known
    return;
  }
  KILN_CHECK(data != nullptr, invalid_argument, where,
             " has neither \"data\" nor a binary_data_size parameter");
  const int64_t count = count_elements(*data, 0, where);
  KILN_CHECK(count == numel, invalid_argument, where, ": shape ", shape_to_string(shape), " holds ", numel,
             " elements, \"data\" has ", count);
  Tensor tensor = Tensor::empty(dtype, shape);
  auto* out = static_cast<uint8_t*>(tensor.raw_data());
  if (numel > 0) fill_elements(*data, dtype, out, where);
  request.inputs.emplace_back(name, std::move(tensor));
}

// Shortest text that reads back as the same value; NaN and infinities as literals.
template <typename T>
void append_number(std::string& out, T value) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(value)) return void(out += "NaN");
    if (std::isinf(value)) return void(out += value > 0 ? "Infinity" : "-Infinity");
  }
  char buffer[40];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, end);
}

template <typename T, typename Convert>
void append_values(std::string& out, const Tensor& tensor, Convert convert) {
  const T* values = static_cast<const T*>(tensor.raw_data());
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    if (i != 0) out += ',';
    append_number(out, convert(values[i]));
  }
}

std::string data_json(const Tensor& tensor) {
  std::string out = "[";
  auto same = [](auto value) { return value; };
  switch (tensor.dtype()) {
    case DType::boolean: {
      const auto* values = static_cast<const uint8_t*>(tensor.raw_data());
      for (int64_t i = 0; i < tensor.numel(); ++i)
        out += i == 0 ? "" : ",", out += values[i] ? "true" : "false";
      break;
    }
    case DType::u8:
      append_values<uint8_t>(out, tensor, [](uint8_t v) { return unsigned{v}; });
      break;
    case DType::u16:
      append_values<uint16_t>(out, tensor, [](uint16_t v) { return unsigned{v}; });
      break;
    case DType::u32:
      append_values<uint32_t>(out, tensor, same);
      break;
    case DType::u64:
      append_values<uint64_t>(out, tensor, same);
      break;
    case DType::i8:
      append_values<int8_t>(out, tensor, [](int8_t v) { return int{v}; });
      break;
    case DType::i16:
      append_values<int16_t>(out, tensor, [](int16_t v) { return int{v}; });
      break;
    case DType::i32:
      append_values<int32_t>(out, tensor, same);
      break;
    case DType::i64:
      append_values<int64_t>(out, tensor, same);
      break;
    case DType::f16:
      append_values<uint16_t>(out, tensor, [](uint16_t v) { return float16_to_float({v}); });
      break;
    case DType::bf16:
      append_values<uint16_t>(out, tensor, [](uint16_t v) { return bfloat16_to_float({v}); });
      break;
    case DType::f32:
      append_values<float>(out, tensor, same);
      break;
    case DType::f64:
      append_values<double>(out, tensor, same);
      break;
    case DType::undefined:
      break;
  }
  return out + "]";
}

}  // namespace

size_t parse_header_length(std::string_view text) {
  size_t length = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), length);
  KILN_CHECK(!text.empty() && error == std::errc() && end == text.data() + text.size(), invalid_argument,
             "Inference-Header-Content-Length must be a non-negative integer, got '", text, "'");
  return length;
}

InferRequest decode_infer_request(std::string_view body, std::optional<size_t> header_length) {
  const size_t json_length = header_length.value_or(body.size());
  KILN_CHECK(json_length <= body.size(), invalid_argument, "Inference-Header-Content-Length is ", json_length,
             " bytes, the body has only ", body.size());
  rapidjson::Document document;
  parse_json_document(body.substr(0, json_length), document);
  KILN_CHECK(document.IsObject(), invalid_argument, "the request must be a JSON object");

  InferRequest request;
  if (const Json* id = member(document, "id"); id != nullptr) {
    KILN_CHECK(id->IsString(), invalid_argument, "the request's \"id\" must be a string");
    request.id.assign(id->GetString(), id->GetStringLength());
  }
  const Json* parameters = parameters_of(document, "the request");
  request.binary_output = bool_parameter(parameters, "binary_data_output", "the request").value_or(false);
  if (parameters != nullptr) {
    if (const Json* timeout = member(*parameters, "timeout"); timeout != nullptr) {
      KILN_CHECK(timeout->IsUint64() && timeout->GetUint64() <= uint64_t{3600} * 1000 * 1000,
                 invalid_argument, "the request's timeout must be microseconds in [0, 3600000000]");
      request.timeout_us = static_cast<int64_t>(timeout->GetUint64());
    }
  }

  const Json* inputs = member(document, "inputs");
  KILN_CHECK(inputs != nullptr && inputs->IsArray() && !inputs->Empty(), invalid_argument,
             "the request needs \"inputs\", a non-empty array");
  KILN_CHECK(inputs->Size() <= kMaxTensors, invalid_argument, "the request has ", inputs->Size(),
             " inputs, more than kiln serves (", kMaxTensors, ")");
  std::vector<PendingBinary> binaries;
  std::unordered_set<std::string> names;
  for (rapidjson::SizeType i = 0; i < inputs->Size(); ++i) {
    decode_input((*inputs)[i], i, request, names, binaries);
  }

  size_t offset = json_length;
  for (const PendingBinary& binary : binaries) {
    auto& [name, tensor] = request.inputs[binary.input];
    KILN_CHECK(body.size() - offset >= binary.bytes, invalid_argument, "input '", name,
               "': binary_data_size is ", binary.bytes, " bytes, only ", body.size() - offset,
               " remain in the body");
    Tensor filled = Tensor::empty(binary.dtype, binary.shape);
    if (binary.bytes > 0) std::memcpy(filled.raw_data(), body.data() + offset, binary.bytes);
    tensor = std::move(filled);
    offset += binary.bytes;
  }
  KILN_CHECK(offset == body.size(), invalid_argument, "the body has ", body.size() - offset,
             " bytes after the JSON header and the binary inputs it declares",
             header_length ? "" : " (binary inputs need the Inference-Header-Content-Length header)");

  if (const Json* outputs = member(document, "outputs"); outputs != nullptr) {
    KILN_CHECK(outputs->IsArray(), invalid_argument, "the request's \"outputs\" must be an array");
    KILN_CHECK(outputs->Size() <= kMaxTensors, invalid_argument, "the request asks for ", outputs->Size(),
               " outputs, more than kiln serves (", kMaxTensors, ")");
    std::unordered_set<std::string> output_names;
    for (rapidjson::SizeType i = 0; i < outputs->Size(); ++i) {
      const Json& output = (*outputs)[i];
      const std::string where = str_cat("outputs[", i, "]");
      KILN_CHECK(output.IsObject(), invalid_argument, where, " must be an object");
      RequestedOutput requested;
      requested.name = string_member(output, "name", where);
      const Json* output_parameters = parameters_of(output, where);
      requested.binary = bool_parameter(output_parameters, "binary_data", where);
      KILN_CHECK(output_parameters == nullptr || member(*output_parameters, "classification") == nullptr,
                 not_implemented, where, ": the classification extension is not supported");
      KILN_CHECK(output_names.insert(requested.name).second, invalid_argument, "output '", requested.name,
                 "' is asked twice");
      request.outputs.push_back(std::move(requested));
    }
  }
  return request;
}

InferResponse encode_infer_response(std::string_view model_name, std::string_view model_version,
                                    const InferRequest& request,
                                    const std::vector<std::pair<std::string, Tensor>>& outputs) {
  JsonWriter json;
  json.begin_object();
  json.key("model_name").value(model_name);
  json.key("model_version").value(model_version);
  if (!request.id.empty()) json.key("id").value(request.id);
  json.key("outputs").begin_array();
  std::vector<const Tensor*> binary_outputs;
  for (const auto& [name, tensor] : outputs) {
    bool binary = request.binary_output;
    for (const RequestedOutput& requested : request.outputs) {
      if (requested.name == name && requested.binary) binary = *requested.binary;
    }
    json.begin_object();
    json.key("name").value(name);
    json.key("datatype").value(protocol_dtype_name(tensor.dtype()));
    json.key("shape").value(tensor.shape());
    if (binary) {
      json.key("parameters")
          .begin_object()
          .key("binary_data_size")
          .value(static_cast<uint64_t>(tensor.nbytes()));
      json.end_object();
      binary_outputs.push_back(&tensor);
    } else {
      json.key("data").raw(data_json(tensor));
    }
    json.end_object();
  }
  json.end_array();
  json.end_object();

  InferResponse response{json.take(), std::nullopt};
  if (!binary_outputs.empty()) {
    response.header_length = response.body.size();
    for (const Tensor* tensor : binary_outputs) {
      response.body.append(static_cast<const char*>(tensor->raw_data()), tensor->nbytes());
    }
  }
  return response;
}

}  // namespace kiln::serve
