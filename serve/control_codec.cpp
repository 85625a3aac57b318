#include "serve/control_codec.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <charconv>

#include "core/error.h"

namespace kiln::serve {
namespace {

rapidjson::Document parse_body(std::string_view body, std::string_view what) {
  rapidjson::Document document;
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    document.SetObject();
    return document;
  }
  // Numbers stay text, read by std::from_chars: RapidJSON 1.1's number parsing has undefined
  // behaviour on extreme exponents.
  document.Parse<rapidjson::kParseIterativeFlag | rapidjson::kParseNumbersAsStringsFlag>(body.data(),
                                                                                         body.size());
  KILN_CHECK(!document.HasParseError(), invalid_argument, "the ", what, " request body is not JSON (",
             rapidjson::GetParseError_En(document.GetParseError()), " at byte ", document.GetErrorOffset(),
             ")");
  KILN_CHECK(document.IsObject(), invalid_argument, "the ", what, " request body must be a JSON object");
  return document;
}

// The "parameters" object's members, each checked by `take` (which returns false for a name it does
// not know).
template <typename Take>
void read_parameters(const rapidjson::Value& document, std::string_view what, Take take) {
  const auto found = document.FindMember("parameters");
  if (found == document.MemberEnd()) return;
  KILN_CHECK(found->value.IsObject(), invalid_argument, "the ", what,
             " request's \"parameters\" must be an object");
  for (const auto& member : found->value.GetObject()) {
    const std::string name(member.name.GetString(), member.name.GetStringLength());
    KILN_CHECK(take(name, member.value), invalid_argument, "the ", what, " request's parameter \"", name,
               "\" is not one kiln takes",
               name.rfind("file:", 0) == 0 ? " (model files come from the repository)" : "");
  }
}

}  // namespace

bool parse_index_request(std::string_view body) {
  const rapidjson::Document document = parse_body(body, "index");
  bool ready = false;
  for (const auto& member : document.GetObject()) {
    const std::string_view name(member.name.GetString(), member.name.GetStringLength());
    KILN_CHECK(name == "ready", invalid_argument, "the index request has an unknown field \"", name,
               "\" (it takes \"ready\")");
    KILN_CHECK(member.value.IsBool(), invalid_argument,
               "the index request's \"ready\" must be true or false");
    ready = member.value.GetBool();
  }
  return ready;
}

std::optional<std::string> parse_load_request(std::string_view body) {
  const rapidjson::Document document = parse_body(body, "load");
  std::optional<std::string> config;
  read_parameters(document, "load", [&](const std::string& name, const rapidjson::Value& value) {
    if (name != "config") return false;
    KILN_CHECK(value.IsString(), invalid_argument,
               "the load request's \"config\" must be a string holding the model configuration as JSON");
    config.emplace(value.GetString(), value.GetStringLength());
    return true;
  });
  return config;
}

void parse_unload_request(std::string_view body) {
  const rapidjson::Document document = parse_body(body, "unload");
  read_parameters(document, "unload", [](const std::string&, const rapidjson::Value&) { return false; });
}

int parse_trace_request(std::string_view body, int default_count) {
  const rapidjson::Document document = parse_body(body, "trace");
  int count = default_count;
  for (const auto& member : document.GetObject()) {
    const std::string_view name(member.name.GetString(), member.name.GetStringLength());
    KILN_CHECK(name == "count", invalid_argument, "the trace request has an unknown field \"", name,
               "\" (it takes \"count\")");
    const std::string_view text =
        member.value.IsString() ? std::string_view(member.value.GetString(), member.value.GetStringLength())
                                : "";
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), count);
    KILN_CHECK(!text.empty() && error == std::errc() && end == text.data() + text.size(), invalid_argument,
               "the trace request's \"count\" must be an integer");
  }
  return count;
}

}  // namespace kiln::serve
