// The HTTP request bodies that control the server rather than infer (JSON; an empty body is an
// empty object). The model-repository extension's:
//   index   {"ready": bool}                                 only the models ready for inference
//   load    {"parameters": {"config": "<JSON ModelConfig>"}} the config to load instead of config.pbtxt
//   unload  {"parameters": {}}
// and a live trace's (POST /v2/trace): {"count": N}, the requests to trace.
// Each throws kiln::Error (invalid_argument) naming what is wrong: not JSON, a field of the wrong
// type, a parameter kiln does not take (Triton's "file:" model overrides, unload_dependents).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kiln::serve {

bool parse_index_request(std::string_view body);
std::optional<std::string> parse_load_request(std::string_view body);
void parse_unload_request(std::string_view body);
// The count, `default_count` when the body gives none.
int parse_trace_request(std::string_view body, int default_count);

}  // namespace kiln::serve
