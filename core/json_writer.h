// Writes JSON text: commas, quoting and escaping handled, nothing parsed. Used by the profiler's
// exports and the CLI's --json outputs, which must stay valid whatever a model names its nodes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

class JsonWriter {
 public:
  const std::string& text() const { return text_; }
  std::string take() { return std::move(text_); }

  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }

  // An object's member name; the next value (or begin_*) is its value.
  JsonWriter& key(std::string_view name) {
    separate();
    quote(name);
    text_ += ": ";
    after_key_ = true;
    return *this;
  }

  JsonWriter& value(std::string_view text) {
    separate();
    quote(text);
    return *this;
  }
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
  JsonWriter& value(bool flag) { return raw(flag ? "true" : "false"); }
  JsonWriter& value(int64_t number) { return raw(std::to_string(number)); }
  JsonWriter& value(uint64_t number) { return raw(std::to_string(number)); }
  JsonWriter& value(int number) { return raw(std::to_string(number)); }
  // `decimals` places; NaN and infinities (not JSON) become null.
  JsonWriter& value(double number, int decimals = 4) {
    if (!std::isfinite(number)) return raw("null");
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.*f", decimals, number);
    return raw(buffer);
  }
  // An array of values (nested vectors become nested arrays: shapes as [[1, 3, 224, 224], ...]).
  template <typename T>
  JsonWriter& value(const std::vector<T>& values) {
    begin_array();
    for (const T& element : values) value(element);
    return end_array();
  }
  JsonWriter& null() { return raw("null"); }
  // Text that is already JSON (a number formatted by the caller).
  JsonWriter& raw(std::string_view json) {
    separate();
    text_ += json;
    return *this;
  }

  template <typename T>
  JsonWriter& member(std::string_view name, const T& member_value) {
    key(name);
    return value(member_value);
  }

 private:
  JsonWriter& open(char bracket) {
    separate();
    text_ += bracket;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& close(char bracket) {
    first_.pop_back();
    text_ += bracket;
    return *this;
  }
  // The comma before a value or key, unless it is the first in its container or follows its key.
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (first_.empty()) return;
    if (!first_.back()) text_ += ", ";
    first_.back() = false;
  }
  void quote(std::string_view text) {
    text_ += '"';
    for (const char c : text) {
      const auto byte = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        text_ += '\\';
        text_ += c;
      } else if (byte < 0x20) {
        char escaped[8];
        std::snprintf(escaped, sizeof escaped, "\\u%04x", byte);
        text_ += escaped;
      } else {
        text_ += c;
      }
    }
    text_ += '"';
  }

  std::string text_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace kiln
