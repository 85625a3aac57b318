#include "ops/einsum_path.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <numeric>

#include "core/error.h"

namespace kiln {
namespace {

// The labels' sizes, and the contraction arithmetic both searches share.
class Costs {
 public:
  explicit Costs(const EinsumEquation& equation) : equation_(equation) {}

  double size(LabelSet labels) const {
    double elements = 1;
    for (; labels != 0; labels &= labels - 1)
      elements *= static_cast<double>(equation_.sizes[static_cast<size_t>(std::countr_zero(labels))]);
    return elements;
  }
  // An operand's elements as numpy counts a term: a repeated label counts each time.
  double term_size(const std::vector<int>& labels) const {
    double elements = 1;
    for (int label : labels) elements *= static_cast<double>(equation_.sizes[static_cast<size_t>(label)]);
    return elements;
  }
  static double flops(double contracted_size, bool sums, size_t terms) {
    return contracted_size * static_cast<double>(std::max<size_t>(1, terms - 1) + (sums ? 1 : 0));
  }

 private:
  const EinsumEquation& equation_;
};

// Contracting `positions` of `operands` (label sets), with `output` kept: what numpy's
// _find_contraction computes.
struct Contraction {
  LabelSet result = 0;
  LabelSet removed = 0;
  LabelSet contracted = 0;          // every label of the contracted terms
  std::vector<LabelSet> remaining;  // the operands after the step, the result last
};

Contraction contract(const std::vector<int>& positions, const std::vector<LabelSet>& operands,
                     LabelSet output) {
  Contraction c;
  LabelSet kept = output;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (std::find(positions.begin(), positions.end(), static_cast<int>(i)) != positions.end()) {
      c.contracted |= operands[i];
    } else {
      c.remaining.push_back(operands[i]);
      kept |= operands[i];
    }
  }
  c.result = kept & c.contracted;
  c.removed = c.contracted & ~c.result;
  c.remaining.push_back(c.result);
  return c;
}

std::vector<int> all_positions(size_t count) {
  std::vector<int> positions(count);
  std::iota(positions.begin(), positions.end(), 0);
  return positions;
}

// Greedy, as numpy's _greedy_path: candidate pairs keep their (stale) score once computed and are
// renumbered as the operand list shrinks; the first best candidate wins ties.
std::vector<std::vector<int>> greedy_order(std::vector<LabelSet> operands, LabelSet output,
                                           const Costs& costs, double memory_limit) {
  struct Candidate {
    double removed_size;  // larger first
    double cost;          // then cheaper
    int x, y;
    std::vector<LabelSet> remaining;
  };
  const Contraction everything = contract(all_positions(operands.size()), operands, output);
  const double naive =
      Costs::flops(costs.size(everything.contracted), everything.removed != 0, operands.size());
  double path_cost = 0;
  const auto consider = [&](int x, int y, std::vector<Candidate>& into) {
    Contraction c = contract({x, y}, operands, output);
    const double new_size = costs.size(c.result);
    if (new_size > memory_limit) return;
    const double removed_size = costs.size(operands[static_cast<size_t>(x)]) +
                                costs.size(operands[static_cast<size_t>(y)]) - new_size;
    const double cost = Costs::flops(costs.size(c.contracted), c.removed != 0, 2);
    if (path_cost + cost > naive) return;
    into.push_back({removed_size, cost, x, y, std::move(c.remaining)});
  };

  std::vector<std::vector<int>> path;
  std::vector<Candidate> known;
  std::vector<std::pair<int, int>> pairs;
  for (int x = 0; x < static_cast<int>(operands.size()); ++x) {
    for (int y = x + 1; y < static_cast<int>(operands.size()); ++y) pairs.emplace_back(x, y);
  }
  const size_t steps = operands.size() - 1;
  for (size_t step = 0; step < steps; ++step) {
    for (const auto& [x, y] : pairs) {
      if ((operands[static_cast<size_t>(x)] & operands[static_cast<size_t>(y)]) != 0) consider(x, y, known);
    }
    if (known.empty()) {
      // No pair shares a label (or none fits): any pair, outer products included.
      for (int x = 0; x < static_cast<int>(operands.size()); ++x) {
        for (int y = x + 1; y < static_cast<int>(operands.size()); ++y) consider(x, y, known);
      }
      if (known.empty()) {
        path.push_back(all_positions(operands.size()));
        break;
      }
    }
    size_t best = 0;
    for (size_t i = 1; i < known.size(); ++i) {
      if (known[i].removed_size > known[best].removed_size ||
          (known[i].removed_size == known[best].removed_size && known[i].cost < known[best].cost))
        best = i;
    }
    const Candidate chosen = known[best];
    // The other candidates, renumbered for the list after `chosen`: their operands minus chosen's
    // pair, chosen's result inserted before their own result.
    std::vector<Candidate> renumbered;
    for (Candidate& candidate : known) {
      if (candidate.x == chosen.x || candidate.x == chosen.y || candidate.y == chosen.x ||
          candidate.y == chosen.y)
        continue;
      const auto shift = [&](int position, int a, int b) {
        return position - (position > a) - (position > b);
      };
      candidate.remaining.erase(candidate.remaining.begin() + shift(chosen.y, candidate.x, candidate.y));
      candidate.remaining.erase(candidate.remaining.begin() + shift(chosen.x, candidate.x, candidate.y));
      candidate.remaining.insert(candidate.remaining.end() - 1, chosen.remaining.back());
      const int x = shift(candidate.x, chosen.x, chosen.y);
      const int y = shift(candidate.y, chosen.x, chosen.y);
      candidate.x = x;
      candidate.y = y;
      renumbered.push_back(std::move(candidate));
    }
    known = std::move(renumbered);
    operands = chosen.remaining;
    const int newest = static_cast<int>(operands.size()) - 1;
    pairs.clear();
    for (int x = 0; x < newest; ++x) pairs.emplace_back(x, newest);
    path.push_back({chosen.x, chosen.y});
    path_cost += chosen.cost;
  }
  return path;
}

// Optimal, as numpy's _optimal_path (a breadth-first search over every order of pairs), walked
// depth first: the same orders in the same (lexicographic) order, without holding them all. Orders
// stuck on the memory bound before the deepest level reached are dropped, as there.
class OptimalSearch {
 public:
  OptimalSearch(LabelSet output, const Costs& costs, double memory_limit)
      : output_(output), costs_(costs), memory_limit_(memory_limit) {}

