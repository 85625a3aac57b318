// LSTM, GRU and RNN: the native kernel against ONNX's equations written out as plain loops in double,
// over every attribute (directions, sequence_lens, initial states, peepholes, clip, activations with
// alpha and beta, linear_before_reset, input_forget, layout), and the errors of malformed nodes.
#include "ops/recurrent.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graph/flops.h"
#include "runtime/threads.h"
#include "tests/unit/op_test_util.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::int_attr;
using testing::OpRun;
using testing::run_op;
using testing::sample_tensor;
using testing::string_attr;

struct Case {
  std::string op = "LSTM";
  std::string direction = "forward";
  int64_t seq = 5;
  int64_t batch = 3;
  int64_t input = 4;
  int64_t hidden = 6;
  bool bias = true;
  std::vector<int32_t> lengths;  // empty: none given
  bool initial = false;
  bool peepholes = false;
  bool batch_first = false;
  float clip = 0.0f;
  bool linear_before_reset = false;
  bool input_forget = false;
  std::vector<std::string> activations;  // empty: the op's defaults
  std::vector<float> alpha;
  std::vector<float> beta;
  bool constant_weights = true;
};

int64_t gates_of(const std::string& op) {
  return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
}
int64_t directions_of(const Case& c) {
  return c.direction == "bidirectional" ? 2 : 1;
}

Attribute strings_attr(std::vector<std::string> values) {
  Attribute attribute;
  attribute.type = Attribute::Type::strings;
  attribute.strings = std::move(values);
  return attribute;
}

Attribute floats_attr(std::vector<float> values) {
  Attribute attribute;
  attribute.type = Attribute::Type::floats;
  attribute.floats = std::move(values);
  return attribute;
}

struct Inputs {
  Tensor x, w, r, b, lengths, initial_h, initial_c, p;
};

Inputs make_inputs(const Case& c) {
  const int64_t nd = directions_of(c);
  const int64_t g = gates_of(c.op);
  const int64_t h = c.hidden;
  Inputs in;
  in.x = sample_tensor(c.batch_first ? Shape{c.batch, c.seq, c.input} : Shape{c.seq, c.batch, c.input}, -1, 1,
                       3);
  in.w = sample_tensor({nd, g * h, c.input}, -0.6f, 0.6f, 5);
  in.r = sample_tensor({nd, g * h, h}, -0.6f, 0.6f, 7);
  if (c.bias) in.b = sample_tensor({nd, 2 * g * h}, -0.5f, 0.5f, 11);
  if (!c.lengths.empty()) in.lengths = Tensor::from_vector(c.lengths, {c.batch});
  const Shape state = c.batch_first ? Shape{c.batch, nd, h} : Shape{nd, c.batch, h};
  if (c.initial) {
    in.initial_h = sample_tensor(state, -1, 1, 13);
    if (c.op == "LSTM") in.initial_c = sample_tensor(state, -1, 1, 17);
  }
  if (c.peepholes) in.p = sample_tensor({nd, 3 * h}, -0.5f, 0.5f, 19);
  return in;
}

// ---- the reference: ONNX's equations, in double ------------------------------------------------

struct Activation {
  std::string name;
  double alpha = 0;
  double beta = 0;
};

double apply(const Activation& a, double x) {
  const std::string& n = a.name;
  if (n == "Sigmoid") return 1 / (1 + std::exp(-x));
  if (n == "Tanh") return std::tanh(x);
  if (n == "Relu") return std::max(x, 0.0);
  if (n == "Affine") return a.alpha * x + a.beta;
  if (n == "LeakyRelu") return x >= 0 ? x : a.alpha * x;
  if (n == "ThresholdedRelu") return x >= a.alpha ? x : 0;
  if (n == "ScaledTanh") return a.alpha * std::tanh(a.beta * x);
  if (n == "HardSigmoid") return std::min(std::max(a.alpha * x + a.beta, 0.0), 1.0);
  if (n == "Elu") return x >= 0 ? x : a.alpha * (std::exp(x) - 1);
  if (n == "Softsign") return x / (1 + std::fabs(x));
  if (n == "Softplus") return std::log(1 + std::exp(x));
  ADD_FAILURE() << "unknown activation " << n;
  return 0;
}

