// kiln's ResidualLayerNorm: LayerNormalization over the last axis of x + residual, the residual
// block's end in a transformer (ONNX Runtime calls its version SkipLayerNormalization). The MHA fast
// path (graph/passes/residual_norm_fusion.cpp) plans an exported Add + LayerNorm as this one step,
// with the attention output's [L, B, E] -> [B, L, E] transposition before the Add folded in as a
// row order. kiln's own op: no schema row, so no model can name it.
//
// Inputs: x, residual [D0, D1, ..., E], scale [E], bias [E]. Attributes: epsilon (float) and
// swap_leading (int): 1 when x is stored [D1, D0, E] (rank 3), rows read in swapped order.
#pragma once

#include <string_view>

namespace kiln {

inline constexpr std::string_view kResidualLayerNormOp = "ResidualLayerNorm";

}  // namespace kiln
