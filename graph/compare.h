// Where two runs part: the same inputs through two models (a quantized one and its float original),
// or through one model under two settings (bf16 against fp32, Winograd against direct, the native
// reference against the default backends), compared value by value. Each run exposes the values
// both compute as extra outputs; values match by name, and a value the other model quantizes
// (DequantizeLinear(QuantizeLinear(v)), as a QDQ model writes it) matches v.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "backends/settings.h"
#include "graph/graph.h"
#include "graph/session.h"

namespace kiln {

// The values the main graph's nodes compute, in node order.
std::vector<std::string> computed_values(const Model& model);

// `model` with `values` also graph outputs (their types and shapes left to planning).
Model with_outputs(Model model, const std::vector<std::string>& values);

struct ValueComparison {
  std::string name;    // in model A
  std::string b_name;  // in model B: the same, or the DequantizeLinear output quantizing it
  Shape shape;
  bool is_output = false;  // a graph output of model A
  double max_abs_error = 0;
  double mean_abs_error = 0;
  // 10 log10(sum a^2 / sum (a - b)^2): +inf when equal, -inf when A is all zeros and B is not.
  double sqnr_db = std::numeric_limits<double>::infinity();
};

// The (A name, B name) pairs compare_runs compares: every value A computes that B computes under
// the same name or quantizes, in A's node order; a value A quantizes itself is compared through its
// dequantized copy only.
std::vector<std::pair<std::string, std::string>> matching_values(const Model& a, const Model& b);

// Runs A with `a_settings` and B with `b_settings` on `inputs` and compares every matching float32
// value of the same shape, worst (lowest SQNR) first. Throws kiln::Error naming what is wrong when
// the inputs do not fit either model or the models share no value.
std::vector<ValueComparison> compare_runs(const Model& a, const Settings& a_settings, const Model& b,
                                          const Settings& b_settings, const TensorMap& inputs);

}  // namespace kiln
