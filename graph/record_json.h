// A step's fused nodes and refusals as JSON, in the one form `kiln explain --json` and kiln traces
// both write (and the trace loader reads back): [{"op", "node"}] and
// [{"backend", "kernel", "kind", "detail"}].
#pragma once

#include <string_view>
#include <vector>

#include "backends/base/refusal.h"
#include "core/json_writer.h"
#include "graph/fused_node.h"

namespace kiln {

void write_fused(JsonWriter& json, std::string_view key, const std::vector<FusedNode>& nodes);
void write_refusals(JsonWriter& json, std::string_view key, const std::vector<Refusal>& refusals);

}  // namespace kiln
