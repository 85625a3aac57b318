#include "ops/op_schema.h"

namespace kiln {

std::span<const OpSchema> conv_schemas() { return {}; }

}  // namespace kiln
