// Native LSTM, GRU and RNN (float32). Each direction projects the whole input sequence through W in
// one GEMM, then walks the sequence step by step: one product of the hidden state with R per step
// (two for a GRU whose reset gate scales H before Rh), and the cell's elementwise equations per
// batch row. Weights that are plan-time constants are packed once, in the GEMM's layout, when the
// kernel is created. A bidirectional layer with two or more threads runs its directions at once,
// each on its own thread: a step's products are too small to split well.
//
// Equations (ONNX's; x the projected input of the step, Wb + Rb folded into one bias):
//   RNN   H = f(x + H R^T + b)
//   GRU   z = f(xz + H Rz^T + bz), r = f(xr + H Rr^T + br)
//         h = g(xh + (r . H) Rh^T + Rbh + Wbh)            linear_before_reset = 0
//         h = g(xh + r . (H Rh^T + Rbh) + Wbh)            linear_before_reset = 1 (PyTorch's GRU)
//         H = (1 - z) . h + z . H
//   LSTM  i = f(xi + H Ri^T + Pi . C + bi), f = f(xf + H Rf^T + Pf . C + bf)   (f = 1 - i: input_forget)
//         C = f . C + i . g(xc + H Rc^T + bc)
//         o = f(xo + H Ro^T + Po . C + bo), H = o . h(C)
// `clip` bounds every pre-activation. A batch row whose sequence_lens entry is shorter stops early:
// its state is kept, and Y is zero past its length.
#include "ops/recurrent.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "backends/base/function_kernel.h"
#include "backends/native/fast_math.h"
#include "backends/native/gemm.h"
#include "backends/native/isa_variant.h"
#include "backends/native/native_backend.h"
#include "backends/native/thread_scratch.h"
#include "core/allocator.h"
#include "runtime/parallel.h"
#include "runtime/threads.h"