  std::vector<std::vector<int>> run(const std::vector<LabelSet>& operands) {
    std::vector<std::vector<int>> order;
    visit(operands, 0, order);
    std::vector<std::vector<int>> path = best_;
    if (best_depth_ + 1 < operands.size()) path.push_back(all_positions(operands.size() - best_depth_));
    return path;
  }

 private:
  void visit(const std::vector<LabelSet>& operands, double cost, std::vector<std::vector<int>>& order) {
    const size_t depth = order.size();
    if (depth > best_depth_ || (depth == best_depth_ && cost < best_cost_)) {
      best_depth_ = depth;
      best_cost_ = cost;
      best_ = order;
    }
    for (int x = 0; x < static_cast<int>(operands.size()); ++x) {
      for (int y = x + 1; y < static_cast<int>(operands.size()); ++y) {
        const Contraction c = contract({x, y}, operands, output_);
        if (costs_.size(c.result) > memory_limit_) continue;
        order.push_back({x, y});
        visit(c.remaining, cost + Costs::flops(costs_.size(c.contracted), c.removed != 0, 2), order);
        order.pop_back();
      }
    }
  }

  LabelSet output_;
  const Costs& costs_;
  double memory_limit_;
  size_t best_depth_ = 0;
  double best_cost_ = 0;
  std::vector<std::vector<int>> best_;
};

std::string scientific(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3e", value);
  return text;
}

}  // namespace

std::string EinsumPath::describe() const {
  std::string order;
  for (const EinsumContraction& step : steps) {
    std::string positions;
    for (int position : step.positions) positions += str_cat(positions.empty() ? "" : ", ", position);
    order += str_cat(order.empty() ? "" : ", ", "(", positions, step.positions.size() == 1 ? ",)" : ")");
  }
  return str_cat("(", order, "), ", strategy, ": ", scientific(optimized_flops), " FLOPs, naive ",
                 scientific(naive_flops), ", largest intermediate ", scientific(largest_intermediate),
                 " elements");
}

EinsumPath einsum_path(const EinsumEquation& equation, EinsumStrategy strategy, bool optimize) {
  const Costs costs(equation);
  std::vector<LabelSet> operands;
  LabelSet every_label = 0;
  double memory_limit = costs.term_size(equation.output);
  size_t label_uses = 0;
  for (size_t i = 0; i < equation.operands.size(); ++i) {
    operands.push_back(equation.labels_of(i));
    every_label |= operands.back();
    label_uses += static_cast<size_t>(std::popcount(operands.back()));
    memory_limit = std::max(memory_limit, costs.term_size(equation.operands[i]));
  }
  const LabelSet output = equation.output_labels();
  const size_t count = operands.size();

  EinsumPath path;
  path.naive_flops = Costs::flops(costs.size(every_label),
                                  label_uses > static_cast<size_t>(std::popcount(every_label)), count);
  std::vector<std::vector<int>> order;
  if (!optimize) {
    path.strategy = "left to right";
    order.push_back(count == 1 ? std::vector<int>{0} : std::vector<int>{0, 1});
    // Each result goes to the end of the list: the next operand is first, the running product last.
    for (size_t step = 2; step < count; ++step) order.push_back({0, static_cast<int>(count - step)});
  } else if (count <= 2 || every_label == output) {
    // Nothing to order (numpy leaves such equations to one step too).
    path.strategy = "one step";
    order.push_back(all_positions(count));
  } else {
    const bool optimal =
        strategy == EinsumStrategy::optimal ||
        (strategy == EinsumStrategy::automatic && count <= static_cast<size_t>(kAutoOptimalOperands));
    KILN_CHECK(
        !optimal || count <= static_cast<size_t>(kMaxOptimalOperands), invalid_argument,
        "einsum_strategy 'optimal' searches every contraction order (factorial in the operand count) and is "
        "refused above ",
        kMaxOptimalOperands, " operands; this Einsum has ", count, ": use 'greedy' or 'auto'");
    path.strategy = optimal ? "optimal" : "greedy";
    order = optimal ? OptimalSearch(output, costs, memory_limit).run(operands)
                    : greedy_order(operands, output, costs, memory_limit);
  }

  std::vector<LabelSet> current = operands;
  double total = 0;
  for (std::vector<int>& positions : order) {
    Contraction c = contract(positions, current, output);
    EinsumContraction step;
    step.positions = positions;
    step.result = c.result;
    step.removed = c.removed;
    step.flops = Costs::flops(costs.size(c.contracted), c.removed != 0, positions.size());
    total += step.flops;
    path.largest_intermediate = std::max(path.largest_intermediate, costs.size(c.result));
    path.steps.push_back(std::move(step));
    current = std::move(c.remaining);
  }
  path.optimized_flops = total + 1;
  return path;
}

}  // namespace kiln
