// Runs one op the way a plan would (shape inference, kernel selection, run) for unit tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/attributes.h"

namespace kiln {
class Backend;
}

namespace kiln::testing {

struct OpRun {
  std::string op_type;
  Attributes attributes;
  std::vector<Tensor> inputs;  // undefined Tensor{} for an absent optional input
  int64_t opset = 17;
  int num_outputs = 1;
  // Inputs whose values shape inference may see (shape-defining inputs such as Reshape's shape).
  // By default every input is treated as a plan-time constant.
  bool inputs_are_constants = true;
  std::string domain = "";  // "" for ONNX's ops
};

// Infers output shapes, creates the native reference kernel, allocates outputs and runs it (op tests
// check the native reference; faster backends are tested against it).
std::vector<Tensor> run_op(const OpRun& run);
// The same with `backend`'s kernel; throws not_implemented with its refusal when it has none.
std::vector<Tensor> run_op_on(const Backend& backend, const OpRun& run);

// The message of the kiln::Error `fn` throws (fails the test when it throws nothing).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected a kiln::Error";
  return "";
}

// Attribute builders for tests.
Attribute int_attr(int64_t value);
Attribute float_attr(float value);
Attribute ints_attr(std::vector<int64_t> values);
Attribute string_attr(std::string value);

// Deterministic values in [low, high] (a fixed linear congruential sequence).
std::vector<float> sample_values(int64_t count, float low, float high, uint32_t seed = 1);

// A float32 tensor of `shape` filled with sample_values.
Tensor sample_tensor(const Shape& shape, float low = -3, float high = 3, uint32_t seed = 1);

// Max |a - b| over all elements (both float32, same shape; otherwise +inf).
double max_abs_diff(const Tensor& a, const Tensor& b);

// The multi-index of flat (row-major) index `i` in `shape`, and back.
inline std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return index;
}
inline int64_t ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

}  // namespace kiln::testing
