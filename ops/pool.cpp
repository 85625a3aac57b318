#include "ops/op_schema.h"

namespace kiln {

std::span<const OpSchema> pool_schemas() { return {}; }

}  // namespace kiln
