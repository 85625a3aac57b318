// What an op sees of one node at plan time: its type, attributes, opset, and for each input the
// dtype, the concrete shape and (when known at plan time) the value. Shape inference and kernel
// factories take an OpSpec; neither knows about graphs or ONNX files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/attributes.h"

namespace kiln {

// How a value's elements are stored. Shapes are always logical (ONNX's NCHW); a value stored
// channels-last holds a 4-D [N, C, H, W] value as a contiguous [N, H, W, C] tensor, the layout
// oneDNN's fastest convolutions read and write. The *_bf16 layouts store a float32 value as
// bfloat16 (reduced precision, see Precision): its logical dtype stays f32, only the storage
// changes. Constants, graph inputs and outputs are plain.
enum class Layout : uint8_t { plain, nhwc, plain_bf16, nhwc_bf16 };

const char* layout_name(Layout layout);
// The shape of the tensor that stores a value of logical `shape` in `layout`.
Shape stored_shape(const Shape& shape, Layout layout);
// The dtype of that tensor: bf16 for the *_bf16 layouts, `dtype` otherwise.
DType stored_dtype(DType dtype, Layout layout);
bool is_channels_last(Layout layout);
bool is_bf16(Layout layout);

// The arithmetic a convolution or matrix product may use. bf16: weights converted once at plan
// time, activations stored as bfloat16 between such ops, accumulation in float32.
enum class Precision : uint8_t { fp32, bf16 };
const char* precision_name(Precision precision);

// A value's type and shape at plan time; `value` is set when the data is known (an initializer,
// a folded constant, or an output whose value shape inference could compute, like Shape's).
struct TensorInfo {
  DType dtype = DType::undefined;
  Shape shape;
  Tensor value;  // undefined when not known at plan time
  Layout layout = Layout::plain;

  bool present() const { return dtype != DType::undefined; }
  bool is_constant() const { return value.defined(); }
};

// An op the planner fused into the node before it (a convolution or matmul): applied to the
// node's result in order, inside the kernel, before the result is stored.
struct PostOp {
  // bias: a constant added per output column (MatMul + Add); gelu_erf: x * (1 + erf(x / sqrt 2)) / 2
  // matched from the five nodes PyTorch exports for GELU.
  enum class Kind { relu, leaky_relu, clip, sigmoid, tanh, gelu_erf, bias, sum };
  Kind kind = Kind::relu;
  float alpha = 0;        // leaky_relu slope; clip minimum
  float beta = 0;         // clip maximum
  int input = -1;         // sum, bias: index in OpSpec::inputs of the tensor added to the result
  std::string node_name;  // the fused node, for plans and verbose lines
  std::string op_type;
};

const char* post_op_name(PostOp::Kind kind);

struct OpSpec {
  std::string op_type;
  std::string domain;  // "" for the default ONNX domain
  std::string node_name;
  int64_t opset = 0;  // the model's opset version for `domain`
  const Attributes* attributes = nullptr;
  std::vector<TensorInfo> inputs;  // absent optional inputs are not present()
  int num_outputs = 1;             // outputs the node declares (optional trailing ones may be "")
  std::vector<PostOp> post_ops;    // fused followers; a sum's or bias's input is appended to `inputs`
  // Set by the planner for the op families that have a precision setting (Conv, MatMul, Gemm).
  Precision precision = Precision::fp32;
  // Which of a backend's implementations to create: 0 is its first choice; autotune asks for the
  // alternatives (oneDNN lists several per primitive). A backend with fewer refuses.
  int alternative = 0;

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

// Checks shared by many ops; each throws kiln::Error with the op's wording.
void expect_inputs(const OpSpec& spec, int min_count, int max_count);
void expect_rank(const OpSpec& spec, int input, int64_t rank);
void expect_dtype(const OpSpec& spec, int input, DType dtype);
void expect_floating(const OpSpec& spec, int input);
// Normalises an axis in [-rank, rank) to [0, rank); throws naming `what` when out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* what = "axis");

}  // namespace kiln