// The functions per direction, alpha and beta consumed in order by the functions that read them.
std::vector<Activation> reference_activations(const Case& c) {
  std::vector<std::string> names = c.activations;
  if (names.empty()) {
    names = c.op == "RNN"   ? std::vector<std::string>{"Tanh"}
            : c.op == "GRU" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                            : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  }
  const size_t per_direction = static_cast<size_t>(gates_of(c.op) == 1 ? 1 : gates_of(c.op) - 1);
  if (directions_of(c) == 2 && names.size() == per_direction) {
    const std::vector<std::string> one_direction = names;
    names.insert(names.end(), one_direction.begin(), one_direction.end());
  }
  size_t next_alpha = 0, next_beta = 0;
  std::vector<Activation> result;
  for (const std::string& name : names) {
    Activation a{name};
    const bool has_alpha = name == "Affine" || name == "LeakyRelu" || name == "ThresholdedRelu" ||
                           name == "ScaledTanh" || name == "HardSigmoid" || name == "Elu";
    const bool has_beta = name == "Affine" || name == "ScaledTanh" || name == "HardSigmoid";
    a.alpha = name == "LeakyRelu" ? 0.01 : name == "HardSigmoid" ? 0.2 : 1.0;
    a.beta = name == "HardSigmoid" ? 0.5 : name == "ScaledTanh" ? 1.0 : 0.0;
    if (has_alpha && next_alpha < c.alpha.size()) a.alpha = c.alpha[next_alpha++];
    if (has_beta && next_beta < c.beta.size()) a.beta = c.beta[next_beta++];
    result.push_back(a);
  }
  return result;
}

struct Outputs {
  std::vector<double> y, y_h, y_c;
};

Outputs reference(const Case& c, const Inputs& in) {
  const int64_t nd = directions_of(c);
  const int64_t g = gates_of(c.op);
  const int64_t h = c.hidden;
  const int64_t functions = c.op == "RNN" ? 1 : g - 1;
  const std::vector<Activation> acts = reference_activations(c);
  auto x_at = [&](int64_t t, int64_t b, int64_t k) {
    return static_cast<double>(
        in.x.data<float>()[(c.batch_first ? b * c.seq + t : t * c.batch + b) * c.input + k]);
  };
  auto state_index = [&](int64_t d, int64_t b) { return (c.batch_first ? b * nd + d : d * c.batch + b) * h; };
  auto clip = [&](double v) {
    return c.clip > 0 ? std::min(std::max(v, -double(c.clip)), double(c.clip)) : v;
  };
  Outputs out;
  out.y.assign(c.seq * nd * c.batch * h, 0.0);
  out.y_h.assign(nd * c.batch * h, 0.0);
  out.y_c.assign(nd * c.batch * h, 0.0);
  for (int64_t d = 0; d < nd; ++d) {
    const float* w = in.w.data<float>() + d * g * h * c.input;
    const float* r = in.r.data<float>() + d * g * h * h;
    const float* wb = c.bias ? in.b.data<float>() + d * 2 * g * h : nullptr;
    const float* rb = c.bias ? wb + g * h : nullptr;
    const float* p = c.peepholes ? in.p.data<float>() + d * 3 * h : nullptr;
    const bool reverse = c.direction == "reverse" || d == 1;
    const Activation& f = acts[d * functions];
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t length = c.lengths.empty() ? c.seq : c.lengths[b];
      std::vector<double> hs(h, 0.0), cs(h, 0.0);
      if (c.initial) {
        for (int64_t j = 0; j < h; ++j) {
          hs[j] = in.initial_h.data<float>()[state_index(d, b) + j];
          if (c.op == "LSTM") cs[j] = in.initial_c.data<float>()[state_index(d, b) + j];
        }
      }
      for (int64_t s = 0; s < length; ++s) {
        const int64_t t = reverse ? length - 1 - s : s;
        // x W^T + Wb and H R^T + Rb per gate row.
        auto xw = [&](int64_t row) {
          double sum = wb ? wb[row] : 0.0;
          for (int64_t k = 0; k < c.input; ++k) sum += x_at(t, b, k) * w[row * c.input + k];
          return sum;
        };
        auto hr = [&](int64_t row, const std::vector<double>& state) {
          double sum = rb ? rb[row] : 0.0;
          for (int64_t k = 0; k < h; ++k) sum += state[k] * r[row * h + k];
          return sum;
        };
        std::vector<double> next_h(h), next_c(h);
        if (c.op == "RNN") {
          for (int64_t j = 0; j < h; ++j) next_h[j] = apply(f, clip(xw(j) + hr(j, hs)));
        } else if (c.op == "GRU") {
          const Activation& ga = acts[d * functions + 1];
          std::vector<double> z(h), rr(h);
          for (int64_t j = 0; j < h; ++j) {
            z[j] = apply(f, clip(xw(j) + hr(j, hs)));
            rr[j] = apply(f, clip(xw(h + j) + hr(h + j, hs)));
          }
          std::vector<double> reset(h);
          for (int64_t j = 0; j < h; ++j) reset[j] = rr[j] * hs[j];
          for (int64_t j = 0; j < h; ++j) {
            const double pre = c.linear_before_reset ? xw(2 * h + j) + rr[j] * hr(2 * h + j, hs)
                                                     : xw(2 * h + j) + hr(2 * h + j, reset);
            const double candidate = apply(ga, clip(pre));
            next_h[j] = (1 - z[j]) * candidate + z[j] * hs[j];
          }
        } else {
          const Activation& ga = acts[d * functions + 1];
          const Activation& ha = acts[d * functions + 2];
          for (int64_t j = 0; j < h; ++j) {
            const double i = apply(f, clip(xw(j) + hr(j, hs) + (p ? p[j] * cs[j] : 0)));
            const double fg =
                c.input_forget
                    ? 1 - i
                    : apply(f, clip(xw(2 * h + j) + hr(2 * h + j, hs) + (p ? p[2 * h + j] * cs[j] : 0)));
            const double cell = apply(ga, clip(xw(3 * h + j) + hr(3 * h + j, hs)));
            next_c[j] = fg * cs[j] + i * cell;
            const double o = apply(f, clip(xw(h + j) + hr(h + j, hs) + (p ? p[h + j] * next_c[j] : 0)));
            next_h[j] = o * apply(ha, next_c[j]);
          }
          cs = next_c;
        }
        hs = next_h;
        for (int64_t j = 0; j < h; ++j) {
          const int64_t y_index =
              c.batch_first ? ((b * c.seq + t) * nd + d) * h : ((t * nd + d) * c.batch + b) * h;
          out.y[y_index + j] = hs[j];
        }
      }
      for (int64_t j = 0; j < h; ++j) {
        out.y_h[state_index(d, b) + j] = hs[j];
        out.y_c[state_index(d, b) + j] = cs[j];
      }
    }
  }
  return out;
}

