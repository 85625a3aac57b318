// What an op sees of one node at plan time: its type, attributes, opset, and for each input the
// dtype, the concrete shape and (when known at plan time) the value. Shape inference and kernel
// factories take an OpSpec; neither knows about graphs or ONNX files. How a node is executed
// (layouts, precision, fused post-ops) is not an op's concern: backends/base/kernel_request.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/attributes.h"

namespace kiln {

// ONNX's value kinds: a tensor, a sequence of tensors, and optionals of either (an optional holds
// its value, or nothing: an undefined Tensor at run time).
enum class ValueKind : uint8_t { tensor, sequence, optional_tensor, optional_sequence };

std::string_view value_kind_name(ValueKind kind);  // "tensor", "sequence", "optional(tensor)", ...
bool holds_sequence(ValueKind kind);               // sequence or optional(sequence)
bool is_optional(ValueKind kind);
// What an optional holds when it holds something (tensor or sequence); other kinds as they are.
ValueKind held_kind(ValueKind kind);

class Subgraph;

// A value's type and shape at plan time; `value` is set when the data is known (an initializer,
// a folded constant, or an output whose value shape inference could compute, like Shape's).
// For a sequence, dtype and shape are its elements' (the shape when every element has it); for an
// optional, its value's.
struct TensorInfo {
  DType dtype = DType::undefined;
  Shape shape;
  Tensor value;  // undefined when not known at plan time
  ValueKind kind = ValueKind::tensor;
  // False when only the run knows the shape: a sequence's elements differ, an optional may be empty,
  // a control-flow output depends on the branch taken or the iterations run.
  bool shape_known = true;

  bool present() const { return dtype != DType::undefined; }
  bool is_constant() const { return value.defined(); }
  // A plain tensor whose shape planning knows: what every op but the sequence, optional and
  // control-flow ops reads.
  bool is_static_tensor() const { return kind == ValueKind::tensor && shape_known; }
};

// The info of a run-time value: its kind (tensor or sequence), dtype and shape (a sequence's when
// all of its elements share one).
TensorInfo info_of(const Tensor& value);

struct OpSpec {
  std::string op_type;
  std::string domain;  // "" for the default ONNX domain
  std::string node_name;
  int64_t opset = 0;  // the model's opset version for `domain`
  const Attributes* attributes = nullptr;
  std::vector<TensorInfo> inputs;  // absent optional inputs are not present()
  int num_outputs = 1;             // outputs the node declares (optional trailing ones may be "")
  // If's branches, Loop's and Scan's bodies, SequenceMap's body, by attribute name: the graph layer
  // plans each for the inputs it is given. Inputs past the op's own are the values the subgraphs
  // read from enclosing graphs, in the order Subgraph::run takes them after its own.
  std::vector<std::pair<std::string, std::shared_ptr<const Subgraph>>> subgraphs;

  const Attributes& attrs() const { return *attributes; }
  int num_inputs() const { return static_cast<int>(inputs.size()); }
  bool has_input(int index) const { return index < num_inputs() && inputs[index].present(); }
  // Throws invalid_model naming the input when it is absent.
  const TensorInfo& input(int index) const;
  // The value of a plan-time constant input; throws MissingConstantInput when it is only known at
  // run time (kiln plans shapes statically, so shape-defining inputs must be constants; the planner
  // then binds a graph input's value into the plan, or reports the error).
  const Tensor& constant_input(int index, const char* what) const;
  // The subgraph of graph attribute `name`; throws invalid_model when the node has none.
  const Subgraph& subgraph(std::string_view name) const;
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
