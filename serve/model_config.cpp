#include "serve/model_config.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <memory>

#include "core/error.h"

namespace kiln::serve {
namespace {

// The protobuf text format as config.pbtxt uses it, read into a tree: `name: value`,
// `name { fields }` (or `name: { ... }`, `< >`), `name: [v, v]` and `name [ {..}, {..} ]` (each
// element a repeated field), `#` comments, optional `,`/`;` separators.
struct TextMessage;
struct TextValue {
  std::string scalar;  // identifier, number or unquoted string
  bool quoted = false;
  std::shared_ptr<TextMessage> message;  // set for a message value
  int line = 0;
};
struct TextMessage {
  std::vector<std::pair<std::string, TextValue>> fields;
};

class TextParser {
 public:
  TextParser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  TextMessage parse() {
    TextMessage root = parse_fields('\0');
    skip_space();
    if (pos_ < text_.size()) fail_here("unexpected '", text_[pos_], "'");
    return root;
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail_here(const Args&... args) const {
    fail(ErrorKind::invalid_argument, source_, ":", line_, ": ", args...);
  }

  void skip_space() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '\n') {
        ++line_;
        ++pos_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        return;
      }
    }
  }

  bool take(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  static bool is_word_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '+';
  }

  std::string word() {
    skip_space();
    const size_t start = pos_;
    while (pos_ < text_.size() && is_word_char(text_[pos_])) ++pos_;
    if (pos_ == start) {
      if (pos_ >= text_.size()) fail_here("unexpected end of file");
      fail_here("unexpected '", text_[pos_], "'");
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  TextMessage parse_fields(char close) {
    TextMessage message;
    while (true) {
      skip_space();
      if (pos_ >= text_.size()) {
        if (close != '\0') fail_here("missing '", close, "'");
        return message;
      }
      if (text_[pos_] == close) {
        ++pos_;
        return message;
      }
      if (++depth_ > kMaxDepth) fail_here("nested more than ", kMaxDepth, " levels deep");
      const std::string name = word();
      const bool colon = take(':');
      skip_space();
      if (take('[')) {
        if (!take(']')) {
          do message.fields.emplace_back(name, parse_value(colon));
          while (take(','));
          if (!take(']')) fail_here("expected ',' or ']' in the list of '", name, "'");
        }
      } else {
        message.fields.emplace_back(name, parse_value(colon));
      }
      --depth_;
      if (!take(',')) take(';');
    }
  }

  TextValue parse_value(bool after_colon) {
    skip_space();
    TextValue value;
    value.line = line_;
    if (take('{')) {
      value.message = std::make_shared<TextMessage>(parse_fields('}'));
    } else if (take('<')) {
      value.message = std::make_shared<TextMessage>(parse_fields('>'));
    } else if (pos_ < text_.size() && (text_[pos_] == '"' || text_[pos_] == '\'')) {
      value.quoted = true;
      // Adjacent quoted strings concatenate, as protobuf's do.
      while (pos_ < text_.size() && (text_[pos_] == '"' || text_[pos_] == '\'')) {
        value.scalar += quoted_string();
        skip_space();
      }
    } else {
      if (!after_colon) fail_here("expected ':' or '{' after a field name");
      value.scalar = word();
    }
    return value;
  }

  std::string quoted_string() {
    const char quote = text_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') fail_here("unterminated string");
      const char c = text_[pos_++];
      if (c == quote) return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail_here("unterminated string");
      const char escaped = text_[pos_++];
      switch (escaped) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '\\':
        case '"':
        case '\'':
          out += escaped;
          break;
        default:
          fail_here("unsupported escape '\\", escaped, "' in a string");
      }
    }
  }

  static constexpr int kMaxDepth = 32;
  std::string_view text_;
  std::string_view source_;
  size_t pos_ = 0;
  int line_ = 1;
  int depth_ = 0;
};

// Reads a TextMessage's fields as the config's, with errors naming the file and line.
class ConfigReader {
 public:
  explicit ConfigReader(std::string_view source) : source_(source) {}

  // Text-format values name their line; JSON values (line 0) name only the source.
  template <typename... Args>
  [[noreturn]] void fail_at(const TextValue& value, const Args&... args) const {
    if (value.line == 0) fail(ErrorKind::invalid_argument, source_, ": ", args...);
    fail(ErrorKind::invalid_argument, source_, ":", value.line, ": ", args...);
  }

  const TextMessage& message(const std::string& name, const TextValue& value) const {
    if (!value.message) fail_at(value, "'", name, "' expects a message ({ ... })");
    return *value.message;
  }