OpRun make_run(const Case& c, const Inputs& in) {
  OpRun run;
  run.op_type = c.op;
  run.opset = c.batch_first ? 14 : 7;
  run.num_outputs = c.op == "LSTM" ? 3 : 2;
  run.inputs = {in.x, in.w, in.r, in.b, in.lengths, in.initial_h};
  if (c.op == "LSTM") {
    run.inputs.push_back(in.initial_c);
    run.inputs.push_back(in.p);
  }
  run.inputs_are_constants = c.constant_weights;
  run.attributes.set("hidden_size", int_attr(c.hidden));
  run.attributes.set("direction", string_attr(c.direction));
  if (c.batch_first) run.attributes.set("layout", int_attr(1));
  if (c.clip > 0) run.attributes.set("clip", testing::float_attr(c.clip));
  if (c.linear_before_reset) run.attributes.set("linear_before_reset", int_attr(1));
  if (c.input_forget) run.attributes.set("input_forget", int_attr(1));
  if (!c.activations.empty()) run.attributes.set("activations", strings_attr(c.activations));
  if (!c.alpha.empty()) run.attributes.set("activation_alpha", floats_attr(c.alpha));
  if (!c.beta.empty()) run.attributes.set("activation_beta", floats_attr(c.beta));
  return run;
}

void expect_close(const Tensor& actual, const std::vector<double>& expected, const char* what) {
  ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size())) << what;
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    worst = std::max(worst, std::fabs(actual.data<float>()[i] - expected[i]));
  }
  EXPECT_LT(worst, 2e-5) << what;
}

