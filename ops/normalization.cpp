#include "ops/op_schema.h"

namespace kiln {

std::span<const OpSchema> normalization_schemas() { return {}; }

}  // namespace kiln
