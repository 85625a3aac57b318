// The order an Einsum contracts its operands in, two at a time, and what each order costs. The
// cost model, the memory bound and both searches follow numpy.einsum_path (and opt_einsum, which
// PyTorch's torch.backends.opt_einsum uses), so `kiln explain` and numpy report the same counts:
//  - a step contracting terms whose labels together are I, n terms, costs size(I) x (max(1, n - 1)
//    + 1 if the step sums a label away);
//  - no intermediate may hold more elements than the largest operand or the output;
//  - greedy: repeatedly the pair that shrinks the data most (then the cheaper), pairs sharing a
//    label first, never a path dearer than contracting everything at once;
//  - optimal: every order of pairs (factorial in the operand count, so refused above
//    kMaxOptimalOperands), the cheapest;
//  - when nothing fits the memory bound the rest is contracted at once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ops/einsum.h"

namespace kiln {

// How the order is chosen when optimizing (the einsum_strategy setting's choices, in this order).
enum class EinsumStrategy : uint8_t { automatic, greedy, optimal };
inline constexpr std::string_view kEinsumStrategyChoices[] = {"auto", "greedy", "optimal"};

// optimal searches every order of pairs: 8 operands are 793,800 orders, 9 are 28.6 million.
inline constexpr int kMaxOptimalOperands = 8;
// auto: optimal up to this many operands, greedy above (opt_einsum's auto switches to cheaper
// searches at about the same count).
inline constexpr int kAutoOptimalOperands = 4;

struct EinsumContraction {
  // Positions in the operand list before this step; the result is appended at its end (numpy's
  // convention). Usually two; all that are left when nothing fits the memory bound.
  std::vector<int> positions;
  LabelSet result = 0;   // labels the result keeps
  LabelSet removed = 0;  // labels summed away in this step
  double flops = 0;
};

struct EinsumPath {
  std::string strategy;  // "greedy", "optimal", "left to right" or "one step"
  std::vector<EinsumContraction> steps;
  double naive_flops = 0;      // everything contracted at once
  double optimized_flops = 0;  // the steps' sum + 1, as numpy counts
  double largest_intermediate = 0;

  // "((0, 2), (0, 1)), greedy: 1.810e+02 FLOPs, naive 3.600e+02, largest intermediate 15 elements".
  std::string describe() const;
};

// The path for `equation`: `optimize` off contracts left to right (the first two operands, then the
// result with the next, ...), on uses `strategy`. Throws kiln::Error (invalid_argument) for optimal
// with more than kMaxOptimalOperands operands.
EinsumPath einsum_path(const EinsumEquation& equation, EinsumStrategy strategy, bool optimize);

}  // namespace kiln
