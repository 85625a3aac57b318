// Softmax, LogSoftmax, Hardmax. Before opset 13 they normalize the input coerced to 2-D at `axis`
// (default 1); from 13 on, along one axis (default -1).
#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

std::vector<TensorInfo> infer_softmax(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  expect_floating(spec, 0);
  const int64_t rank = static_cast<int64_t>(spec.input(0).shape.size());
  normalize_axis(spec.attrs().get_int("axis", spec.opset < 13 ? 1 : -1), rank, (spec.op_type + " axis").c_str());
  return {TensorInfo{spec.input(0).dtype, spec.input(0).shape, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"Softmax", infer_softmax},
    {"LogSoftmax", infer_softmax},
    {"Hardmax", infer_softmax},
};

}  // namespace

std::span<const OpSchema> softmax_schemas() { return kSchemas; }

}  // namespace kiln
