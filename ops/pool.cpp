// MaxPool, AveragePool, LpPool, their global forms, and MaxUnpool.
#include "ops/pool.h"

#include <cmath>

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

constexpr double kDefaultLpOrder = 2;

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

std::vector<TensorInfo> infer_global_lp_pool(const OpSpec& spec) {
  lp_order(spec);  // the shape does not depend on p, but a bad p is a malformed model all the same
  return infer_global_pool(spec);
}

// One of MaxUnpool's window attributes: as many values as `fallback` has, each at least `minimum`.
std::vector<int64_t> unpool_attribute(const OpSpec& spec, const char* name, std::vector<int64_t> fallback,
                                      int64_t minimum) {
  const size_t count = fallback.size();
  std::vector<int64_t> values = spec.attrs().get_ints(name, std::move(fallback));
  KILN_CHECK(values.size() == count, invalid_model, "MaxUnpool attribute '", name, "' has ", values.size(),
             " values, expected ", count);
  for (int64_t value : values) {
    KILN_CHECK(value >= minimum, invalid_model, "MaxUnpool attribute '", name, "' values must be >= ", minimum,
               ", got ", value);
  }
  return values;
}

std::vector<TensorInfo> infer_max_unpool(const OpSpec& spec) {
  MaxUnpoolParams params = max_unpool_params(spec);
  return {TensorInfo{spec.input(0).dtype, std::move(params.output), {}}};
}

constexpr OpSchema kSchemas[] = {
    {"MaxPool", infer_pool},
    {"AveragePool", infer_pool},
    {"LpPool", infer_pool},
    {"GlobalAveragePool", infer_global_pool},
    {"GlobalMaxPool", infer_global_pool},
    {"GlobalLpPool", infer_global_lp_pool},
    {"MaxUnpool", infer_max_unpool, 9},
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
  if (spec.op_type == "LpPool") params.p = lp_order(spec);
  return params;
}

double lp_order(const OpSpec& spec) {
  const Attribute* attribute = spec.attrs().find("p");
  double p = kDefaultLpOrder;
  if (attribute != nullptr) {
    KILN_CHECK(attribute->type == Attribute::Type::i || attribute->type == Attribute::Type::f, invalid_model,
               spec.op_type, " attribute 'p' has type ", attribute_type_name(attribute->type),
               ", expected int (float at opset 1)");
    p = attribute->type == Attribute::Type::i ? static_cast<double>(attribute->i) : attribute->f;
  }
  KILN_CHECK(std::isfinite(p) && p > 0, invalid_model, spec.op_type,
             " attribute 'p' must be positive and finite, got ", p);
  return p;
}

MaxUnpoolParams max_unpool_params(const OpSpec& spec) {
  expect_inputs(spec, 2, 3);
  const Shape& x = spec.input(0).shape;
  KILN_CHECK(x.size() >= 3, invalid_argument, "MaxUnpool input X must have rank >= 3 (N, C, spatial...), got ",
             shape_to_string(x));
  expect_dtype(spec, 1, DType::i64);
  KILN_CHECK(spec.input(1).shape == x, invalid_argument, "MaxUnpool indices I have shape ",
             shape_to_string(spec.input(1).shape), ", expected X's shape ", shape_to_string(x));
  const size_t rank = x.size() - 2;
  KILN_CHECK(spec.attrs().has("kernel_shape"), invalid_model, "MaxUnpool needs attribute 'kernel_shape'");
  const std::vector<int64_t> kernel = unpool_attribute(spec, "kernel_shape", std::vector<int64_t>(rank, 1), 1);
  const std::vector<int64_t> strides = unpool_attribute(spec, "strides", std::vector<int64_t>(rank, 1), 1);
  const std::vector<int64_t> pads = unpool_attribute(spec, "pads", std::vector<int64_t>(2 * rank, 0), 0);
  MaxUnpoolParams params;
  params.unpooled = {x[0], x[1]};
  for (size_t d = 0; d < rank; ++d) {
    const int64_t unpadded = (x[d + 2] - 1) * strides[d] + kernel[d];
    const int64_t size = unpadded - pads[d] - pads[d + rank];
    KILN_CHECK(size >= 0, invalid_argument, "MaxUnpool pads ", pads[d], "+", pads[d + rank],
               " exceed the unpooled size ", unpadded, " of spatial dim ", d);
    params.unpooled.push_back(size);
  }
  params.output = params.unpooled;
  if (spec.has_input(2)) {
    expect_dtype(spec, 2, DType::i64);
    const Tensor& output_shape = spec.constant_input(2, "output_shape");
    KILN_CHECK(output_shape.rank() == 1 && output_shape.numel() == static_cast<int64_t>(x.size()),
               invalid_argument, "MaxUnpool output_shape must hold ", x.size(),
               " values (X's rank), got a tensor of shape ", shape_to_string(output_shape.shape()));
    params.output = output_shape.to_int64_vector();
    for (size_t d = 0; d < x.size(); ++d) {
      KILN_CHECK(params.output[d] >= params.unpooled[d], invalid_argument, "MaxUnpool output_shape ",
                 shape_to_string(params.output), " is smaller than the unpooled shape ",
                 shape_to_string(params.unpooled), " in dim ", d);
    }
  }
  return params;
}

std::span<const OpSchema> pool_schemas() { return kSchemas; }

}  // namespace kiln
