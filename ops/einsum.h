// ONNX Einsum's equation, in numpy's semantics: "bij,bjk->bik" names each operand's dims by a
// letter; a letter shared by operands multiplies along it, a letter missing from the output is summed;
// "..." stands for the leading dims an operand has beyond its letters (broadcast across operands);
// without "->" the output is every letter used once, in alphabetical (ASCII) order, after the "..."
// dims. A letter repeated within one operand takes its diagonal. Dims of size 1 broadcast against a
// letter's other sizes, as numpy does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ops/op_spec.h"

namespace kiln {

// Labels are numbered: letters 'A'..'Z' are 0..25, 'a'..'z' 26..51, the dims "..." stands for
// 52 onwards (the last of them is the last "..." dim), so labels fit a 64-bit set.
inline constexpr int kEinsumLetterLabels = 52;
// The path searches compare pairs of operands (greedy holds a candidate per pair): kiln takes at most
// this many.
inline constexpr int kMaxEinsumOperands = 64;
inline constexpr int kMaxEinsumLabels = 64;
using LabelSet = uint64_t;

struct EinsumEquation {
  std::vector<std::vector<int>> operands;  // each operand's labels, one per dim, in dim order
  std::vector<int> output;                 // the output's labels, in dim order
  std::vector<int64_t> sizes;              // per label: its size (the largest, size-1 dims broadcast)
  int ellipsis_dims = 0;

  LabelSet labels_of(size_t operand) const;
  LabelSet output_labels() const;
  // A label as the equation spells it: 'b', or "...0" for the first dim "..." stands for.
  std::string label_name(int label) const;
  // Labels as numpy writes a term: "bik", with the "..." dims as their own letters past 'z'.
  std::string term(const std::vector<int>& labels) const;
};

// Parses `equation` for operands of `shapes`; throws kiln::Error (invalid_model) naming the operand
// and what was expected (a label count that does not match the rank, sizes that differ, an output
// label no operand has, ...).
EinsumEquation parse_einsum(std::string_view equation, const std::vector<Shape>& shapes);

// The equation of an Einsum node, its operand shapes taken from `spec`.
EinsumEquation einsum_equation(const OpSpec& spec);

}  // namespace kiln
