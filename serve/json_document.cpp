#include "serve/json_document.h"

#include <rapidjson/error/en.h>
#include <rapidjson/reader.h>

#include <charconv>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace kiln::serve {
namespace {

// Numbers reach the handler as their text (RawNumber), RapidJSON's own conversion never runs.
constexpr unsigned kParseFlags =
    rapidjson::kParseIterativeFlag | rapidjson::kParseNanAndInfFlag | rapidjson::kParseNumbersAsStringsFlag;

// Hands every event to the document being built, numbers converted by std::from_chars.
class NumbersFromChars {
 public:
  explicit NumbersFromChars(rapidjson::Document& document) : document_(document) {}

  bool RawNumber(const char* text, rapidjson::SizeType length, bool) {
    const char* end = text + length;
    const std::string_view number(text, length);
    // No fraction, exponent, NaN or Inf: an integer, kept exact where 64 bits hold it.
    if (number.find_first_of(".eEIN") == std::string_view::npos) {
      if (number.front() == '-') {
        int64_t value = 0;
        const auto [stop, error] = std::from_chars(text, end, value);
        if (error == std::errc() && stop == end) return document_.Int64(value);
      } else {
        uint64_t value = 0;
        const auto [stop, error] = std::from_chars(text, end, value);
        if (error == std::errc() && stop == end) return document_.Uint64(value);
      }
    }
    // RapidJSON checked the grammar; from_chars reads it (and nan, inf, infinity in any case).
    double value = 0;
    const auto [stop, error] = std::from_chars(text, end, value);
    if (error == std::errc() && stop == end) return document_.Double(value);
    constexpr size_t kShown = 40;
    problem = str_cat("the number ", number.substr(0, kShown), number.size() > kShown ? "..." : "",
                      " is beyond a double's range (magnitudes from 4.9e-324 to 1.8e308, or 0)");
    return false;
  }

  bool Null() { return document_.Null(); }
  bool Bool(bool value) { return document_.Bool(value); }
  bool Int(int value) { return document_.Int(value); }
  bool Uint(unsigned value) { return document_.Uint(value); }
  bool Int64(int64_t value) { return document_.Int64(value); }
  bool Uint64(uint64_t value) { return document_.Uint64(value); }
  bool Double(double value) { return document_.Double(value); }
  bool String(const char* text, rapidjson::SizeType length, bool copy) {
    return document_.String(text, length, copy);
  }
  bool StartObject() { return document_.StartObject(); }
  bool Key(const char* text, rapidjson::SizeType length, bool copy) {
    return document_.Key(text, length, copy);
  }
  bool EndObject(rapidjson::SizeType members) { return document_.EndObject(members); }
  bool StartArray() { return document_.StartArray(); }
  bool EndArray(rapidjson::SizeType elements) { return document_.EndArray(elements); }

  std::string problem;  // why RawNumber stopped the parse, if it did

 private:
  rapidjson::Document& document_;
};

}  // namespace

void parse_json_document(std::string_view text, rapidjson::Document& document) {
  NumbersFromChars handler(document);
  rapidjson::ParseResult result;
  // Populate moves the finished root out of the document's parse stack, as Parse does.
  auto generator = [&](rapidjson::Document&) {
    rapidjson::MemoryStream memory(text.data(), text.size());
    rapidjson::EncodedInputStream<rapidjson::UTF8<>, rapidjson::MemoryStream> input(memory);
    rapidjson::Reader reader;
    result = reader.Parse<kParseFlags>(input, handler);
    return !result.IsError();
  };
  document.Populate(generator);
  if (!result.IsError()) return;
  fail(ErrorKind::invalid_argument, "malformed JSON at offset ", result.Offset(), ": ",
       result.Code() == rapidjson::kParseErrorTermination && !handler.problem.empty()
           ? handler.problem
           : std::string(rapidjson::GetParseError_En(result.Code())));
}

}  // namespace kiln::serve
