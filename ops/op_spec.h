// What an op sees of one node at plan time: its type, attributes, opset, and for each input the
// dtype, the concrete shape and (when known at plan time) the value. Shape inference and kernel
// factories take an OpSpec; neither knows about graphs or ONNX files. How a node is executed
// (layouts, precision, fused post-ops) is not an op's concern: backends/base/kernel_request.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/attributes.h"

namespace kiln {

// A value's type and shape at plan time; `value` is set when the data is known (an initializer,
// a folded constant, or an output whose value shape inference could compute, like Shape's).
struct TensorInfo {
  DType dtype = DType::undefined;
  Shape shape;
  Tensor value;  // undefined when not known at plan time

  bool present() const { return dtype != DType::undefined; }
  bool is_constant() const { return value.defined(); }
};

struct OpSpec {
  std::string op_type;
  std::string domain;  // "" for the default ONNX domain
  std::string node_name;
  int64_t opset = 0;  // the model's opset version for `domain`
  const Attributes* attributes = nullptr;
  std::vector<TensorInfo> inputs;  // absent optional inputs are not present()
  int num_outputs = 1;             // outputs the node declares (optional trailing ones may be "")

  const Attributes& attrs() const { return *attributes; }
  int num_inputs() const { return static_cast<int>(inputs.size()); }
  bool has_input(int index) const { return index < num_inputs() && inputs[index].present(); }
  // Throws invalid_model naming the input when it is absent.
  const TensorInfo& input(int index) const;
  // The value of a plan-time constant input; throws MissingConstantInput when it is only known at
  // run time (kiln plans shapes statically, so shape-defining inputs must be constants; the planner
  // then binds a graph input's value into the plan, or reports the error).
  const Tensor& constant_input(int index, const char* what) const;
};

// Thrown by OpSpec::constant_input; `input` is the node input whose value was needed.
class MissingConstantInput : public Error {
 public:
  MissingConstantInput(int input, std::string message)
      : Error(ErrorKind::not_implemented, std::move(message)), input_(input) {}
  int input() const { return input_; }

 private:
  int input_;
};

// ONNX's default domain, which a model may spell "" or "ai.onnx".
bool is_default_domain(std::string_view domain);

// Checks shared by many ops; each throws kiln::Error with the op's wording.
void expect_inputs(const OpSpec& spec, int min_count, int max_count);
void expect_rank(const OpSpec& spec, int input, int64_t rank);
void expect_dtype(const OpSpec& spec, int input, DType dtype);
void expect_floating(const OpSpec& spec, int input);
// Normalises an axis in [-rank, rank) to [0, rank); throws naming `what` when out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* what = "axis");

}  // namespace kiln