  std::string string(const std::string& name, const TextValue& value) const {
    if (value.message) fail_at(value, "'", name, "' expects a value, got a message");
    return value.scalar;
  }

  int64_t integer(const std::string& name, const TextValue& value, int64_t min_value,
                  int64_t max_value) const {
    const std::string text = string(name, value);
    int64_t number = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
    if (value.quoted || error != std::errc() || end != text.data() + text.size()) {
      fail_at(value, "'", name, "' expects an integer, got '", text, "'");
    }
    if (number < min_value || number > max_value) {
      fail_at(value, "'", name, "' must be in [", min_value, ", ", max_value, "], got ", number);
    }
    return number;
  }

  std::string source_;
};

// Triton's ModelConfig fields kiln accepts without acting on them.
constexpr std::array<std::string_view, 17> kIgnoredTritonFields = {"platform",
                                                                   "backend",
                                                                   "runtime",
                                                                   "optimization",
                                                                   "sequence_batching",
                                                                   "ensemble_scheduling",
                                                                   "model_warmup",
                                                                   "model_operations",
                                                                   "model_transaction_policy",
                                                                   "model_repository_agents",
                                                                   "response_cache",
                                                                   "batch_input",
                                                                   "batch_output",
                                                                   "label_filename",
                                                                   "cc_model_filenames",
                                                                   "metric_tags",
                                                                   "version_label"};

TensorConfig read_tensor(const ConfigReader& reader, const TextMessage& message, bool is_input) {
  TensorConfig tensor;
  for (const auto& [name, value] : message.fields) {
    if (name == "name") {
      tensor.name = reader.string(name, value);
    } else if (name == "data_type") {
      const std::string type = reader.string(name, value);
      tensor.dtype = dtype_from_triton_type(type);
      if (tensor.dtype == DType::undefined) {
        reader.fail_at(value, "data_type ", type, " is not one kiln serves (TYPE_BOOL, TYPE_UINT8..64, ",
                       "TYPE_INT8..64, TYPE_FP16, TYPE_FP32, TYPE_FP64, TYPE_BF16)");
      }
    } else if (name == "dims") {
      tensor.has_dims = true;
      tensor.dims.push_back(reader.integer(name, value, -1, int64_t{1} << 40));
    } else if (name == "format" || name == "reshape" || name == "label_filename" ||
               name == "is_shape_tensor" || name == "allow_ragged_batch" || name == "optional") {
      // Triton fields kiln does not act on.
    } else {
      reader.fail_at(value, "unknown field '", name, "' in an ", is_input ? "input" : "output");
    }
  }
  if (tensor.name.empty())
    fail(ErrorKind::invalid_argument, reader.source_, ": an ", is_input ? "input" : "output", " has no name");
  return tensor;
}

void read_dynamic_batching(const ConfigReader& reader, const TextMessage& message, ModelConfig& config) {
  config.dynamic_batching = true;
  for (const auto& [name, value] : message.fields) {
    if (name == "max_queue_delay_microseconds") {
      config.max_queue_delay_us = reader.integer(name, value, 0, int64_t{60} * 1000 * 1000);
    } else if (name == "preferred_batch_size") {
      config.preferred_batch_sizes.push_back(static_cast<int>(reader.integer(name, value, 1, 1 << 20)));
    } else if (name == "default_queue_policy") {
      for (const auto& [policy_name, policy_value] : reader.message(name, value).fields) {
        if (policy_name == "max_queue_size") {
          config.max_queue_size = static_cast<int>(reader.integer(policy_name, policy_value, 0, 1 << 20));
        } else if (policy_name == "default_timeout_microseconds") {
          config.default_timeout_us =
              reader.integer(policy_name, policy_value, 0, int64_t{3600} * 1000 * 1000);
        } else if (policy_name == "timeout_action" || policy_name == "allow_timeout_override") {
          // Triton's: kiln rejects expired requests and always lets a request set its timeout.
        } else {
          reader.fail_at(policy_value, "unknown field '", policy_name, "' in default_queue_policy");
        }
      }
    } else if (name == "preserve_ordering" || name == "priority_levels" || name == "default_priority_level" ||
               name == "priority_queue_policy") {
      config.ignored_fields.push_back("dynamic_batching." + name);
    } else {
      reader.fail_at(value, "unknown field '", name, "' in dynamic_batching");
    }
  }
}

