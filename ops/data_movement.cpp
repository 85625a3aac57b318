#include "ops/op_schema.h"

namespace kiln {

std::span<const OpSchema> data_movement_schemas() { return {}; }

}  // namespace kiln
