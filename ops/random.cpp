// Random ops: RandomNormal and RandomUniform (shape from an attribute), RandomNormalLike and
// RandomUniformLike (shape from their input), Bernoulli (opset 15) and Multinomial (opset 7). The
// generator and how it is seeded are the native kernels' (backends/native/random.cpp).
#include "ops/random.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/onnx_dtype.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

constexpr int64_t kOnnxFloat = 1;  // TensorProto.FLOAT
constexpr int64_t kOnnxInt32 = 6;  // TensorProto.INT32, Multinomial's default

constexpr std::array<std::string_view, 6> kRandomOps = {
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial",
};

bool is_normal(const OpSpec& spec) {
  return spec.op_type.rfind("RandomNormal", 0) == 0;
}
bool is_uniform(const OpSpec& spec) {
  return spec.op_type.rfind("RandomUniform", 0) == 0;
}

// The dtype attribute as a kiln dtype, `fallback` when absent.
DType dtype_attribute(const OpSpec& spec, DType fallback) {
  const Attribute* attribute = spec.attrs().find("dtype");
  if (attribute == nullptr) return fallback;
  const int64_t code = spec.attrs().get_int("dtype", 0);
  const DType dtype = dtype_from_onnx(code);
  KILN_CHECK(dtype != DType::undefined, not_implemented, spec.op_type, " dtype ", onnx_dtype_name(code), " (",
             code, ") is not supported");
  return dtype;
}

// RandomNormal* and RandomUniform* produce float16, float or double only.
void expect_random_float(const OpSpec& spec, DType dtype, bool from_input) {
  KILN_CHECK(dtype == DType::f16 || dtype == DType::f32 || dtype == DType::f64, type_mismatch, spec.op_type,
             " output must be float16, float32 or float64, got ", dtype_name(dtype),
             from_input ? " (the input's dtype; set the dtype attribute)" : "");
}

double finite_attribute(const OpSpec& spec, const char* name, float fallback) {
  const double value = spec.attrs().get_float(name, fallback);
  KILN_CHECK(std::isfinite(value), invalid_model, spec.op_type, " attribute '", name,
             "' must be finite, got ", value);
  return value;
}

std::vector<TensorInfo> infer_random(const OpSpec& spec) {
  const RandomParams params = random_params(spec);
  Shape shape;
  if (spec.op_type == "RandomNormal" || spec.op_type == "RandomUniform") {
    KILN_CHECK(spec.attrs().find("shape") != nullptr, invalid_model, spec.op_type,
               " needs the attribute 'shape'");
    shape = spec.attrs().get_ints("shape");
    for (int64_t dim : shape) {
      KILN_CHECK(dim >= 0, invalid_model, spec.op_type, " attribute 'shape' ", shape_to_string(shape),
                 " has a negative dim");
    }
    checked_numel(shape);
  } else if (spec.op_type == "Multinomial") {
    shape = {spec.input(0).shape[0], params.sample_size};
  } else {
    shape = spec.input(0).shape;
  }
  return {TensorInfo{params.dtype, std::move(shape), {}}};
}

constexpr OpSchema kSchemas[] = {
    {"RandomNormal", infer_random, 1, false},     {"RandomUniform", infer_random, 1, false},
    {"RandomNormalLike", infer_random, 1, false}, {"RandomUniformLike", infer_random, 1, false},
    {"Bernoulli", infer_random, 15, false},       {"Multinomial", infer_random, 7, false},
};

}  // namespace

bool is_random_op(std::string_view op_type) {
  return std::find(kRandomOps.begin(), kRandomOps.end(), op_type) != kRandomOps.end();
}

RandomParams random_params(const OpSpec& spec) {
  const bool like = spec.op_type != "RandomNormal" && spec.op_type != "RandomUniform";
  expect_inputs(spec, like ? 1 : 0, like ? 1 : 0);
  RandomParams params;
  if (spec.attrs().find("seed") != nullptr) {
    params.seeded = true;
    params.seed = spec.attrs().get_float("seed", 0);
    KILN_CHECK(std::isfinite(params.seed), invalid_model, spec.op_type,
               " attribute 'seed' must be finite, got ", params.seed);
  }
  if (spec.op_type == "Bernoulli") {
    expect_floating(spec, 0);
    KILN_CHECK(spec.input(0).dtype != DType::bf16, type_mismatch,
               "Bernoulli input must be float16, float32 or float64, got bfloat16");
    params.dtype = dtype_attribute(spec, spec.input(0).dtype);
    return params;
  }
  if (spec.op_type == "Multinomial") {
    expect_floating(spec, 0);
    const Shape& logits = spec.input(0).shape;
    KILN_CHECK(logits.size() == 2, invalid_argument,
               "Multinomial input must have rank 2 ([batch_size, class_size]), got shape ",
               shape_to_string(logits));
    KILN_CHECK(logits[1] >= 1 || logits[0] == 0, invalid_argument,
               "Multinomial input has no classes to sample from (shape ", shape_to_string(logits), ")");
    params.sample_size = spec.attrs().get_int("sample_size", 1);
    KILN_CHECK(params.sample_size >= 1, invalid_model,
               "Multinomial attribute 'sample_size' must be >= 1, got ", params.sample_size);
    params.dtype = dtype_attribute(spec, dtype_from_onnx(kOnnxInt32));
    KILN_CHECK(params.dtype == DType::i32 || params.dtype == DType::i64, type_mismatch,
               "Multinomial dtype must be int32 (6) or int64 (7), got ", dtype_name(params.dtype));
    return params;
  }
  // RandomNormal*, RandomUniform*: float outputs, dtype from the attribute (float by default) or the input.
  const bool from_input = like && spec.attrs().find("dtype") == nullptr;
  params.dtype = dtype_attribute(spec, like ? spec.input(0).dtype : dtype_from_onnx(kOnnxFloat));
  expect_random_float(spec, params.dtype, from_input);
  if (is_normal(spec)) {
    params.mean = finite_attribute(spec, "mean", 0);
    params.scale = finite_attribute(spec, "scale", 1);
    KILN_CHECK(params.scale >= 0, invalid_model, spec.op_type,
               " attribute 'scale' (a standard deviation) must be >= 0, got ", params.scale);
  } else if (is_uniform(spec)) {
    params.low = finite_attribute(spec, "low", 0);
    params.high = finite_attribute(spec, "high", 1);
    KILN_CHECK(params.low <= params.high, invalid_model, spec.op_type, " attribute 'low' (", params.low,
               ") must not exceed 'high' (", params.high, ")");
  }
  return params;
}

std::span<const OpSchema> random_schemas() {
  return kSchemas;
}

}  // namespace kiln
