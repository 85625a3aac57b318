// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.
#include "ops/pool.h"

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

void expect_pool_input(const OpSpec& spec) {
  expect_inputs(spec, 1, 1);
  if (spec.op_type == "MaxPool") {
    const DType dtype = spec.input(0).dtype;
    KILN_CHECK(is_floating(dtype) || dtype == DType::i8 || dtype == DType::u8, type_mismatch,
               "MaxPool input must be floating point, int8 or uint8, got ", dtype_name(dtype));
  } else {
    expect_floating(spec, 0);
  }
  KILN_CHECK(spec.input(0).shape.size() >= 3, invalid_argument, spec.op_type,
             " input must have rank >= 3 (N, C, spatial...), got ", shape_to_string(spec.input(0).shape));
}

std::vector<TensorInfo> infer_pool(const OpSpec& spec) {
  const PoolParams params = pool_params(spec);
  const Shape& x = spec.input(0).shape;
  Shape shape = {x[0], x[1]};
  shape.insert(shape.end(), params.window.output.begin(), params.window.output.end());
  std::vector<TensorInfo> outputs = {TensorInfo{spec.input(0).dtype, shape, {}}};
  if (spec.op_type == "MaxPool" && spec.num_outputs > 1) outputs.push_back(TensorInfo{DType::i64, shape, {}});
  return outputs;
}

std::vector<TensorInfo> infer_global_pool(const OpSpec& spec) {
  expect_pool_input(spec);
  Shape shape = spec.input(0).shape;
  for (size_t d = 2; d < shape.size(); ++d) shape[d] = 1;
  return {TensorInfo{spec.input(0).dtype, shape, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"MaxPool", infer_pool},
    {"AveragePool", infer_pool},
    {"GlobalAveragePool", infer_global_pool},
    {"GlobalMaxPool", infer_global_pool},
};

}  // namespace

PoolParams pool_params(const OpSpec& spec) {
  expect_pool_input(spec);
  PoolParams params;
  const Shape& x = spec.input(0).shape;
  params.input_spatial.assign(x.begin() + 2, x.end());
  const std::vector<int64_t> kernel = spec.attrs().get_ints("kernel_shape");
  KILN_CHECK(!kernel.empty(), invalid_model, spec.op_type, " needs attribute 'kernel_shape'");
  const bool ceil_mode = spec.attrs().get_int("ceil_mode", 0) != 0;
  params.window = window_params(spec, params.input_spatial, kernel, ceil_mode);
  params.count_include_pad = spec.attrs().get_int("count_include_pad", 0) != 0;
  params.storage_order = spec.attrs().get_int("storage_order", 0);
  KILN_CHECK(params.storage_order == 0 || params.storage_order == 1, invalid_model,
             "MaxPool storage_order must be 0 or 1");
  return params;
}

std::span<const OpSchema> pool_schemas() { return kSchemas; }

}  // namespace kiln
