#include <array>

#include "ops/op_schema.h"

namespace kiln {
namespace {

using FamilyTable = std::span<const OpSchema> (*)();

constexpr std::array kFamilies = {
    conv_schemas,      pool_schemas,     matmul_schemas,         elementwise_schemas,   normalization_schemas,
    softmax_schemas,   reduce_schemas,   shape_schemas,          data_movement_schemas, einsum_schemas,
    resize_schemas,    indexing_schemas, data_dependent_schemas, roi_schemas,           grid_sample_schemas,
    recurrent_schemas, signal_schemas,   random_schemas,         sequence_schemas,      control_flow_schemas,
    quantize_schemas,
};

}  // namespace

const OpSchema* find_op_schema(std::string_view op_type, std::string_view domain) {
  const std::string_view wanted = is_default_domain(domain) ? std::string_view{} : domain;
  for (FamilyTable family : kFamilies) {
    for (const OpSchema& schema : family()) {
      if (schema.op_type == op_type && schema.domain == wanted) return &schema;
    }
  }
  return nullptr;
}

std::vector<const OpSchema*> all_op_schemas() {
  std::vector<const OpSchema*> schemas;
  for (FamilyTable family : kFamilies) {
    for (const OpSchema& schema : family()) schemas.push_back(&schema);
  }
  return schemas;
}

}  // namespace kiln