void read_version_policy(const ConfigReader& reader, const TextMessage& message, VersionPolicy& policy) {
  for (const auto& [name, value] : message.fields) {
    const TextMessage& inner = reader.message(name, value);
    if (name == "latest") {
      policy.kind = VersionPolicy::Kind::latest;
      for (const auto& [field, field_value] : inner.fields) {
        if (field != "num_versions") reader.fail_at(field_value, "unknown field '", field, "' in latest");
        policy.num_versions = static_cast<int>(reader.integer(field, field_value, 1, 1 << 20));
      }
    } else if (name == "all") {
      policy.kind = VersionPolicy::Kind::all;
    } else if (name == "specific") {
      policy.kind = VersionPolicy::Kind::specific;
      for (const auto& [field, field_value] : inner.fields) {
        if (field != "versions") reader.fail_at(field_value, "unknown field '", field, "' in specific");
        policy.versions.push_back(reader.integer(field, field_value, 1, INT64_MAX));
      }
    } else {
      reader.fail_at(value, "version_policy expects latest, all or specific, got '", name, "'");
    }
  }
}

void read_parameters(const ConfigReader& reader, const TextMessage& message, ModelConfig& config) {
  std::string key;
  std::string text;
  bool has_value = false;
  for (const auto& [name, value] : message.fields) {
    if (name == "key") {
      key = reader.string(name, value);
    } else if (name == "value") {
      for (const auto& [field, field_value] : reader.message(name, value).fields) {
        if (field != "string_value")
          reader.fail_at(field_value, "a parameter's value has only string_value, got '", field, "'");
        text = reader.string(field, field_value);
        has_value = true;
      }
    } else {
      reader.fail_at(value, "unknown field '", name, "' in parameters (expected key and value)");
    }
  }
  if (key.empty() || !has_value) {
    fail(ErrorKind::invalid_argument, reader.source_,
         ": a parameters entry needs key and value { string_value }");
  }
  config.parameters.emplace_back(key, text);
}

struct DTypeNames {
  DType dtype;
  std::string_view triton;
  std::string_view protocol;
};
constexpr std::array<DTypeNames, 13> kDTypeNames = {{
    {DType::boolean, "TYPE_BOOL", "BOOL"},
    {DType::u8, "TYPE_UINT8", "UINT8"},
    {DType::u16, "TYPE_UINT16", "UINT16"},
    {DType::u32, "TYPE_UINT32", "UINT32"},
    {DType::u64, "TYPE_UINT64", "UINT64"},
    {DType::i8, "TYPE_INT8", "INT8"},
    {DType::i16, "TYPE_INT16", "INT16"},
    {DType::i32, "TYPE_INT32", "INT32"},
    {DType::i64, "TYPE_INT64", "INT64"},
    {DType::f16, "TYPE_FP16", "FP16"},
    {DType::f32, "TYPE_FP32", "FP32"},
    {DType::f64, "TYPE_FP64", "FP64"},
    {DType::bf16, "TYPE_BF16", "BF16"},
}};

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

// The model's dims as the config states them: -1 for a symbolic or unknown dim.
std::vector<int64_t> config_dims(const ValueInfo& info) {
  std::vector<int64_t> dims;
  for (const Dim& dim : info.shape) dims.push_back(dim.is_known() ? dim.value : -1);
  return dims;
}

void complete_tensors(std::vector<TensorConfig>& configured, const std::vector<ValueInfo>& declared,
                      int max_batch_size, std::string_view what) {
  for (const TensorConfig& tensor : configured) {
    const bool known = std::any_of(declared.begin(), declared.end(),
                                   [&](const ValueInfo& info) { return info.name == tensor.name; });
    KILN_CHECK(known, invalid_argument, "config ", what, " '", tensor.name, "' is not one of the model's ",
               what, "s");
  }
  std::vector<TensorConfig> completed;
  for (const ValueInfo& info : declared) {
    auto given = std::find_if(configured.begin(), configured.end(),
                              [&](const TensorConfig& tensor) { return tensor.name == info.name; });
    TensorConfig tensor;
    if (given != configured.end()) tensor = *given;
    tensor.name = info.name;
    if (tensor.dtype == DType::undefined) tensor.dtype = info.dtype;
    KILN_CHECK(tensor.dtype == info.dtype, invalid_argument, "config ", what, " '", info.name,
               "' has data_type ", triton_type_name(tensor.dtype), ", the model declares ",
               triton_type_name(info.dtype));
    std::vector<int64_t> model_dims = config_dims(info);
    if (max_batch_size > 0) {
      KILN_CHECK(!model_dims.empty() && model_dims[0] < 0, invalid_argument, "max_batch_size ",
                 max_batch_size, " needs a variable first dim on every input and output; the model declares ",
                 what, " '", info.name, "' as ", dims_to_string(info.shape));
      model_dims.erase(model_dims.begin());
    }
    if (!tensor.has_dims) {
      tensor.dims = model_dims;
      tensor.has_dims = true;
    } else if (info.has_shape) {
      bool agrees = tensor.dims.size() == model_dims.size();
      for (size_t i = 0; agrees && i < model_dims.size(); ++i) {
        agrees = model_dims[i] < 0 || tensor.dims[i] == model_dims[i];
      }
      KILN_CHECK(agrees, invalid_argument, "config ", what, " '", info.name, "' has dims ",
                 dims_text(tensor.dims), ", the model declares ", dims_to_string(info.shape),
                 max_batch_size > 0 ? " (config dims leave out the batch dim when max_batch_size > 0)" : "");
    }
    completed.push_back(std::move(tensor));
  }
  configured = std::move(completed);
}