void check(const Case& c) {
  const Inputs in = make_inputs(c);
  const Outputs expected = reference(c, in);
  for (int threads : {1, 2}) {
    ScopedIntraOpThreads guard(threads);
    const std::vector<Tensor> out = run_op(make_run(c, in));
    SCOPED_TRACE(c.op + " " + c.direction + " threads " + std::to_string(threads));
    expect_close(out[0], expected.y, "Y");
    expect_close(out[1], expected.y_h, "Y_h");
    if (c.op == "LSTM") expect_close(out[2], expected.y_c, "Y_c");
  }
}

TEST(Recurrent, EveryCellInEveryDirection) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) {
    for (const char* direction : {"forward", "reverse", "bidirectional"}) {
      Case c;
      c.op = op;
      c.direction = direction;
      check(c);
    }
  }
}

TEST(Recurrent, SequenceLengthsInitialStatesAndNoBias) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) {
    for (const char* direction : {"forward", "reverse", "bidirectional"}) {
      Case c;
      c.op = op;
      c.direction = direction;
      c.batch = 4;
      c.lengths = {5, 2, 0, 4};
      c.initial = true;
      check(c);
      c.bias = false;
      c.lengths.clear();
      check(c);
    }
  }
}

TEST(Recurrent, BatchFirstLayout) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) {
    Case c;
    c.op = op;
    c.direction = "bidirectional";
    c.batch_first = true;
    c.initial = true;
    c.lengths = {3, 5, 1};
    check(c);
  }
}

TEST(Recurrent, GruLinearBeforeReset) {
  for (const char* direction : {"forward", "bidirectional"}) {
    Case c;
    c.op = "GRU";
    c.direction = direction;
    c.linear_before_reset = true;
    c.initial = true;
    check(c);
  }
}

TEST(Recurrent, LstmPeepholesClipAndInputForget) {
  Case c;
  c.peepholes = true;
  c.initial = true;
  check(c);
  c.clip = 0.4f;  // small enough that every gate is clipped somewhere
  check(c);
  c.input_forget = true;
  c.direction = "bidirectional";
  check(c);
}

TEST(Recurrent, ActivationsWithAlphaAndBeta) {
  Case rnn;
  rnn.op = "RNN";
  rnn.direction = "bidirectional";
  rnn.activations = {"LeakyRelu", "ScaledTanh"};
  rnn.alpha = {0.3f, 0.8f};  // LeakyRelu's alpha, then ScaledTanh's
  rnn.beta = {1.5f};         // ScaledTanh's beta
  check(rnn);
  Case gru;
  gru.op = "GRU";
  gru.activations = {"HardSigmoid", "Softsign"};
  gru.alpha = {0.25f};
  gru.beta = {0.45f};
  gru.clip = 1.0f;
  check(gru);
  Case lstm;
  lstm.op = "LSTM";
  lstm.direction = "bidirectional";  // one direction's functions serve both
  lstm.activations = {"Sigmoid", "Elu", "Softplus"};
  lstm.alpha = {0.7f};
  check(lstm);
  for (const char* name : {"Relu", "Affine", "ThresholdedRelu", "Tanh"}) {
    Case c;
    c.op = "RNN";
    c.activations = {name};
    c.alpha = {0.2f};
    c.beta = {0.1f};
    check(c);
  }
}

TEST(Recurrent, WeightsKnownOnlyAtRunTime) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) {
    Case c;
    c.op = op;
    c.direction = "bidirectional";
    c.constant_weights = false;
    c.peepholes = std::string(op) == "LSTM";
    c.initial = true;
    check(c);
  }
}

TEST(Recurrent, HiddenSizeAboveTheGemmBlocks) {
  // Enough hidden units and input width for several of the GEMM's column and depth blocks.
  Case c;
  c.direction = "bidirectional";
  c.seq = 3;
  c.batch = 7;
  c.input = 300;
  c.hidden = 70;
  check(c);
  c.op = "GRU";
  check(c);
}

// ---- malformed nodes -----------------------------------------------------------------------------

std::string error_for(Case c, const std::function<void(OpRun&)>& edit) {
  OpRun run = make_run(c, make_inputs(c));
  edit(run);
  return error_of([&] { run_op(run); });
}

