// A graph attribute (If's branches, a Loop's or Scan's body, SequenceMap's body) as ops and kernels
// see it. The graph layer implements it: it plans the subgraph once per set of input shapes, with
// the settings the enclosing plan was built under, and runs that plan's steps under the step that
// calls run(), so the profiler, verbose and tidy see inside it.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "ops/op_spec.h"

namespace kiln {

class Subgraph {
 public:
  virtual ~Subgraph() = default;

  // The subgraph's own inputs and outputs (ONNX's; the values it reads from enclosing graphs are
  // not counted).
  virtual size_t num_inputs() const = 0;
  virtual size_t num_outputs() const = 0;
  virtual const std::string& name() const = 0;

  // Its outputs for own inputs of these kinds, dtypes and shapes (the enclosing node's captured
  // values are known to it), planning it for them; throws what planning the subgraph throws.
  virtual std::vector<TensorInfo> infer(std::span<const TensorInfo> inputs) const = 0;

  // Per output: true when the graph layer rewrote a Loop body's `Concat(carried, rows)` along axis 0
  // (an append) so that the body returns only `rows`: the Loop appends them to the value it carries
  // in a buffer that grows geometrically, instead of the body copying all of it every iteration.
  // Empty when nothing was rewritten.
  virtual const std::vector<bool>& appended_outputs() const = 0;

  // Runs it on `inputs`, its own inputs followed by the enclosing node's inputs past the op's own
  // (the captured values), and returns its outputs. Plans it first for shapes not seen before.
  // Safe to call from concurrent runs.
  virtual std::vector<Tensor> run(std::span<const Tensor> inputs) const = 0;
};

}  // namespace kiln
