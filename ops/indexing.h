// Ops that address elements by computed indices or positions: GatherND, ScatterND, ScatterElements,
// Scatter, OneHot, TopK, CumSum, Trilu, ReverseSequence. Their parameters, parsed once for shape
// inference and kernels.
#pragma once

#include <cstdint>
#include <string>

#include "ops/op_spec.h"

namespace kiln {

// How ScatterND and ScatterElements combine an update with the value already there (opsets 16, 18).
enum class ScatterReduction { none, add, mul, max, min };

ScatterReduction scatter_reduction(const OpSpec& spec);

// GatherND: output = indices.shape[:-1] + data.shape[batch_dims + index_depth:].
struct GatherNdParams {
  int64_t batch_dims = 0;
  int64_t index_depth = 0;  // indices.shape[-1]: how many data dims one index tuple addresses
};
GatherNdParams gather_nd_params(const OpSpec& spec);

// The axis ScatterElements, Scatter, CumSum, OneHot and TopK work along, normalised.
int64_t indexing_axis(const OpSpec& spec);

// TopK's k (a plan-time constant: the output's size depends on it).
int64_t topk_k(const OpSpec& spec);

// OneHot's depth (a plan-time constant: the output's size depends on it).
int64_t one_hot_depth(const OpSpec& spec);

}  // namespace kiln