TEST(Recurrent, MalformedNodesAreClearErrors) {
  Case c;
  EXPECT_NE(error_for(c, [](OpRun& run) { run.attributes.set("direction", string_attr("sideways")); })
                .find("direction 'sideways' is not one of forward, reverse, bidirectional"),
            std::string::npos);
  EXPECT_NE(error_for(c, [](OpRun& run) { run.attributes.set("hidden_size", int_attr(5)); })
                .find("input W must have shape [1, 20, 4]"),
            std::string::npos);
  EXPECT_NE(error_for(c,
                      [](OpRun& run) {
                        run.inputs[0] = sample_tensor({5, 3});
                      })
                .find("input X must have rank 3"),
            std::string::npos);
  EXPECT_NE(error_for(c,
                      [](OpRun& run) {
                        run.inputs[3] = sample_tensor({1, 7});
                      })
                .find("input B must have shape"),
            std::string::npos);
  EXPECT_NE(error_for(c,
                      [](OpRun& run) {
                        run.attributes.set("activations", strings_attr({"Sigmoid", "Tanh"}));
                      })
                .find("has 2 functions; expected 3 per direction"),
            std::string::npos);
  EXPECT_NE(error_for(c,
                      [](OpRun& run) {
                        run.attributes.set("activations", strings_attr({"Sigmoid", "Tanh", "Cosh"}));
                      })
                .find("activation 'Cosh' is not one of"),
            std::string::npos);
  EXPECT_NE(error_for(c, [](OpRun& run) { run.attributes.set("clip", testing::float_attr(-1)); })
                .find("clip must be positive"),
            std::string::npos);
  EXPECT_NE(error_for(c, [](OpRun& run) { run.attributes.set("linear_before_reset", int_attr(1)); })
                .find("linear_before_reset 1 is a GRU attribute"),
            std::string::npos);
  EXPECT_NE(error_for(c,
                      [](OpRun& run) {
                        run.inputs[4] = Tensor::from_vector<int64_t>({1, 2, 3}, {3});
                      })
                .find("sequence_lens must be int32"),
            std::string::npos);
  // A length beyond the sequence is data: checked when the kernel runs.
  c.lengths = {5, 6, 1};
  EXPECT_NE(error_for(c, [](OpRun&) {}).find("sequence_lens[1] is 6; expected a length in [0, 5]"),
            std::string::npos);
  Case gru;
  gru.op = "GRU";
  EXPECT_NE(error_for(gru,
                      [](OpRun& run) {
                        run.inputs.push_back(Tensor{});
                        run.inputs.push_back(Tensor{});
                      })
                .find("GRU"),
            std::string::npos);
}

TEST(Recurrent, ParamsResolveDefaults) {
  Case c;
  c.op = "GRU";
  c.direction = "bidirectional";
  const Inputs in = make_inputs(c);
  OpRun run = make_run(c, in);
  run.attributes = Attributes{};  // no hidden_size: taken from R
  run.attributes.set("direction", string_attr("bidirectional"));
  OpSpec spec;
  spec.op_type = "GRU";
  spec.opset = 7;
  spec.attributes = &run.attributes;
  for (const Tensor& t : run.inputs)
    spec.inputs.push_back(
        TensorInfo{t.defined() ? t.dtype() : DType::undefined, t.defined() ? t.shape() : Shape{}, {}});
  const RecurrentParams p = recurrent_params(spec);
  EXPECT_EQ(p.hidden_size, c.hidden);
  EXPECT_EQ(p.num_directions, 2);
  ASSERT_EQ(p.activations.size(), 4u);
  EXPECT_EQ(p.activation(1, 0).kind, RecurrentActivationKind::sigmoid);
  EXPECT_EQ(p.activation(1, 1).kind, RecurrentActivationKind::tanh);
}

TEST(Recurrent, FlopsCountBothProductsOfEveryStep) {
  StepRecord step;
  step.op_type = "LSTM";
  // seq 20, batch 2, input 64; bidirectional, hidden 128: W [2, 512, 64], R [2, 512, 128].
  step.input_shapes = {{20, 2, 64}, {2, 512, 64}, {2, 512, 128}};
  step.output_shapes = {{20, 2, 2, 128}};
  EXPECT_EQ(step_flops(step), 2 * 40 * 1024 * (64 + 128));
  step.op_type = "ConvTranspose";  // x [1, 4, 5, 5], w [4, 3, 2, 2]: 3 * 4 products per input element
  step.input_shapes = {{1, 4, 5, 5}, {4, 3, 2, 2}};
  step.output_shapes = {{1, 3, 10, 10}};
  EXPECT_EQ(step_flops(step), 2 * 100 * 12);
}

}  // namespace
}  // namespace kiln
