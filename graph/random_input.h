// Seeded random data for model inputs the user did not supply (`kiln run`, `kiln bench`), and for
// runs tidy measures at the shapes a trace recorded.
#pragma once

#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"

namespace kiln {

inline constexpr uint32_t kRandomInputSeed = 0;
inline constexpr int kRandomSequenceLength = 2;

// A tensor of the declared dtype and shape, symbolic or unknown dims set to `symbolic_size`:
// floats uniform in [-1, 1), integers in [0, 9], booleans fair coin flips. A sequence input gets
// kRandomSequenceLength such tensors, an optional one its value.
Tensor random_input(const ValueInfo& info, int64_t symbolic_size, std::mt19937& rng);

// Seeded random values for every one of `inputs`, by name and in graph-input order (the form
// Session::run and Session::plan_for take).
struct RandomInputs {
  std::map<std::string, Tensor> by_name;  // a TensorMap (graph/session.h)
  std::vector<Tensor> ordered;
};
RandomInputs random_inputs(const std::vector<ValueInfo>& inputs, int64_t symbolic_size);
// The same at given shapes, one per input (a trace's run recorded them).
RandomInputs random_inputs(const std::vector<ValueInfo>& inputs, const std::vector<Shape>& shapes);

}  // namespace kiln
