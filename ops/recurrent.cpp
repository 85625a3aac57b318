// LSTM, GRU and RNN: parameters and shape inference. The equations are in the native kernel
// (backends/native/recurrent.cpp); here, what a node must look like for them to apply.
#include "ops/recurrent.h"

#include <algorithm>
#include <cctype>
#include <span>
#include <string>

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

RecurrentCell cell_of(const OpSpec& spec) {
  if (spec.op_type == "LSTM") return RecurrentCell::lstm;
  if (spec.op_type == "GRU") return RecurrentCell::gru;
  return RecurrentCell::rnn;
}

RecurrentDirection parse_direction(const OpSpec& spec) {
  const std::string direction = spec.attrs().get_string("direction", "forward");
  if (direction == "forward") return RecurrentDirection::forward;
  if (direction == "reverse") return RecurrentDirection::reverse;
  KILN_CHECK(direction == "bidirectional", invalid_model, spec.op_type, " direction '", direction,
             "' is not one of forward, reverse, bidirectional");
  return RecurrentDirection::bidirectional;
}

// Whether each function reads alpha and beta, and their defaults (those of the ONNX op of the same
// name; ScaledTanh has no op, and scales by 1).
struct ActivationInfo {
  const char* name;
  RecurrentActivationKind kind;
  bool has_alpha;
  float alpha;
  bool has_beta;
  float beta;
};

constexpr ActivationInfo kActivations[] = {
    {"relu", RecurrentActivationKind::relu, false, 0.0f, false, 0.0f},
    {"tanh", RecurrentActivationKind::tanh, false, 0.0f, false, 0.0f},
    {"sigmoid", RecurrentActivationKind::sigmoid, false, 0.0f, false, 0.0f},
    {"affine", RecurrentActivationKind::affine, true, 1.0f, true, 0.0f},
    {"leakyrelu", RecurrentActivationKind::leaky_relu, true, 0.01f, false, 0.0f},
    {"thresholdedrelu", RecurrentActivationKind::thresholded_relu, true, 1.0f, false, 0.0f},
    {"scaledtanh", RecurrentActivationKind::scaled_tanh, true, 1.0f, true, 1.0f},
    {"hardsigmoid", RecurrentActivationKind::hard_sigmoid, true, 0.2f, true, 0.5f},
    {"elu", RecurrentActivationKind::elu, true, 1.0f, false, 0.0f},
    {"softsign", RecurrentActivationKind::softsign, false, 0.0f, false, 0.0f},
    {"softplus", RecurrentActivationKind::softplus, false, 0.0f, false, 0.0f},
};

// The functions of every direction. activation_alpha and activation_beta are consumed in the order
// of the functions, each value by the next function that reads one (as ONNX Runtime reads them).
// A bidirectional node may name one direction's functions; the reverse direction then uses them too.
std::vector<RecurrentActivation> parse_activations(const OpSpec& spec, RecurrentCell cell, int64_t functions,
                                                   int64_t num_directions) {
  std::vector<std::string> names;
  if (const Attribute* attribute = spec.attrs().find("activations")) {
    KILN_CHECK(attribute->type == Attribute::Type::strings, invalid_model, spec.op_type,
               " attribute 'activations' must be a list of strings");
    names = attribute->strings;
  } else if (cell == RecurrentCell::rnn) {
    names = {"Tanh"};
  } else if (cell == RecurrentCell::gru) {
    names = {"Sigmoid", "Tanh"};
  } else {
    names = {"Sigmoid", "Tanh", "Tanh"};
  }
  const int64_t count = static_cast<int64_t>(names.size());
  KILN_CHECK(count == functions * num_directions || (num_directions == 2 && count == functions),
             invalid_model, spec.op_type, " attribute 'activations' has ", count, " functions; expected ",
             functions, " per direction (", functions * num_directions, " for ", num_directions, " direction",
             num_directions == 1 ? "" : "s", ")");
  if (count < functions * num_directions) {
    const std::vector<std::string> one_direction = names;
    names.insert(names.end(), one_direction.begin(), one_direction.end());
  }

  const std::vector<float> alphas = spec.attrs().get_floats("activation_alpha");
  const std::vector<float> betas = spec.attrs().get_floats("activation_beta");
  size_t next_alpha = 0;
  size_t next_beta = 0;
  std::vector<RecurrentActivation> activations;
  for (const std::string& name : names) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    const ActivationInfo* info = std::find_if(std::begin(kActivations), std::end(kActivations),
                                              [&](const ActivationInfo& row) { return lower == row.name; });
    KILN_CHECK(info != std::end(kActivations), invalid_model, spec.op_type, " activation '", name,
               "' is not one of Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
               "HardSigmoid, Elu, Softsign, Softplus");
    RecurrentActivation activation{info->kind, info->alpha, info->beta};
    if (info->has_alpha && next_alpha < alphas.size()) activation.alpha = alphas[next_alpha++];
    if (info->has_beta && next_beta < betas.size()) activation.beta = betas[next_beta++];
    activations.push_back(activation);
  }
  return activations;
}

