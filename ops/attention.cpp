#include "ops/attention.h"

#include "core/error.h"
#include "ops/broadcast.h"

namespace kiln {
namespace {

Shape leading_dims(const Shape& shape) {
  return Shape(shape.begin(), shape.end() - 2);
}

}  // namespace

std::string_view attention_mask_name(AttentionMask mask) {
  switch (mask) {
    case AttentionMask::none:
      return "none";
    case AttentionMask::additive:
      return "additive";
    case AttentionMask::keep:
      return "boolean (true attends)";
    case AttentionMask::drop:
      return "boolean (true masks)";
  }
  return "?";
}

Attributes attention_attributes(float scale, bool k_transposed, bool causal, AttentionMask mask) {
  Attributes attributes;
  attributes.set_float("scale", scale);
  attributes.set_int("k_transposed", k_transposed ? 1 : 0);
  attributes.set_int("is_causal", causal ? 1 : 0);
  attributes.set_int("mask_kind", static_cast<int64_t>(mask));
  return attributes;
}

AttentionParams attention_params(const OpSpec& spec) {
  expect_inputs(spec, 3, 4);
  AttentionParams p;
  const int64_t mask_kind = spec.attrs().get_int("mask_kind", 0);
  KILN_CHECK(mask_kind >= 0 && mask_kind <= static_cast<int64_t>(AttentionMask::drop), invalid_argument,
             spec.op_type, " mask_kind ", mask_kind, " is not a mask kind (0..3)");
  p.mask = static_cast<AttentionMask>(mask_kind);
  p.scale = spec.attrs().get_float("scale", 1.0f);
  p.k_transposed = spec.attrs().get_int("k_transposed", 0) != 0;
  p.causal = spec.attrs().get_int("is_causal", 0) != 0;
  const char* names[] = {"Q", "K", "V"};
  for (int i = 0; i < 3; ++i) {
    const TensorInfo& input = spec.input(i);
    KILN_CHECK(input.dtype == DType::f32, invalid_argument, spec.op_type, " input ", i, " (", names[i],
               ") must be float32, got ", dtype_name(input.dtype));
    KILN_CHECK(input.shape.size() >= 2, invalid_argument, spec.op_type, " input ", i, " (", names[i],
               ") must have at least 2 dims, got ", shape_to_string(input.shape));
  }
  const Shape& q = spec.input(0).shape;
  const Shape& k = spec.input(1).shape;
  const Shape& v = spec.input(2).shape;
  p.leading = leading_dims(q);
  KILN_CHECK(leading_dims(k) == p.leading && leading_dims(v) == p.leading, invalid_argument, spec.op_type,
             " Q ", shape_to_string(q), ", K ", shape_to_string(k), " and V ", shape_to_string(v),
             " must have the same leading dims");
  p.batch = checked_numel(p.leading);
  p.l = q[q.size() - 2];
  p.e = q.back();
  p.s = p.k_transposed ? k.back() : k[k.size() - 2];
  const int64_t key_width = p.k_transposed ? k[k.size() - 2] : k.back();
  KILN_CHECK(key_width == p.e, invalid_argument, spec.op_type, " K ", shape_to_string(k),
             (p.k_transposed ? " (transposed)" : ""), " has width ", key_width, ", Q ", shape_to_string(q),
             " has ", p.e);
  KILN_CHECK(v[v.size() - 2] == p.s, invalid_argument, spec.op_type, " V ", shape_to_string(v), " has ",
             v[v.size() - 2], " rows, K has ", p.s, " keys");
  p.ev = v.back();
  KILN_CHECK(!p.causal || p.l == p.s, invalid_argument, spec.op_type,
             " is_causal needs as many queries as keys, got ", p.l, " and ", p.s);
  p.output = p.leading;
  p.output.push_back(p.l);
  p.output.push_back(p.ev);

  const bool has_mask = spec.has_input(3);
  KILN_CHECK(has_mask == (p.mask != AttentionMask::none), invalid_argument, spec.op_type, " mask_kind is ",
             attention_mask_name(p.mask), " but the mask input is ", has_mask ? "present" : "absent");
  if (!has_mask) return p;
  const TensorInfo& mask = spec.input(3);
  const DType expected = p.mask == AttentionMask::additive ? DType::f32 : DType::boolean;
  KILN_CHECK(mask.dtype == expected, invalid_argument, spec.op_type, " mask (input 3, ",
             attention_mask_name(p.mask), ") must be ", dtype_name(expected), ", got ",
             dtype_name(mask.dtype));
  Shape scores = p.leading;
  scores.push_back(p.l);
  scores.push_back(p.s);
  bool broadcasts = mask.shape.size() <= scores.size();
  for (size_t d = 0; broadcasts && d < mask.shape.size(); ++d) {
    const int64_t dim = mask.shape[mask.shape.size() - 1 - d];
    broadcasts = dim == 1 || dim == scores[scores.size() - 1 - d];
  }
  KILN_CHECK(broadcasts, invalid_argument, spec.op_type, " mask ", shape_to_string(mask.shape),
             " does not broadcast to the scores ", shape_to_string(scores), " (each dim 1 or the scores')");
  const std::vector<int64_t> strides = broadcast_strides(mask.shape, scores);
  const size_t rank = scores.size();
  p.mask_row_stride = strides[rank - 2];
  p.mask_column_stride = strides[rank - 1];
  p.mask_offsets.resize(static_cast<size_t>(p.batch));
  for (int64_t n = 0; n < p.batch; ++n) {
    int64_t offset = 0;
    int64_t rest = n;
    for (size_t d = rank - 2; d-- > 0;) {
      offset += rest % scores[d] * strides[d];
      rest /= scores[d];
    }
    p.mask_offsets[static_cast<size_t>(n)] = offset;
  }
  return p;
}

}  // namespace kiln
