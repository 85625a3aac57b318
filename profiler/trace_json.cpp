// RapidJSON's SAX reader drives a small state machine: the top level (an object or an array), then
// one value at a time built whole while it is open. Parsing is iterative (no recursion however deep
// the file nests) and numbers arrive as text.
#include "profiler/trace_json.h"

#include <rapidjson/error/en.h>
#include <rapidjson/reader.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <type_traits>

#include "core/error.h"

namespace kiln::trace {
namespace {

constexpr unsigned kParseFlags = rapidjson::kParseIterativeFlag | rapidjson::kParseNumbersAsStringsFlag |
                                 rapidjson::kParseValidateEncodingFlag;

// A RapidJSON input stream over a FILE, read in fixed-size blocks, that stops at `max_bytes` (a pipe
// or a file still growing has no size to check up front).
class FileStream {
 public:
  using Ch = char;
  FileStream(std::FILE* file, int64_t max_bytes) : file_(file), max_bytes_(max_bytes) { refill(); }
  Ch Peek() const { return current_ < end_ ? *current_ : '\0'; }
  Ch Take() {
    if (current_ >= end_) return '\0';
    const Ch c = *current_++;
    if (current_ == end_) refill();
    return c;
  }
  size_t Tell() const { return consumed_ + static_cast<size_t>(current_ - buffer_.get()); }
  bool over_cap() const { return over_cap_; }
  bool at_end() const { return current_ >= end_; }  // Peek() also gives 0 for a zero byte in the file
  bool read_error() const { return read_error_; }
  // Writing is not part of reading; RapidJSON only calls these for in-situ parsing.
  Ch* PutBegin() { return nullptr; }
  void Put(Ch) {}
  void Flush() {}
  size_t PutEnd(Ch*) { return 0; }

 private:
  void refill() {
    consumed_ += static_cast<size_t>(end_ - buffer_.get());
    current_ = end_ = buffer_.get();
    if (over_cap_) return;
    const size_t got = std::fread(buffer_.get(), 1, kBlock, file_);
    if (got == 0 && std::ferror(file_)) read_error_ = true;
    end_ = buffer_.get() + got;
    if (max_bytes_ > 0 && static_cast<int64_t>(consumed_ + got) > max_bytes_) {
      over_cap_ = true;
      end_ = buffer_.get();
    }
  }

  static constexpr size_t kBlock = 1 << 16;
  std::FILE* file_;
  int64_t max_bytes_;
  std::unique_ptr<char[]> buffer_ = std::make_unique<char[]>(kBlock);
  char* current_ = buffer_.get();
  char* end_ = buffer_.get();
  size_t consumed_ = 0;
  bool over_cap_ = false;
  bool read_error_ = false;
};

// Builds the value under construction; hands finished events and members to the visitor.
class Handler {
 public:
  Handler(TraceJsonVisitor& visitor, int max_depth) : visitor_(visitor), max_depth_(max_depth) {}

  bool Null() { return scalar(JsonValue::Type::null, {}); }
  bool Bool(bool value) { return scalar(JsonValue::Type::boolean, value ? "true" : "false"); }
  bool RawNumber(const char* text, rapidjson::SizeType length, bool) {
    return scalar(JsonValue::Type::number, std::string_view(text, length));
  }
  bool String(const char* text, rapidjson::SizeType length, bool) {
    return scalar(JsonValue::Type::string, std::string_view(text, length));
  }
  // Numbers arrive as RawNumber (kParseNumbersAsStringsFlag); these complete the handler concept.
  bool Int(int) { return false; }
  bool Uint(unsigned) { return false; }
  bool Int64(int64_t) { return false; }
  bool Uint64(uint64_t) { return false; }
  bool Double(double) { return false; }

  bool StartObject() { return open(JsonValue::Type::object); }
  bool StartArray() { return open(JsonValue::Type::array); }
  bool Key(const char* text, rapidjson::SizeType length, bool) {
    if (open_.empty()) {  // a top-level member
      pending_key_.assign(text, length);
      return true;
    }
    open_.back()->keys.emplace_back(text, length);
    return true;
  }
  bool EndObject(rapidjson::SizeType) { return close(); }
  bool EndArray(rapidjson::SizeType) { return close(); }

  std::string problem;  // why the handler stopped the parse, if it did
  size_t events = 0;

 private:
  enum class Level { start, top_object, events_array, done };

