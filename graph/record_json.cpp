#include "graph/record_json.h"

namespace kiln {

void write_fused(JsonWriter& json, std::string_view key, const std::vector<FusedNode>& nodes) {
  json.key(key).begin_array();
  for (const FusedNode& node : nodes)
    json.begin_object().member("op", node.op_type).member("node", node.node).end_object();
  json.end_array();
}

void write_refusals(JsonWriter& json, std::string_view key, const std::vector<Refusal>& refusals) {
  json.key(key).begin_array();
  for (const Refusal& refusal : refusals) {
    json.begin_object()
        .member("backend", refusal.backend)
        .member("kernel", refusal.variant)
        .member("kind", refusal_kind_name(refusal.kind))
        .member("detail", refusal.detail)
        .end_object();
  }
  json.end_array();
}

}  // namespace kiln