namespace kiln::native {
namespace {

// Gate offsets (in units of hidden_size) within a direction's gates, in ONNX's order.
constexpr int64_t kGruUpdate = 0, kGruReset = 1, kGruHidden = 2;
constexpr int64_t kLstmInput = 0, kLstmOutput = 1, kLstmForget = 2, kLstmCell = 3;
// Peepholes are stored i, o, f.
constexpr int64_t kPeepholeInput = 0, kPeepholeOutput = 1, kPeepholeForget = 2;

// Rough scalar operations per element of a cell's equations (activations dominate).
constexpr int64_t kCellCost = 60;

// Offsets into one block of floats are rounded to this many (64 bytes), as the allocator aligns.
constexpr int64_t kAlignFloats = 16;
int64_t aligned(int64_t floats) {
  return (floats + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
}

bool gru_resets_before_product(const RecurrentParams& p) {
  return p.cell == RecurrentCell::gru && !p.linear_before_reset;
}

// One direction's weights, packed for the GEMM, and its folded biases.
struct DirectionWeights {
  PackedB input;      // W^T: input_size x gates * hidden
  PackedB recurrent;  // R^T: hidden x gates * hidden (only z and r for a GRU resetting before Rh)
  std::optional<PackedB> reset_hidden;  // that GRU's Rh^T: hidden x hidden
  const float* bias;                    // gates * hidden: Wb + Rb (a linear_before_reset GRU's h: Wbh)
  const float* hidden_bias;             // linear_before_reset GRU: Rbh, applied inside r . (...)
  const float* peepholes;               // LSTM: Pi, Po, Pf, or null
};

int64_t recurrent_columns(const RecurrentParams& p) {
  return (gru_resets_before_product(p) ? 2 : p.gates()) * p.hidden_size;
}

// Floats one direction's prepared weights take.
int64_t direction_floats(const RecurrentParams& p) {
  const int64_t h = p.hidden_size;
  int64_t floats = aligned(PackedB::floats(p.input_size, p.gates() * h)) +
                   aligned(PackedB::floats(h, recurrent_columns(p))) + aligned(p.gates() * h) + aligned(h) +
                   aligned(3 * h);
  if (gru_resets_before_product(p)) floats += aligned(PackedB::floats(h, h));
  return floats;
}

// Packs W, R, B and P (B and P may be null) into `storage` (direction_floats each direction).
std::vector<DirectionWeights> prepare_weights(const RecurrentParams& p, const float* w, const float* r,
                                              const float* b, const float* peepholes, float* storage) {
  const int64_t h = p.hidden_size;
  const int64_t gate_rows = p.gates() * h;
  std::vector<DirectionWeights> weights;
  for (int64_t d = 0; d < p.num_directions; ++d) {
    float* next = storage;
    auto take = [&](int64_t floats) {
      float* block = next;
      next += aligned(floats);
      return block;
    };
    const float* w_d = w + d * gate_rows * p.input_size;
    const float* r_d = r + d * gate_rows * h;
    PackedB input(true, p.input_size, gate_rows, w_d, p.input_size,
                  take(PackedB::floats(p.input_size, gate_rows)));
    PackedB recurrent(true, h, recurrent_columns(p), r_d, h, take(PackedB::floats(h, recurrent_columns(p))));
    std::optional<PackedB> reset_hidden;
    if (gru_resets_before_product(p)) {
      reset_hidden.emplace(true, h, h, r_d + kGruHidden * h * h, h, take(PackedB::floats(h, h)));
    }
    float* bias = take(gate_rows);
    float* hidden_bias = take(h);
    float* peep = take(3 * h);
    const float* wb = b != nullptr ? b + d * 2 * gate_rows : nullptr;
    const float* rb = wb != nullptr ? wb + gate_rows : nullptr;
    for (int64_t j = 0; j < gate_rows; ++j) bias[j] = wb != nullptr ? wb[j] + rb[j] : 0.0f;
    std::fill(hidden_bias, hidden_bias + h, 0.0f);
    if (p.cell == RecurrentCell::gru && p.linear_before_reset && rb != nullptr) {
      for (int64_t j = 0; j < h; ++j) {
        bias[kGruHidden * h + j] = wb[kGruHidden * h + j];
        hidden_bias[j] = rb[kGruHidden * h + j];
      }
    }
    if (peepholes != nullptr) std::copy(peepholes + d * 3 * h, peepholes + (d + 1) * 3 * h, peep);
    weights.push_back(
        {input, recurrent, reset_hidden, bias, hidden_bias, peepholes != nullptr ? peep : nullptr});
    storage += direction_floats(p);
  }
  return weights;
}

// ---- the cells' elementwise work -----------------------------------------------------------------

[[gnu::always_inline]] inline void activate(const RecurrentActivation& a, float* x, int64_t n) {
  switch (a.kind) {
    case RecurrentActivationKind::sigmoid:
      for (int64_t j = 0; j < n; ++j) x[j] = fast_sigmoid(x[j]);
      break;
    case RecurrentActivationKind::tanh:
      for (int64_t j = 0; j < n; ++j) x[j] = fast_tanh(x[j]);
      break;
    case RecurrentActivationKind::relu:
      for (int64_t j = 0; j < n; ++j) x[j] = std::max(x[j], 0.0f);
      break;
    case RecurrentActivationKind::affine:
      for (int64_t j = 0; j < n; ++j) x[j] = a.alpha * x[j] + a.beta;
      break;
    case RecurrentActivationKind::leaky_relu:
      for (int64_t j = 0; j < n; ++j) x[j] = select(x[j] >= 0.0f, x[j], a.alpha * x[j]);
      break;
    case RecurrentActivationKind::thresholded_relu:
      for (int64_t j = 0; j < n; ++j) x[j] = select(x[j] >= a.alpha, x[j], 0.0f);
      break;
    case RecurrentActivationKind::scaled_tanh:
      for (int64_t j = 0; j < n; ++j) x[j] = a.alpha * fast_tanh(a.beta * x[j]);
      break;
    case RecurrentActivationKind::hard_sigmoid:
      for (int64_t j = 0; j < n; ++j) x[j] = std::min(std::max(a.alpha * x[j] + a.beta, 0.0f), 1.0f);
      break;
    case RecurrentActivationKind::elu:
      for (int64_t j = 0; j < n; ++j) x[j] = select(x[j] >= 0.0f, x[j], a.alpha * (fast_exp(x[j]) - 1.0f));
      break;
    case RecurrentActivationKind::softsign:
      for (int64_t j = 0; j < n; ++j) x[j] = x[j] / (1.0f + std::fabs(x[j]));
      break;
    case RecurrentActivationKind::softplus:
      // log(1 + e^x) = max(x, 0) + log(1 + e^-|x|), which never overflows.
      for (int64_t j = 0; j < n; ++j) x[j] = std::max(x[j], 0.0f) + std::log1p(fast_exp(-std::fabs(x[j])));
      break;
  }
}

// pre[j] = x[j] + pre[j] + bias[j] (pre holds the recurrent product), clipped when asked.
[[gnu::always_inline]] inline void add_inputs(float* pre, const float* x, const float* bias, int64_t n,
                                              float clip) {
  for (int64_t j = 0; j < n; ++j) pre[j] += x[j] + bias[j];
  if (clip > 0.0f) {
    for (int64_t j = 0; j < n; ++j) pre[j] = std::min(std::max(pre[j], -clip), clip);
  }
}

[[gnu::always_inline]] inline void clip_values(float* x, int64_t n, float clip) {
  if (clip <= 0.0f) return;
  for (int64_t j = 0; j < n; ++j) x[j] = std::min(std::max(x[j], -clip), clip);
}

// ---- one direction over the sequence --------------------------------------------------------------

// Where a direction's values live for one run.
struct CellKernels;

struct DirectionRun {
  const RecurrentParams* p = nullptr;
  const DirectionWeights* weights = nullptr;
  const CellKernels* cells = nullptr;
  int64_t direction = 0;
  bool reverse = false;
  const float* x = nullptr;
  const int32_t* lengths = nullptr;  // per batch row, or null: the whole sequence
  const float* initial_h = nullptr;  // or null: zeros
  const float* initial_c = nullptr;
  float* y = nullptr;  // each output may be absent (null)
  float* y_h = nullptr;
  float* y_c = nullptr;
  float* scratch = nullptr;  // direction_scratch_floats
};

// One time step of one direction: where its values are, and which time each batch row is at.
struct StepContext {
  const RecurrentParams& p;
  const DirectionRun& run;
  int64_t step;
  const float* projected;  // x W^T of every step, rows in X's order
  float* gates;            // H R^T on entry, the gates' activations after
  float* hidden;
  float* cell;
  float* reset_hidden;   // GRU resetting before Rh: r . H
  float* reset_product;  // and (r . H) Rh^T

  int64_t length_of(int64_t row) const { return run.lengths != nullptr ? run.lengths[row] : p.seq_length; }
  bool active(int64_t row) const { return step < length_of(row); }
  int64_t time_of(int64_t row) const { return run.reverse ? length_of(row) - 1 - step : step; }
  const float* input_of(int64_t row) const {
    const int64_t t = time_of(row);
    return projected +
           (p.batch_first ? row * p.seq_length + t : t * p.batch + row) * p.gates() * p.hidden_size;
  }
};

// A GRU resetting H before Rh: z, r and r . H for rows [begin, end), before the product with Rh.
[[gnu::always_inline]] inline void reset_rows_body(const StepContext& s, int64_t begin, int64_t end) {
  const RecurrentParams& p = s.p;
  const int64_t h = p.hidden_size;
  const int64_t gate_width = p.gates() * h;
  for (int64_t row = begin; row < end; ++row) {
    float* pre = s.gates + row * gate_width;
    float* reset = s.reset_hidden + row * h;
    if (!s.active(row)) {
      std::fill(reset, reset + h, 0.0f);
      continue;
    }
    add_inputs(pre, s.input_of(row), s.run.weights->bias, 2 * h, p.clip);
    activate(p.activation(s.run.direction, 0), pre, 2 * h);
    const float* r = pre + kGruReset * h;
    const float* state = s.hidden + row * h;
    for (int64_t j = 0; j < h; ++j) reset[j] = r[j] * state[j];
  }
}

// The cell's equations for rows [begin, end): new H (and C), written to Y at the row's time.
[[gnu::always_inline]] inline void update_rows_body(const StepContext& s, int64_t begin, int64_t end) {
  const RecurrentParams& p = s.p;
  const DirectionWeights& weights = *s.run.weights;
  const int64_t h = p.hidden_size;
  const int64_t gate_width = p.gates() * h;
  const RecurrentActivation& f = p.activation(s.run.direction, 0);
  for (int64_t row = begin; row < end; ++row) {
    if (!s.active(row)) continue;
    const float* x = s.input_of(row);
    float* pre = s.gates + row * gate_width;
    float* state = s.hidden + row * h;
    switch (p.cell) {
      case RecurrentCell::rnn:
        add_inputs(pre, x, weights.bias, h, p.clip);
        activate(f, pre, h);
        std::copy(pre, pre + h, state);
        break;
      case RecurrentCell::gru: {
        const float* z = pre + kGruUpdate * h;
        const float* r = pre + kGruReset * h;
        float* candidate = pre + kGruHidden * h;
        const float* xh = x + kGruHidden * h;
        const float* bh = weights.bias + kGruHidden * h;
        if (p.linear_before_reset) {
          add_inputs(pre, x, weights.bias, 2 * h, p.clip);
          activate(f, pre, 2 * h);
          for (int64_t j = 0; j < h; ++j) {
            candidate[j] = xh[j] + r[j] * (candidate[j] + weights.hidden_bias[j]) + bh[j];
          }
        } else {
          const float* product = s.reset_product + row * h;
          for (int64_t j = 0; j < h; ++j) candidate[j] = xh[j] + product[j] + bh[j];
        }
        clip_values(candidate, h, p.clip);
        activate(p.activation(s.run.direction, 1), candidate, h);
        for (int64_t j = 0; j < h; ++j) state[j] = (1.0f - z[j]) * candidate[j] + z[j] * state[j];
        break;
      }
      case RecurrentCell::lstm: {
        float* c = s.cell + row * h;
        float* i_gate = pre + kLstmInput * h;
        float* o_gate = pre + kLstmOutput * h;
        float* f_gate = pre + kLstmForget * h;
        float* c_gate = pre + kLstmCell * h;
        const float* peep = weights.peepholes;
        for (int64_t j = 0; j < 4 * h; ++j) pre[j] += x[j] + weights.bias[j];
        if (peep != nullptr) {
          for (int64_t j = 0; j < h; ++j) {
            i_gate[j] += peep[kPeepholeInput * h + j] * c[j];
            f_gate[j] += peep[kPeepholeForget * h + j] * c[j];
          }
        }
        clip_values(i_gate, h, p.clip);
        clip_values(f_gate, h, p.clip);
        clip_values(c_gate, h, p.clip);
        activate(f, i_gate, h);
        if (p.input_forget) {
          for (int64_t j = 0; j < h; ++j) f_gate[j] = 1.0f - i_gate[j];
        } else {
          activate(f, f_gate, h);
        }
        activate(p.activation(s.run.direction, 1), c_gate, h);
        for (int64_t j = 0; j < h; ++j) c[j] = f_gate[j] * c[j] + i_gate[j] * c_gate[j];
        if (peep != nullptr) {
          for (int64_t j = 0; j < h; ++j) o_gate[j] += peep[kPeepholeOutput * h + j] * c[j];
        }
        clip_values(o_gate, h, p.clip);
        activate(f, o_gate, h);
        std::copy(c, c + h, c_gate);
        activate(p.activation(s.run.direction, 2), c_gate, h);
        for (int64_t j = 0; j < h; ++j) state[j] = o_gate[j] * c_gate[j];
        break;
      }
    }
    if (s.run.y != nullptr) {
      const int64_t t = s.time_of(row);
      const int64_t y_row = p.batch_first ? (row * p.seq_length + t) * p.num_directions + s.run.direction
                                          : (t * p.num_directions + s.run.direction) * p.batch + row;
      std::copy(state, state + h, s.run.y + y_row * h);
    }
  }
}

// The elementwise phases compiled for each ISA tier, so the activations' loops are as wide as the
// machine allows (isa_variant.h).
#define KILN_CELL_PARAMETERS const StepContext &s, int64_t begin, int64_t end
__attribute__((target("avx512f,avx512vl,avx512dq,fma"))) void reset_rows_avx512(KILN_CELL_PARAMETERS) {
  reset_rows_body(s, begin, end);
}
__attribute__((target("avx2,fma"))) void reset_rows_avx2(KILN_CELL_PARAMETERS) {
  reset_rows_body(s, begin, end);
}
void reset_rows_baseline(KILN_CELL_PARAMETERS) {
  reset_rows_body(s, begin, end);
}
__attribute__((target("avx512f,avx512vl,avx512dq,fma"))) void update_rows_avx512(KILN_CELL_PARAMETERS) {
  update_rows_body(s, begin, end);
}
__attribute__((target("avx2,fma"))) void update_rows_avx2(KILN_CELL_PARAMETERS) {
  update_rows_body(s, begin, end);
}
void update_rows_baseline(KILN_CELL_PARAMETERS) {
  update_rows_body(s, begin, end);
}
#undef KILN_CELL_PARAMETERS

using RowsFn = void (*)(const StepContext&, int64_t, int64_t);
struct CellKernels {
  RowsFn reset_rows;
  RowsFn update_rows;
};
constexpr CellKernels kAvx512Cells{reset_rows_avx512, update_rows_avx512};
constexpr CellKernels kAvx2Cells{reset_rows_avx2, update_rows_avx2};
constexpr CellKernels kBaselineCells{reset_rows_baseline, update_rows_baseline};

int64_t direction_scratch_floats(const RecurrentParams& p) {
  const int64_t h = p.hidden_size;
  return aligned(p.seq_length * p.batch * p.gates() * h) + aligned(p.batch * p.gates() * h) +
         4 * aligned(p.batch * h);
}

int64_t state_offset(const RecurrentParams& p, int64_t direction, int64_t row) {
  return (p.batch_first ? row * p.num_directions + direction : direction * p.batch + row) * p.hidden_size;
}

void run_direction(const DirectionRun& run) {
  const RecurrentParams& p = *run.p;
  const DirectionWeights& weights = *run.weights;
  const int64_t h = p.hidden_size;
  const int64_t batch = p.batch;
  const int64_t gate_width = p.gates() * h;
  float* next = run.scratch;
  auto take = [&](int64_t floats) {
    float* block = next;
    next += aligned(floats);
    return block;
  };
  float* projected = take(p.seq_length * batch * gate_width);
  float* gates = take(batch * gate_width);
  float* hidden = take(batch * h);
  float* cell = take(batch * h);
  float* reset_hidden = take(batch * h);
  float* reset_product = take(batch * h);

  // Every step's input projection in one product: rows in X's order, (t, b) or (b, t).
  sgemm(false, p.seq_length * batch, run.x, p.input_size, weights.input, projected, gate_width,
        GemmEpilogue{});

  for (int64_t row = 0; row < batch; ++row) {
    const int64_t offset = state_offset(p, run.direction, row);
    if (run.initial_h != nullptr) {
      std::copy(run.initial_h + offset, run.initial_h + offset + h, hidden + row * h);
    } else {
      std::fill(hidden + row * h, hidden + (row + 1) * h, 0.0f);
    }
    if (run.initial_c != nullptr) {
      std::copy(run.initial_c + offset, run.initial_c + offset + h, cell + row * h);
    } else {
      std::fill(cell + row * h, cell + (row + 1) * h, 0.0f);
    }
  }

  for (int64_t step = 0; step < p.seq_length; ++step) {
    const StepContext context{p, run, step, projected, gates, hidden, cell, reset_hidden, reset_product};
    sgemm(false, batch, hidden, h, weights.recurrent, gates, gate_width, GemmEpilogue{});
    if (gru_resets_before_product(p)) {
      run.cells->reset_rows(context, 0, batch);
      sgemm(false, batch, reset_hidden, h, *weights.reset_hidden, reset_product, h, GemmEpilogue{});
    }
    parallel_for(0, batch, kCellCost * gate_width,
                 [&](int64_t begin, int64_t end) { run.cells->update_rows(context, begin, end); });
  }

  for (int64_t row = 0; row < batch; ++row) {
    const int64_t offset = state_offset(p, run.direction, row);
    if (run.y_h != nullptr) std::copy(hidden + row * h, hidden + (row + 1) * h, run.y_h + offset);
    if (run.y_c != nullptr) std::copy(cell + row * h, cell + (row + 1) * h, run.y_c + offset);
  }
}

// Multiply-adds of one direction over the sequence, for parallel_for's inline threshold.
int64_t direction_cost(const RecurrentParams& p) {
  return p.seq_length * p.batch * p.gates() * p.hidden_size * (p.input_size + p.hidden_size);
}

struct RecurrentScratch {};

const float* optional_input(std::span<const Tensor> inputs, int index) {
  return index < static_cast<int>(inputs.size()) && inputs[index].defined() ? inputs[index].data<float>()
                                                                            : nullptr;
}

float* optional_output(std::span<Tensor> outputs, int index) {
  return index < static_cast<int>(outputs.size()) && outputs[index].defined() ? outputs[index].data<float>()
                                                                              : nullptr;
}

KernelOrReason make_recurrent(const OpSpec& spec, std::span<const TensorInfo>) {
  const RecurrentParams p = recurrent_params(spec);
  if (spec.input(kRecurrentX).dtype != DType::f32) {
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                    "native " + spec.op_type + " computes float32 only, got " +
                                        std::string(dtype_name(spec.input(kRecurrentX).dtype)));
  }
  // Weights known at plan time are packed now, once; others on every run.
  const bool lstm = p.cell == RecurrentCell::lstm;
  auto constant_or_absent = [&](int index) {
    return !spec.has_input(index) || spec.input(index).is_constant();
  };
  const bool constant_weights = spec.input(kRecurrentW).is_constant() &&
                                spec.input(kRecurrentR).is_constant() && constant_or_absent(kRecurrentB) &&
                                (!lstm || constant_or_absent(kRecurrentP));
  auto value_of = [&](int index) -> const float* {
    return spec.has_input(index) ? spec.input(index).value.data<float>() : nullptr;
  };
  std::shared_ptr<const AllocatedBlock> packed;
  std::vector<DirectionWeights> constant;
  const int64_t weight_floats = direction_floats(p) * p.num_directions;
  if (constant_weights) {
    auto block = std::make_shared<AllocatedBlock>(weight_floats * sizeof(float), "weights");
    constant = prepare_weights(p, value_of(kRecurrentW), value_of(kRecurrentR), value_of(kRecurrentB),
                               lstm ? value_of(kRecurrentP) : nullptr, static_cast<float*>(block->data()));
    packed = std::move(block);
  }

  const IsaVariant<const CellKernels*> cells = pick_isa_variant(&kAvx512Cells, &kAvx2Cells, &kBaselineCells);
  return make_kernel(
      "native:" + std::string(p.cell == RecurrentCell::lstm  ? "lstm"
                              : p.cell == RecurrentCell::gru ? "gru"
                                                             : "rnn"),
      [p, packed, constant, weight_floats, cells = cells.fn](std::span<const Tensor> inputs,
                                                             std::span<Tensor> outputs) {
        const Tensor* lengths_tensor = kRecurrentSequenceLens < static_cast<int>(inputs.size()) &&
                                               inputs[kRecurrentSequenceLens].defined()
                                           ? &inputs[kRecurrentSequenceLens]
                                           : nullptr;
        const int32_t* lengths = lengths_tensor != nullptr ? lengths_tensor->data<int32_t>() : nullptr;
        bool shortened = false;
        for (int64_t row = 0; lengths != nullptr && row < p.batch; ++row) {
          KILN_CHECK(lengths[row] >= 0 && lengths[row] <= p.seq_length, invalid_argument, "sequence_lens[",
                     row, "] is ", lengths[row], "; expected a length in [0, ", p.seq_length,
                     "] (the sequence length of X)");
          shortened = shortened || lengths[row] < p.seq_length;
        }
        const bool lstm = p.cell == RecurrentCell::lstm;
        const int64_t scratch_per_direction = direction_scratch_floats(p);
        float* scratch = thread_scratch_floats<RecurrentScratch>(scratch_per_direction * p.num_directions +
                                                                 (packed ? 0 : weight_floats));
        const std::vector<DirectionWeights>* weights = &constant;
        std::vector<DirectionWeights> packed_now;  // weights known only now: packed every run
        if (!packed) {
          packed_now = prepare_weights(p, inputs[kRecurrentW].data<float>(),
                                       inputs[kRecurrentR].data<float>(), optional_input(inputs, kRecurrentB),
                                       lstm ? optional_input(inputs, kRecurrentP) : nullptr,
                                       scratch + scratch_per_direction * p.num_directions);
          weights = &packed_now;
        }
        float* y = optional_output(outputs, 0);
        if (y != nullptr && shortened) std::fill(y, y + outputs[0].numel(), 0.0f);
        std::array<DirectionRun, 2> runs;
        for (int64_t d = 0; d < p.num_directions; ++d) {
          runs[d] = DirectionRun{&p,
                                 &(*weights)[d],
                                 cells,
                                 d,
                                 p.direction == RecurrentDirection::reverse || d == 1,
                                 inputs[kRecurrentX].data<float>(),
                                 lengths,
                                 optional_input(inputs, kRecurrentInitialH),
                                 lstm ? optional_input(inputs, kRecurrentInitialC) : nullptr,
                                 y,
                                 optional_output(outputs, 1),
                                 lstm ? optional_output(outputs, 2) : nullptr,
                                 scratch + d * scratch_per_direction};
        }
        // Two directions on two threads, each with single-threaded products inside.
        if (p.num_directions == 2 && intra_op_threads() >= 2) {
          parallel_for(0, 2, direction_cost(p), [&](int64_t begin, int64_t end) {
            for (int64_t d = begin; d < end; ++d) run_direction(runs[d]);
          });
        } else {
          for (int64_t d = 0; d < p.num_directions; ++d) run_direction(runs[d]);
        }
      });
}

constexpr KernelEntry kKernels[] = {
    {"RNN", make_recurrent},
    {"GRU", make_recurrent},
    {"LSTM", make_recurrent},
};

}  // namespace

std::span<const KernelEntry> recurrent_kernels() {
  return kKernels;
}

}  // namespace kiln::native