  JsonValue* new_value(JsonValue::Type type) {
    if (!open_.empty()) return &open_.back()->items.emplace_back(JsonValue{type, {}, {}, {}});
    value_ = JsonValue{type, {}, {}, {}};
    return &value_;
  }
  bool scalar(JsonValue::Type type, std::string_view text) {
    if (open_.empty() && level_ != Level::top_object && level_ != Level::events_array)
      return refuse(
          "a trace is a JSON object with \"traceEvents\" or an array of events, not a single value");
    if (open_.empty() && level_ == Level::top_object && pending_key_ == "traceEvents")
      return refuse("\"traceEvents\" must be an array of events");
    if (open_.empty() && level_ == Level::events_array)
      return refuse("event ", events, " is ", type_name(type), ", expected an object");
    JsonValue* value = new_value(type);
    value->text = text;
    if (open_.empty()) finish();
    return true;
  }
  bool open(JsonValue::Type type) {
    if (open_.empty()) {
      if (level_ == Level::start) {
        saw_top_object_ = type == JsonValue::Type::object;
        level_ = saw_top_object_ ? Level::top_object : Level::events_array;
        visitor_.top_level(saw_top_object_);
        return true;
      }
      if (level_ == Level::top_object && pending_key_ == "traceEvents") {
        if (type != JsonValue::Type::array) return refuse("\"traceEvents\" must be an array of events");
        level_ = Level::events_array;
        return true;
      }
      if (level_ == Level::events_array && type != JsonValue::Type::object)
        return refuse("event ", events, " is an array, expected an object");
    }
    if (static_cast<int>(open_.size()) >= max_depth_)
      return refuse(
          "nesting deeper than ", max_depth_, " levels inside one ",
          level_ == Level::events_array ? str_cat("event (event ", events, ")") : "top-level member");
    open_.push_back(new_value(type));
    return true;
  }
  bool close() {
    if (open_.empty()) {  // the end of traceEvents or of the top level
      if (level_ == Level::events_array && saw_top_object_) {
        level_ = Level::top_object;
        pending_key_.clear();
      } else {
        level_ = Level::done;
      }
      return true;
    }
    open_.pop_back();
    if (open_.empty()) finish();
    return true;
  }
  void finish() {
    if (level_ == Level::events_array) {
      visitor_.event(std::move(value_), events++);
    } else {
      visitor_.member(pending_key_, std::move(value_));
    }
    value_ = JsonValue{};
  }
  template <typename... Args>
  bool refuse(const Args&... args) {
    problem = str_cat(args...);
    return false;
  }

  TraceJsonVisitor& visitor_;
  int max_depth_;
  Level level_ = Level::start;
  bool saw_top_object_ = false;
  std::string pending_key_;
  JsonValue value_;
  std::vector<JsonValue*> open_;
};

// Parses the whole stream into `handler`; a failure names the byte offset and what was expected (the
// caller adds the file's name).
template <typename Stream>
void parse(Stream& stream, Handler& handler, int64_t cap, bool over_cap,
           const std::function<bool()>& at_end) {
  rapidjson::Reader reader;
  const rapidjson::ParseResult result = reader.Parse<kParseFlags>(stream, handler);
  if (result) {
    // RapidJSON ends a document at a zero byte: what follows one must not be ignored.
    KILN_CHECK(at_end(), invalid_argument, "a zero byte at byte ", stream.Tell(), " after the JSON ends");
    return;
  }
  if constexpr (std::is_same_v<Stream, FileStream>) over_cap = stream.over_cap();
  if (over_cap)
    fail(ErrorKind::invalid_argument, "larger than the cap of ", cap,
         " bytes (raise it with --max-trace-bytes or max_bytes)");
  if (!handler.problem.empty())
    fail(ErrorKind::invalid_argument, "at byte ", result.Offset(), ": ", handler.problem);
  const bool truncated = result.Code() == rapidjson::kParseErrorObjectMissCommaOrCurlyBracket ||
                         result.Code() == rapidjson::kParseErrorArrayMissCommaOrSquareBracket ||
                         result.Code() == rapidjson::kParseErrorObjectMissName ||
                         result.Code() == rapidjson::kParseErrorObjectMissColon ||
                         result.Code() == rapidjson::kParseErrorValueInvalid ||
                         result.Code() == rapidjson::kParseErrorStringMissQuotationMark ||
                         result.Code() == rapidjson::kParseErrorDocumentEmpty;
  fail(ErrorKind::invalid_argument, "not valid JSON at byte ", result.Offset(), ": ",
       rapidjson::GetParseError_En(result.Code()),
       truncated && stream.Peek() == '\0' ? " (the file ends there: truncated?)" : "", " after ",
       handler.events, " events");
}

}  // namespace

const JsonValue* JsonValue::get(std::string_view key) const {
  if (type != Type::object) return nullptr;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return &items[i];
  }
  return nullptr;
}

