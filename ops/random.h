// The random ops: RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike, Bernoulli and
// Multinomial, their parameters as shape inference validated them, and which op types draw random
// numbers. Their schema rows are not foldable: an unseeded node must draw anew on every run, and a
// seeded one gives the same numbers on every run anyway, so running it costs one draw per run and
// keeps large draws out of the plan's constants.
#pragma once

#include <cstdint>
#include <string_view>

#include "ops/op_spec.h"

namespace kiln {

// Whether nodes of `op_type` (default domain) draw random numbers.
bool is_random_op(std::string_view op_type);

struct RandomParams {
  bool seeded = false;
  float seed = 0;  // ONNX's seed attribute, a float
  DType dtype = DType::f32;
  // RandomNormal*: mean and standard deviation; RandomUniform*: the range [low, high).
  double mean = 0;
  double scale = 1;
  double low = 0;
  double high = 1;
  int64_t sample_size = 1;  // Multinomial's draws per batch row
};

RandomParams random_params(const OpSpec& spec);

}  // namespace kiln
