// LSTM, GRU and RNN: one layer of a recurrent network over a whole sequence, as ONNX defines them.
// Their attributes and input shapes are parsed once here, every default resolved, so shape
// inference and each backend's kernel see the same description.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op_spec.h"

namespace kiln {

enum class RecurrentCell { rnn, gru, lstm };
enum class RecurrentDirection { forward, reverse, bidirectional };

// The activation functions ONNX's recurrent ops name (their `activations` attribute).
enum class RecurrentActivationKind {
  relu,
  tanh,
  sigmoid,
  affine,            // alpha * x + beta
  leaky_relu,        // x >= 0 ? x : alpha * x
  thresholded_relu,  // x >= alpha ? x : 0
  scaled_tanh,       // alpha * tanh(beta * x)
  hard_sigmoid,      // min(max(alpha * x + beta, 0), 1)
  elu,               // x >= 0 ? x : alpha * (e^x - 1)
  softsign,          // x / (1 + |x|)
  softplus,          // log(1 + e^x)
};

struct RecurrentActivation {
  RecurrentActivationKind kind = RecurrentActivationKind::tanh;
  float alpha = 0.0f;
  float beta = 0.0f;
};

// The inputs of the three ops, by position.
enum RecurrentInput : int {
  kRecurrentX = 0,
  kRecurrentW = 1,
  kRecurrentR = 2,
  kRecurrentB = 3,
  kRecurrentSequenceLens = 4,
  kRecurrentInitialH = 5,
  kRecurrentInitialC = 6,  // LSTM only
  kRecurrentP = 7,         // LSTM only: peepholes
};

struct RecurrentParams {
  RecurrentCell cell = RecurrentCell::rnn;
  RecurrentDirection direction = RecurrentDirection::forward;
  int64_t num_directions = 1;
  int64_t hidden_size = 0;
  int64_t seq_length = 0;
  int64_t batch = 0;
  int64_t input_size = 0;
  // layout 1 (opset 14): X, Y, the initial and final states batch first.
  bool batch_first = false;
  // Gate pre-activations are clipped to [-clip, clip] when set (clip > 0).
  float clip = 0.0f;
  bool linear_before_reset = false;  // GRU: Rh applies to H before the reset gate scales it
  bool input_forget = false;         // LSTM: the forget gate is 1 - the input gate
  // The cell's functions for each direction in turn: f (RNN); f, g (GRU); f, g, h (LSTM).
  std::vector<RecurrentActivation> activations;

  // Gates per direction in W, R and half of B: 1 (RNN), 3 (GRU: z, r, h), 4 (LSTM: i, o, f, c).
  int64_t gates() const { return cell == RecurrentCell::rnn ? 1 : cell == RecurrentCell::gru ? 3 : 4; }
  // Activation functions per direction.
  int64_t functions() const { return cell == RecurrentCell::rnn ? 1 : cell == RecurrentCell::gru ? 2 : 3; }
  const RecurrentActivation& activation(int64_t direction, int64_t index) const {
    return activations[direction * functions() + index];
  }
};

// Parses and validates an LSTM, GRU or RNN node (opsets 7 and 14): attributes, and the shapes and
// dtypes of every present input. Throws kiln::Error naming the attribute or input that is wrong.
RecurrentParams recurrent_params(const OpSpec& spec);

}  // namespace kiln
