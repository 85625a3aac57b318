// Parameters shared by the shape ops' inference and their native kernels.
#pragma once

#include "ops/op_spec.h"

namespace kiln {

// Squeeze/Unsqueeze axes: an attribute before opset 13, an input from 13 on (empty when absent).
std::vector<int64_t> squeeze_axes(const OpSpec& spec);

// Dropout's training_mode (opset 12+ input, a constant) must be false for inference.
void expect_inference_dropout(const OpSpec& spec);

}  // namespace kiln
