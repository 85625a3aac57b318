// Scaled dot-product attention, kiln's own op: the planner synthesizes it from the nodes an exporter
// writes for attention (graph/passes/attention_pattern.h); ONNX up to opset 17 has no such op, and a
// model cannot name it (it has no schema row).
//   out[n, i, :] = sum_j softmax_j(scale * Q[n, i, :] . K[n, j, :] + mask[n, i, j]) V[n, j, :]
// Inputs: 0 Q [..., L, E]; 1 K [..., S, E], or K transposed [..., E, S] (attribute k_transposed);
// 2 V [..., S, Ev]; 3 (optional) a mask that broadcasts to [..., L, S]. The leading dims ("...",
// batch x heads as exporters fold them) of Q, K and V are equal. Attributes: scale (float),
// k_transposed (0|1), is_causal (0|1: key j > query i is masked, as PyTorch's is_causal with L == S),
// mask_kind (AttentionMask).
#pragma once

#include <string_view>
#include <vector>

#include "ops/op_spec.h"

namespace kiln {

inline constexpr std::string_view kAttentionOp = "ScaledDotProductAttention";

// How input 3 masks the scores.
enum class AttentionMask : uint8_t {
  none,
  additive,  // float, added to the scaled scores (-inf removes a key)
  keep,      // bool, true: the key takes part (PyTorch's scaled_dot_product_attention)
  drop,      // bool, true: the key is removed (masked_fill(mask, -inf))
};
std::string_view attention_mask_name(AttentionMask mask);

struct AttentionParams {
  Shape leading;      // the dims before the last two, equal in Q, K and V
  int64_t batch = 1;  // their product
  int64_t l = 0;      // queries
  int64_t s = 0;      // keys
  int64_t e = 0;      // query/key width (the head dim)
  int64_t ev = 0;     // value width
  float scale = 1;
  bool k_transposed = false;
  bool causal = false;
  AttentionMask mask = AttentionMask::none;
  // Where mask[n, i, j] is (mask broadcast over [..., L, S]): mask_offsets[n] + i * mask_row_stride
  // + j * mask_column_stride elements into the mask; the strides are 0 along broadcast dims.
  std::vector<int64_t> mask_offsets;
  int64_t mask_row_stride = 0;
  int64_t mask_column_stride = 0;
  Shape output;  // [..., L, Ev]
};

// Checks an attention OpSpec and returns its parameters; throws kiln::Error (invalid_argument)
// naming the input and what was expected.
AttentionParams attention_params(const OpSpec& spec);

// The attributes of an attention node.
Attributes attention_attributes(float scale, bool k_transposed, bool causal, AttentionMask mask);

}  // namespace kiln