void expect_shape(const OpSpec& spec, int input, const char* name, const Shape& expected,
                  const char* meaning) {
  const Shape& shape = spec.input(input).shape;
  KILN_CHECK(shape == expected, invalid_argument, spec.op_type, " input ", name, " must have shape ",
             shape_to_string(expected), " (", meaning, "), got ", shape_to_string(shape));
}

void expect_same_dtype(const OpSpec& spec, int input, const char* name) {
  const DType dtype = spec.input(input).dtype;
  KILN_CHECK(dtype == spec.input(kRecurrentX).dtype, type_mismatch, spec.op_type, " input ", name,
             " must have X's dtype ", dtype_name(spec.input(kRecurrentX).dtype), ", got ", dtype_name(dtype));
}

std::vector<TensorInfo> infer_recurrent(const OpSpec& spec) {
  const RecurrentParams p = recurrent_params(spec);
  const int64_t max_outputs = p.cell == RecurrentCell::lstm ? 3 : 2;
  KILN_CHECK(spec.num_outputs <= max_outputs, invalid_model, spec.op_type, " has ", spec.num_outputs,
             " outputs; it defines at most ", max_outputs);
  const DType dtype = spec.input(kRecurrentX).dtype;
  const Shape sequence = p.batch_first ? Shape{p.batch, p.seq_length, p.num_directions, p.hidden_size}
                                       : Shape{p.seq_length, p.num_directions, p.batch, p.hidden_size};
  const Shape state = p.batch_first ? Shape{p.batch, p.num_directions, p.hidden_size}
                                    : Shape{p.num_directions, p.batch, p.hidden_size};
  std::vector<TensorInfo> outputs = {TensorInfo{dtype, sequence, {}}};
  for (int i = 1; i < spec.num_outputs; ++i) outputs.push_back(TensorInfo{dtype, state, {}});
  return outputs;
}

constexpr OpSchema kSchemas[] = {
    {"RNN", infer_recurrent, 7},
    {"GRU", infer_recurrent, 7},
    {"LSTM", infer_recurrent, 7},
};

}  // namespace

