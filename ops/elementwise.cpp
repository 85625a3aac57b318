#include "ops/op_schema.h"

namespace kiln {

std::span<const OpSchema> elementwise_schemas() { return {}; }

}  // namespace kiln