namespace {
void append_json(const JsonValue& value, std::string& out) {
  switch (value.type) {
    case JsonValue::Type::null:
      out += "null";
      return;
    case JsonValue::Type::boolean:
    case JsonValue::Type::number:
      out += value.text;
      return;
    case JsonValue::Type::string:
      out += '"';
      for (const char c : value.text) {
        if (c == '"' || c == '\\') {
          out += '\\';
          out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += c;
        }
      }
      out += '"';
      return;
    case JsonValue::Type::array:
    case JsonValue::Type::object: {
      const bool object = value.type == JsonValue::Type::object;
      out += object ? '{' : '[';
      for (size_t i = 0; i < value.items.size(); ++i) {
        if (i > 0) out += ", ";
        if (object) {
          append_json(JsonValue{JsonValue::Type::string, value.keys[i], {}, {}}, out);
          out += ": ";
        }
        append_json(value.items[i], out);
      }
      out += object ? '}' : ']';
      return;
    }
  }
}
}  // namespace

std::string JsonValue::json() const {
  std::string out;
  append_json(*this, out);
  return out;
}

const char* type_name(JsonValue::Type type) {
  switch (type) {
    case JsonValue::Type::null:
      return "null";
    case JsonValue::Type::boolean:
      return "a boolean";
    case JsonValue::Type::number:
      return "a number";
    case JsonValue::Type::string:
      return "a string";
    case JsonValue::Type::array:
      return "an array";
    case JsonValue::Type::object:
      return "an object";
  }
  return "a value";
}

void read_trace_json(const std::string& path, const TraceJsonLimits& limits, TraceJsonVisitor& visitor) {
  std::error_code error;
  KILN_CHECK(!std::filesystem::is_directory(path, error), invalid_argument, "cannot read trace '", path,
             "': it is a directory");
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  KILN_CHECK(file != nullptr, invalid_argument, "cannot open trace '", path, "': ", std::strerror(errno));
  const auto size = std::filesystem::file_size(path, error);
  if (!error && limits.max_bytes > 0 && static_cast<int64_t>(size) > limits.max_bytes)
    fail(ErrorKind::invalid_argument, "trace '", path, "' is ", size, " bytes, over the cap of ",
         limits.max_bytes, " bytes (raise it with --max-trace-bytes or max_bytes)");

  FileStream stream(file.get(), limits.max_bytes);
  while (stream.Peek() == ' ' || stream.Peek() == '\n' || stream.Peek() == '\r' || stream.Peek() == '\t')
    stream.Take();
  const char first = stream.Peek();
  KILN_CHECK(first != '\x1f', invalid_argument, "trace '", path,
             "' is gzip-compressed: decompress it first (gunzip -k '", path, "')");
  KILN_CHECK(!stream.read_error(), invalid_argument, "cannot read trace '", path, "'");
  Handler handler(visitor, limits.max_depth);
  with_context(str_cat("trace '", path, "'"),
               [&] { parse(stream, handler, limits.max_bytes, false, [&] { return stream.at_end(); }); });
  KILN_CHECK(!stream.read_error(), invalid_argument, "cannot read trace '", path, "': a read failed");
}

void read_trace_json_text(std::string_view text, const std::string& name, const TraceJsonLimits& limits,
                          TraceJsonVisitor& visitor) {
  if (limits.max_bytes > 0 && static_cast<int64_t>(text.size()) > limits.max_bytes)
    fail(ErrorKind::invalid_argument, "trace '", name, "' is ", text.size(), " bytes, over the cap of ",
         limits.max_bytes, " bytes (raise it with --max-trace-bytes or max_bytes)");
  // RapidJSON's string stream reads up to a terminating zero. Its UTF-8 validation reads a cut-off
  // multi-byte sequence's continuation bytes past that zero (RapidJSON 1.1.0): zeros to spare.
  std::string copy(text);
  copy.append(4, '\0');
  rapidjson::StringStream stream(copy.c_str());
  const size_t first_byte = text.find_first_not_of(" \n\r\t");
  const char first = first_byte != std::string_view::npos ? text[first_byte] : '\0';
  KILN_CHECK(first != '\x1f', invalid_argument, "trace '", name, "' is gzip-compressed: decompress it first");
  Handler handler(visitor, limits.max_depth);
  with_context(str_cat("trace '", name, "'"),
               [&] { parse(stream, handler, 0, false, [&] { return stream.Tell() == text.size(); }); });
}

}  // namespace kiln::trace