RecurrentParams recurrent_params(const OpSpec& spec) {
  RecurrentParams p;
  p.cell = cell_of(spec);
  const bool lstm = p.cell == RecurrentCell::lstm;
  expect_inputs(spec, 3, lstm ? 8 : 6);
  p.direction = parse_direction(spec);
  p.num_directions = p.direction == RecurrentDirection::bidirectional ? 2 : 1;
  // layout arrived in opset 14; earlier opsets are always sequence first.
  const int64_t layout = spec.opset >= 14 ? spec.attrs().get_int("layout", 0) : 0;
  KILN_CHECK(layout == 0 || layout == 1, invalid_model, spec.op_type, " layout ", layout, " must be 0 or 1");
  p.batch_first = layout == 1;

  const TensorInfo& x = spec.input(kRecurrentX);
  KILN_CHECK(x.dtype == DType::f32 || x.dtype == DType::f64 || x.dtype == DType::f16, type_mismatch,
             spec.op_type, " input X must be float, double or float16, got ", dtype_name(x.dtype));
  KILN_CHECK(x.shape.size() == 3, invalid_argument, spec.op_type, " input X must have rank 3 (",
             p.batch_first ? "batch, seq_length, input_size" : "seq_length, batch, input_size",
             "), got shape ", shape_to_string(x.shape));
  p.seq_length = x.shape[p.batch_first ? 1 : 0];
  p.batch = x.shape[p.batch_first ? 0 : 1];
  p.input_size = x.shape[2];

  const Shape& r_shape = spec.input(kRecurrentR).shape;
  KILN_CHECK(r_shape.size() == 3, invalid_argument, spec.op_type,
             " input R must have rank 3 (num_directions, gates * hidden_size, hidden_size), got shape ",
             shape_to_string(r_shape));
  p.hidden_size = spec.attrs().get_int("hidden_size", r_shape[2]);
  KILN_CHECK(p.hidden_size > 0, invalid_model, spec.op_type, " hidden_size must be positive, got ",
             p.hidden_size);
  const int64_t gates = p.gates();
  const int64_t h = p.hidden_size;
  const int64_t nd = p.num_directions;
  expect_same_dtype(spec, kRecurrentW, "W");
  expect_same_dtype(spec, kRecurrentR, "R");
  expect_shape(spec, kRecurrentW, "W", {nd, gates * h, p.input_size},
               "num_directions, gates * hidden_size, input_size");
  expect_shape(spec, kRecurrentR, "R", {nd, gates * h, h},
               "num_directions, gates * hidden_size, hidden_size");
  if (spec.has_input(kRecurrentB)) {
    expect_same_dtype(spec, kRecurrentB, "B");
    expect_shape(spec, kRecurrentB, "B", {nd, 2 * gates * h}, "num_directions, 2 * gates * hidden_size");
  }
  if (spec.has_input(kRecurrentSequenceLens)) {
    KILN_CHECK(spec.input(kRecurrentSequenceLens).dtype == DType::i32, type_mismatch, spec.op_type,
               " input sequence_lens must be int32, got ",
               dtype_name(spec.input(kRecurrentSequenceLens).dtype));
    expect_shape(spec, kRecurrentSequenceLens, "sequence_lens", {p.batch}, "batch");
  }
  const Shape state = p.batch_first ? Shape{p.batch, nd, h} : Shape{nd, p.batch, h};
  const char* state_meaning =
      p.batch_first ? "batch, num_directions, hidden_size" : "num_directions, batch, hidden_size";
  if (spec.has_input(kRecurrentInitialH)) {
    expect_same_dtype(spec, kRecurrentInitialH, "initial_h");
    expect_shape(spec, kRecurrentInitialH, "initial_h", state, state_meaning);
  }
  if (lstm && spec.has_input(kRecurrentInitialC)) {
    expect_same_dtype(spec, kRecurrentInitialC, "initial_c");
    expect_shape(spec, kRecurrentInitialC, "initial_c", state, state_meaning);
  }
  if (lstm && spec.has_input(kRecurrentP)) {
    expect_same_dtype(spec, kRecurrentP, "P");
    expect_shape(spec, kRecurrentP, "P", {nd, 3 * h}, "num_directions, 3 * hidden_size");
  }

  if (spec.attrs().has("clip")) {
    p.clip = spec.attrs().get_float("clip", 0.0f);
    KILN_CHECK(p.clip > 0.0f, invalid_model, spec.op_type, " clip must be positive, got ", p.clip);
  }
  const int64_t linear_before_reset = spec.attrs().get_int("linear_before_reset", 0);
  KILN_CHECK(linear_before_reset == 0 || (p.cell == RecurrentCell::gru && linear_before_reset == 1),
             invalid_model, spec.op_type, " linear_before_reset ", linear_before_reset,
             p.cell == RecurrentCell::gru ? " must be 0 or 1" : " is a GRU attribute; it must be 0 here");
  p.linear_before_reset = linear_before_reset == 1;
  const int64_t input_forget = spec.attrs().get_int("input_forget", 0);
  KILN_CHECK(input_forget == 0 || (lstm && input_forget == 1), invalid_model, spec.op_type, " input_forget ",
             input_forget, lstm ? " must be 0 or 1" : " is an LSTM attribute; it must be 0 here");
  p.input_forget = input_forget == 1;
  p.activations = parse_activations(spec, p.cell, p.functions(), nd);
  return p;
}

std::span<const OpSchema> recurrent_schemas() {
  return kSchemas;
}

}  // namespace kiln