bool leading_dim_variable(const std::vector<ValueInfo>& values) {
  return std::all_of(values.begin(), values.end(), [](const ValueInfo& info) {
    return info.has_shape && !info.shape.empty() && !info.shape[0].is_known();
  });
}

// Protobuf's JSON form of a config (a repository load request's "config") read into the tree the
// text format reads into: objects become messages, arrays repeated fields, the parameters map
// key/value entries, and lowerCamelCase names (protobuf's JSON default) the proto's snake_case.
std::string snake_case(std::string_view name) {
  std::string out;
  for (const char c : name) {
    if (std::isupper(static_cast<unsigned char>(c))) {
      out += '_';
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out;
}

TextValue json_value(const rapidjson::Value& json, std::string_view source, int depth);

TextMessage json_message(const rapidjson::Value& object, std::string_view source, int depth) {
  constexpr int kMaxDepth = 32;
  KILN_CHECK(depth < kMaxDepth, invalid_argument, source, ": nested more than ", kMaxDepth, " levels deep");
  TextMessage message;
  for (const auto& member : object.GetObject()) {
    const std::string name = snake_case({member.name.GetString(), member.name.GetStringLength()});
    const rapidjson::Value& value = member.value;
    if (name == "parameters" && value.IsObject()) {
      for (const auto& entry : value.GetObject()) {
        auto pair = std::make_shared<TextMessage>();
        TextValue key;
        key.scalar.assign(entry.name.GetString(), entry.name.GetStringLength());
        key.quoted = true;
        pair->fields.emplace_back("key", key);
        pair->fields.emplace_back("value", json_value(entry.value, source, depth + 1));
        TextValue wrapped;
        wrapped.message = std::move(pair);
        message.fields.emplace_back(name, std::move(wrapped));
      }
    } else if (value.IsArray()) {
      for (const rapidjson::Value& element : value.GetArray())
        message.fields.emplace_back(name, json_value(element, source, depth + 1));
    } else {
      message.fields.emplace_back(name, json_value(value, source, depth + 1));
    }
  }
  return message;
}

TextValue json_value(const rapidjson::Value& json, std::string_view source, int depth) {
  TextValue value;
  if (json.IsObject()) {
    value.message = std::make_shared<TextMessage>(json_message(json, source, depth));
  } else if (json.IsString()) {
    // Numbers were parsed as their text, and protobuf's JSON writes 64-bit integers as strings:
    // both read as the text format's scalars.
    value.scalar.assign(json.GetString(), json.GetStringLength());
  } else if (json.IsBool()) {
    value.scalar = json.GetBool() ? "true" : "false";
  } else {
    fail(ErrorKind::invalid_argument, source, ": null and nested arrays are not config values");
  }
  return value;
}

ModelConfig read_model_config(const TextMessage& root, std::string_view source) {
  const ConfigReader reader(source);
  ModelConfig config;
  for (const auto& [name, value] : root.fields) {
    if (name == "name") {
      config.name = reader.string(name, value);
    } else if (name == "max_batch_size") {
      config.max_batch_size = static_cast<int>(reader.integer(name, value, 0, kMaxBatchSize));
    } else if (name == "input") {
      config.inputs.push_back(read_tensor(reader, reader.message(name, value), true));
    } else if (name == "output") {
      config.outputs.push_back(read_tensor(reader, reader.message(name, value), false));
    } else if (name == "dynamic_batching") {
      read_dynamic_batching(reader, reader.message(name, value), config);
    } else if (name == "instance_group") {
      int count = 1;
      for (const auto& [field, field_value] : reader.message(name, value).fields) {
        if (field == "count") {
          count = static_cast<int>(reader.integer(field, field_value, 1, kMaxInstances));
        } else if (field == "kind") {
          const std::string kind = reader.string(field, field_value);
          if (kind != "KIND_CPU" && kind != "KIND_AUTO") {
            reader.fail_at(field_value, "instance_group kind ", kind,
                           ": kiln runs on the CPU (KIND_CPU or KIND_AUTO)");
          }
        } else if (field == "name" || field == "gpus" || field == "profile" || field == "passive" ||
                   field == "host_policy" || field == "rate_limiter" || field == "secondary_devices") {
          config.ignored_fields.push_back("instance_group." + field);
        } else {
          reader.fail_at(field_value, "unknown field '", field, "' in instance_group");
        }
      }
      // Several groups add up, as Triton's do.
      config.instance_count = config.instance_count_given ? config.instance_count + count : count;
      config.instance_count_given = true;
      if (config.instance_count > kMaxInstances) {
        reader.fail_at(value, "instance_group counts add up to ", config.instance_count,
                       ", above kiln's limit of ", kMaxInstances);
      }
    } else if (name == "version_policy") {
      read_version_policy(reader, reader.message(name, value), config.version_policy);
    } else if (name == "default_model_filename") {
      config.default_model_filename = reader.string(name, value);
      KILN_CHECK(!config.default_model_filename.empty() &&
                     config.default_model_filename.find('/') == std::string::npos &&
                     config.default_model_filename != "..",
                 invalid_argument, source, ": default_model_filename must be a file name, got '",
                 config.default_model_filename, "'");
    } else if (name == "parameters") {
      read_parameters(reader, reader.message(name, value), config);
    } else if (std::find(kIgnoredTritonFields.begin(), kIgnoredTritonFields.end(), name) !=
               kIgnoredTritonFields.end()) {
      config.ignored_fields.push_back(name);
    } else {
      reader.fail_at(value, "unknown field '", name, "' (kiln reads name, max_batch_size, input, output, ",
                     "dynamic_batching, instance_group, version_policy, default_model_filename, parameters)");
    }
  }
  return config;
}

}  // namespace

ModelConfig parse_model_config(std::string_view text, std::string_view source) {
  return read_model_config(TextParser(text, source).parse(), source);
}

ModelConfig parse_model_config_json(std::string_view text, std::string_view source) {
  // Numbers are kept as their text and read by the config's own integer reader (std::from_chars):
  // RapidJSON 1.1's number parsing has undefined behaviour on extreme exponents.
  rapidjson::Document document;
  document.Parse<rapidjson::kParseIterativeFlag | rapidjson::kParseNumbersAsStringsFlag>(text.data(),
                                                                                         text.size());
  KILN_CHECK(!document.HasParseError(), invalid_argument, source, ": not JSON (",
             rapidjson::GetParseError_En(document.GetParseError()), " at byte ", document.GetErrorOffset(),
             ")");
  KILN_CHECK(document.IsObject(), invalid_argument, source,
             ": expected a JSON object (a model configuration)");
  return read_model_config(json_message(document, source, 0), source);
}

void complete_model_config(ModelConfig& config, const std::vector<ValueInfo>& model_inputs,
                           const std::vector<ValueInfo>& model_outputs) {
  if (config.max_batch_size < 0) {
    config.max_batch_size = leading_dim_variable(model_inputs) && leading_dim_variable(model_outputs) ? 4 : 0;
  }
  complete_tensors(config.inputs, model_inputs, config.max_batch_size, "input");
  complete_tensors(config.outputs, model_outputs, config.max_batch_size, "output");
  for (int size : config.preferred_batch_sizes) {
    KILN_CHECK(size <= config.max_batch_size, invalid_argument, "preferred_batch_size ", size,
               " is above max_batch_size ", config.max_batch_size);
  }
}

DType dtype_from_triton_type(std::string_view type) {
  for (const DTypeNames& names : kDTypeNames) {
    if (names.triton == type) return names.dtype;
  }
  return DType::undefined;
}

std::string_view triton_type_name(DType dtype) {
  for (const DTypeNames& names : kDTypeNames) {
    if (names.dtype == dtype) return names.triton;
  }
  return "TYPE_INVALID";
}

DType dtype_from_protocol_name(std::string_view name) {
  for (const DTypeNames& names : kDTypeNames) {
    if (names.protocol == name) return names.dtype;
  }
  return DType::undefined;
}

std::string_view protocol_dtype_name(DType dtype) {
  for (const DTypeNames& names : kDTypeNames) {
    if (names.dtype == dtype) return names.protocol;
  }
  return "INVALID";
}

}  // namespace kiln::serve
