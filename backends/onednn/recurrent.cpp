// oneDNN's RNN primitives for ONNX's LSTM, GRU and RNN: lstm_forward, gru_forward (a GRU resetting
// H before Rh), lbr_gru_forward (linear_before_reset, PyTorch's GRU) and vanilla_rnn_forward. Each
// runs a whole layer, every direction and time step, in one call, with the weights packed at plan
// time in the layout oneDNN's GEMMs read.
//
// What ONNX allows and the primitives do not is refused with the reason, so the native kernel takes
// it: sequence_lens shorter than the sequence, clip, input_forget, activations other than the
// cell's standard ones (a vanilla RNN takes Tanh, Relu, LeakyRelu or Sigmoid), weights that are not
// plan-time constants, and any dtype but float32; and everything when the rnn_fastpath setting is off.
// Batches of up to kNativeFasterBatch sequences are refused as predicted slower than native.
//
// ONNX and oneDNN order the LSTM's gates differently (i, o, f, c against i, f, c, o; peepholes i, o,
// f against i, f, o), and oneDNN's weights are W transposed (ldigo: input channel, gate, output
// channel), so the weights are rearranged once. Y is [T, D, N, C] in ONNX and [T, N, D * C] in
// oneDNN: a bidirectional layer's output is copied into place, a single direction's is the same
// memory. Batch-first values (layout 1) are oneDNN's ntc for X and Y, while the states are copied.
// With two or more threads a bidirectional layer is two single-threaded primitives, one per
// direction, run at once: one step's product is too small to split across threads well.
#include "ops/recurrent.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/onednn/onednn_backend.h"
#include "backends/onednn/onednn_common.h"
#include "runtime/parallel.h"
#include "runtime/threads.h"

namespace kiln::onednn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// oneDNN's gate g is ONNX's gate kGateOrder[cell][g].
constexpr std::array<int64_t, 4> kLstmGates = {0, 2, 3, 1};      // i, f, c, o from i, o, f, c
constexpr std::array<int64_t, 3> kLstmPeepholes = {0, 2, 1};     // i, f, o from i, o, f
constexpr std::array<int64_t, 4> kIdentityGates = {0, 1, 2, 3};  // GRU (z, r, h) and RNN

const std::array<int64_t, 4>& gate_order(RecurrentCell cell) {
  return cell == RecurrentCell::lstm ? kLstmGates : kIdentityGates;
}

// Why oneDNN's primitives cannot compute this node, or "" when they can.
std::string unsupported_activation(const RecurrentParams& p) {
  using Kind = RecurrentActivationKind;
  for (int64_t d = 0; d < p.num_directions; ++d) {
    for (int64_t i = 0; i < p.functions(); ++i) {
      const RecurrentActivation& a = p.activation(d, i);
      const RecurrentActivation& first = p.activation(0, i);
      if (a.kind != first.kind || a.alpha != first.alpha) {
        return "its directions use different activation functions; oneDNN applies one set to both";
      }
      if (p.cell == RecurrentCell::rnn) {
        if (a.kind != Kind::tanh && a.kind != Kind::relu && a.kind != Kind::leaky_relu &&
            a.kind != Kind::sigmoid) {
          return "oneDNN's vanilla RNN applies Tanh, Relu, LeakyRelu or Sigmoid only";
        }
        continue;
      }
      const Kind standard = i == 0 ? Kind::sigmoid : Kind::tanh;
      if (a.kind != standard) {
        return p.cell == RecurrentCell::lstm ? "oneDNN's LSTM applies Sigmoid, Tanh, Tanh only"
                                             : "oneDNN's GRU applies Sigmoid, Tanh only";
      }
    }
  }
  return "";
}

dnnl::algorithm rnn_activation(const RecurrentActivation& a, float& alpha) {
  alpha = 0.0f;
  switch (a.kind) {
    case RecurrentActivationKind::relu:
      return dnnl::algorithm::eltwise_relu;
    case RecurrentActivationKind::leaky_relu:
      alpha = a.alpha;  // oneDNN's relu takes the negative slope as alpha
      return dnnl::algorithm::eltwise_relu;
    case RecurrentActivationKind::sigmoid:
      return dnnl::algorithm::eltwise_logistic;
    default:
      return dnnl::algorithm::eltwise_tanh;
  }
}

dnnl::rnn_direction rnn_direction(RecurrentDirection direction) {
  switch (direction) {
    case RecurrentDirection::forward:
      return dnnl::rnn_direction::unidirectional_left2right;
    case RecurrentDirection::reverse:
      return dnnl::rnn_direction::unidirectional_right2left;
    case RecurrentDirection::bidirectional:
      break;
  }
  return dnnl::rnn_direction::bidirectional_concat;
}

// Up to this many sequences the native kernel runs a layer faster: each step multiplies a few rows
// by R, which its few-rows GEMM path does in registers, while oneDNN's RNN primitive pays for a
// blocked GEMM per step (docs/performance.md, "Recurrent layers"). Autotune still times both.
constexpr int64_t kNativeFasterBatch = 4;

// One primitive over directions [first, first + count) of the node, with its weights packed.
struct Part {
  Primitive primitive;
  memory weights_layer, weights_iter, bias, peephole;
};

class RecurrentKernel final : public Kernel {
 public:
  // `split`: one single-threaded primitive per direction of a bidirectional layer, run on two
  // threads at once (each step's product is too small to split across threads well).
  RecurrentKernel(const OpSpec& spec, const RecurrentParams& p, bool split) : p_(p), split_(split) {
    const int64_t t = p.seq_length, n = p.batch, c = p.hidden_size;
    const int64_t part_directions = split ? 1 : p.num_directions;
    const tag layer_tag = p.batch_first && !split ? tag::ntc : tag::tnc;
    src_layer_ =
        memory::desc({t, n, p.input_size}, memory::data_type::f32, p.batch_first ? tag::ntc : tag::tnc);
    dst_layer_ = memory::desc({t, n, part_directions * c}, memory::data_type::f32, layer_tag);
    state_ = memory::desc({1, part_directions, n, c}, memory::data_type::f32, tag::ldnc);
    if (split) {
      {
        // Created for one thread: a primitive uses at most the threads it was created under.
        const ScopedIntraOpThreads one(1);
        apply_thread_count();
        parts_.push_back(make_part(spec, 0, 1, dnnl::rnn_direction::unidirectional_left2right));
        parts_.push_back(make_part(spec, 1, 1, dnnl::rnn_direction::unidirectional_right2left));
      }
      apply_thread_count();  // the run's count again, for what planning creates next
    } else {
      parts_.push_back(make_part(spec, 0, p.num_directions, rnn_direction(p.direction)));
    }
    // Y straight into the output where oneDNN's [T, N, D * C] is its layout: one direction, or both
    // batch first from one primitive.
    y_in_place_ = p.num_directions == 1 || (p.batch_first && !split);
  }

  std::string_view name() const override { return name_; }

  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    apply_thread_count();
    const RecurrentParams& p = p_;
    const int64_t n = p.batch, c = p.hidden_size, nd = p.num_directions;
    const int64_t state_floats = nd * n * c;
    const int64_t layer_floats = p.seq_length * n * nd * c;
    const bool lstm = p.cell == RecurrentCell::lstm;
    thread_local ScratchBuffer scratch;
    float* base = static_cast<float*>(scratch.reserve((4 * state_floats + layer_floats) * sizeof(float)));
    float* src_h = base;
    float* src_c = base + state_floats;
    float* dst_h = base + 2 * state_floats;
    float* dst_c = base + 3 * state_floats;
    float* dst_y = base + 4 * state_floats;

    auto present = [](auto span, int index) {
      return index < static_cast<int>(span.size()) && span[index].defined();
    };
    // A state input in ldnc: the input itself (sequence first), or copied there (batch first), or zeros.
    auto state_in = [&](int index, float* copy) -> float* {
      if (!present(inputs, index)) {
        std::fill(copy, copy + state_floats, 0.0f);
        return copy;
      }
      const float* value = inputs[index].data<float>();
      if (!p.batch_first) return const_cast<float*>(value);
      to_ldnc(value, copy);
      return copy;
    };
    auto state_out = [&](int index, float* fallback) {
      return present(outputs, index) && !p.batch_first ? outputs[index].data<float>() : fallback;
    };
    float* h_in = state_in(kRecurrentInitialH, src_h);
    float* h_out = state_out(1, dst_h);
    float* c_in = lstm ? state_in(kRecurrentInitialC, src_c) : nullptr;
    float* c_out = lstm ? state_out(2, dst_c) : nullptr;
    float* y = present(outputs, 0) && y_in_place_ ? outputs[0].data<float>() : dst_y;

    // Part i reads and writes its directions' slices of the ldnc states; a split layer's parts each
    // write [T, N, C] of the scratch.
    auto execute = [&](size_t i) {
      const Part& part = parts_[i];
      const int64_t state_offset = split_ ? static_cast<int64_t>(i) * n * c : 0;
      float* part_y = split_ ? dst_y + static_cast<int64_t>(i) * p.seq_length * n * c : y;
      std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC_LAYER,
           memory(src_layer_, engine(), const_cast<void*>(inputs[kRecurrentX].raw_data()))},
          {DNNL_ARG_SRC_ITER, memory(state_, engine(), h_in + state_offset)},
          {DNNL_ARG_WEIGHTS_LAYER, part.weights_layer},
          {DNNL_ARG_WEIGHTS_ITER, part.weights_iter},
          {DNNL_ARG_BIAS, part.bias},
          {DNNL_ARG_DST_LAYER, memory(dst_layer_, engine(), part_y)},
          {DNNL_ARG_DST_ITER, memory(state_, engine(), h_out + state_offset)},
      };
      if (lstm) {
        args[DNNL_ARG_SRC_ITER_C] = memory(state_, engine(), c_in + state_offset);
        args[DNNL_ARG_DST_ITER_C] = memory(state_, engine(), c_out + state_offset);
        if (part.peephole) args[DNNL_ARG_WEIGHTS_PEEPHOLE] = part.peephole;
      }
      part.primitive.execute(std::move(args));
    };
    if (split_) {
      parallel_for(0, 2, kSplitCost, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) execute(static_cast<size_t>(i));
      });
    } else {
      execute(0);
    }

    if (present(outputs, 0) && !y_in_place_) {
      // Rows of C: from [T, N, D*C] (one primitive) or D x [T, N, C] (split) to [T, D, N, C] or
      // [N, T, D, C].
      float* out = outputs[0].data<float>();
      for (int64_t t = 0; t < p.seq_length; ++t)
        for (int64_t d = 0; d < nd; ++d)
          for (int64_t b = 0; b < n; ++b) {
            const float* from =
                split_ ? dst_y + ((d * p.seq_length + t) * n + b) * c : y + ((t * n + b) * nd + d) * c;
            float* to = out + (p.batch_first ? (b * p.seq_length + t) * nd + d : (t * nd + d) * n + b) * c;
            std::memcpy(to, from, c * sizeof(float));
          }
    }
    if (p.batch_first) {
      if (present(outputs, 1)) from_ldnc(h_out, outputs[1].data<float>());
      if (lstm && present(outputs, 2)) from_ldnc(c_out, outputs[2].data<float>());
    }
  }

 private:
  // Large enough that parallel_for always gives each direction a thread.
  static constexpr int64_t kSplitCost = int64_t{1} << 40;

  Part make_part(const OpSpec& spec, int64_t first, int64_t count, dnnl::rnn_direction direction) {
    const RecurrentParams& p = p_;
    const int64_t c = p.hidden_size;
    const int64_t g = p.gates();
    const bool lstm = p.cell == RecurrentCell::lstm;
    const bool lbr = p.cell == RecurrentCell::gru && p.linear_before_reset;
    const int64_t bias_gates = lbr ? g + 1 : g;  // LBR-GRU keeps Rbh apart: a fourth bias "gate"
    const memory::desc weights_layer({1, count, p.input_size, g, c}, memory::data_type::f32, tag::any);
    const memory::desc weights_iter({1, count, c, g, c}, memory::data_type::f32, tag::any);
    const memory::desc bias({1, count, bias_gates, c}, memory::data_type::f32, tag::ldgo);
    const bool peepholes = lstm && spec.has_input(kRecurrentP);
    const memory::desc peephole =
        peepholes ? memory::desc({1, count, 3, c}, memory::data_type::f32, tag::ldgo) : memory::desc();
    const auto prop = dnnl::prop_kind::forward_inference;
    const dnnl::primitive_attr attr = primitive_attributes();
    Part part;
    memory::desc packed_layer, packed_iter;
    auto keep = [&](const auto& pd) {
      name_ = "onednn:" + implementation_name(pd);
      part.primitive = Primitive(pd);
      packed_layer = pd.weights_layer_desc();
      packed_iter = pd.weights_iter_desc();
    };
    switch (p.cell) {
      case RecurrentCell::lstm: {
        const dnnl::lstm_forward::desc desc(prop, direction, src_layer_, state_, state_, weights_layer,
                                            weights_iter, peephole, bias, dst_layer_, state_, state_);
        keep(dnnl::lstm_forward::primitive_desc(desc, attr, engine()));
        break;
      }
      case RecurrentCell::gru:
        if (lbr) {
          const dnnl::lbr_gru_forward::desc desc(prop, direction, src_layer_, state_, weights_layer,
                                                 weights_iter, bias, dst_layer_, state_);
          keep(dnnl::lbr_gru_forward::primitive_desc(desc, attr, engine()));
        } else {
          const dnnl::gru_forward::desc desc(prop, direction, src_layer_, state_, weights_layer, weights_iter,
                                             bias, dst_layer_, state_);
          keep(dnnl::gru_forward::primitive_desc(desc, attr, engine()));
        }
        break;
      case RecurrentCell::rnn: {
        float alpha = 0.0f;
        const dnnl::algorithm activation = rnn_activation(p.activation(0, 0), alpha);
        const dnnl::vanilla_rnn_forward::desc desc(prop, activation, direction, src_layer_, state_,
                                                   weights_layer, weights_iter, bias, dst_layer_, state_,
                                                   dnnl::rnn_flags::undef, alpha);
        keep(dnnl::vanilla_rnn_forward::primitive_desc(desc, attr, engine()));
        break;
      }
    }

    // W [D, G*C, I] and R [D, G*C, C] as ldigo, gates in oneDNN's order, then packed.
    const std::array<int64_t, 4>& order = gate_order(p.cell);
    auto transposed = [&](const Tensor& onnx, int64_t inputs) {
      Tensor plain = Tensor::empty(DType::f32, {1, count, inputs, g, c});
      const float* src = onnx.data<float>() + first * g * c * inputs;
      float* dst = plain.data<float>();
      for (int64_t d = 0; d < count; ++d)
        for (int64_t i = 0; i < inputs; ++i)
          for (int64_t gate = 0; gate < g; ++gate)
            for (int64_t o = 0; o < c; ++o)
              dst[((d * inputs + i) * g + gate) * c + o] =
                  src[(d * g * c + order[gate] * c + o) * inputs + i];
      return plain;
    };
    part.weights_layer =
        reorder_constant(memory::desc({1, count, p.input_size, g, c}, memory::data_type::f32, tag::ldigo),
                         transposed(spec.input(kRecurrentW).value, p.input_size), packed_layer);
    part.weights_iter =
        reorder_constant(memory::desc({1, count, c, g, c}, memory::data_type::f32, tag::ldigo),
                         transposed(spec.input(kRecurrentR).value, c), packed_iter);

    // Wb + Rb per gate; LBR-GRU's candidate gate takes Wbh, its fourth Rbh.
    Tensor biases = Tensor::zeros(DType::f32, {1, count, bias_gates, c});
    if (spec.has_input(kRecurrentB)) {
      const float* b = spec.input(kRecurrentB).value.data<float>() + first * 2 * g * c;
      float* dst = biases.data<float>();
      for (int64_t d = 0; d < count; ++d) {
        const float* wb = b + d * 2 * g * c;
        const float* rb = wb + g * c;
        for (int64_t gate = 0; gate < g; ++gate) {
          const bool hidden_gate = lbr && gate == 2;
          for (int64_t o = 0; o < c; ++o) {
            const int64_t from = order[gate] * c + o;
            dst[(d * bias_gates + gate) * c + o] = wb[from] + (hidden_gate ? 0.0f : rb[from]);
          }
        }
        if (lbr) std::copy(rb + 2 * c, rb + 3 * c, dst + (d * bias_gates + 3) * c);
      }
    }
    part.bias = reorder_constant(bias, biases, bias);
    if (peepholes) {
      Tensor plain = Tensor::empty(DType::f32, {1, count, 3, c});
      const float* src = spec.input(kRecurrentP).value.data<float>() + first * 3 * c;
      for (int64_t d = 0; d < count; ++d)
        for (int64_t gate = 0; gate < 3; ++gate)
          std::copy(src + (d * 3 + kLstmPeepholes[gate]) * c, src + (d * 3 + kLstmPeepholes[gate] + 1) * c,
                    plain.data<float>() + (d * 3 + gate) * c);
      part.peephole = reorder_constant(peephole, plain, peephole);
    }
    return part;
  }

  // [N, D, C] (batch first) to and from oneDNN's [D, N, C].
  void to_ldnc(const float* batch_first, float* ldnc) const {
    const int64_t n = p_.batch, c = p_.hidden_size, nd = p_.num_directions;
    for (int64_t d = 0; d < nd; ++d)
      for (int64_t b = 0; b < n; ++b)
        std::memcpy(ldnc + (d * n + b) * c, batch_first + (b * nd + d) * c, c * sizeof(float));
  }
  void from_ldnc(const float* ldnc, float* batch_first) const {
    const int64_t n = p_.batch, c = p_.hidden_size, nd = p_.num_directions;
    for (int64_t d = 0; d < nd; ++d)
      for (int64_t b = 0; b < n; ++b)
        std::memcpy(batch_first + (b * nd + d) * c, ldnc + (d * n + b) * c, c * sizeof(float));
  }

  RecurrentParams p_;
  bool split_ = false;
  std::string name_;
  std::vector<Part> parts_;
  memory::desc src_layer_, dst_layer_, state_;
  bool y_in_place_ = true;
};

KernelOrReason make_recurrent(const KernelRequest& request, std::span<const TensorInfo>) {
  const OpSpec& spec = request.op;
  const RecurrentParams p = recurrent_params(spec);
  if (!options_of<OnednnOptions>(request).rnn_fastpath) {
    return KernelOrReason::rejected(
        RefusalKind::excluded_by_setting,
        "the rnn_fastpath setting is off: recurrent layers run on the native kernel");
  }
  if (spec.input(kRecurrentX).dtype != DType::f32) {
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                    "oneDNN's RNN primitives here run float32 only");
  }
  const bool lstm = p.cell == RecurrentCell::lstm;
  for (int index : {int(kRecurrentW), int(kRecurrentR), int(kRecurrentB), lstm ? int(kRecurrentP) : -1}) {
    if (index >= 0 && spec.has_input(index) && !spec.input(index).is_constant()) {
      return KernelOrReason::rejected(
          RefusalKind::not_constant,
          "weights W, R, B and P must be plan-time constants (they are packed then)");
    }
  }
  if (spec.has_input(kRecurrentSequenceLens)) {
    const TensorInfo& lengths = spec.input(kRecurrentSequenceLens);
    bool full = lengths.is_constant();
    for (int64_t i = 0; full && i < p.batch; ++i) full = lengths.value.data<int32_t>()[i] == p.seq_length;
    if (!full) {
      return KernelOrReason::rejected(
          RefusalKind::unsupported_attribute,
          lengths.is_constant()
              ? "sequence_lens shortens some sequences; oneDNN runs every one to its full length"
              : "sequence_lens is known only at run time; oneDNN runs every sequence to its "
                "full length");
    }
  }
  if (p.clip > 0.0f) {
    return KernelOrReason::rejected(RefusalKind::unsupported_attribute,
                                    "oneDNN's RNN primitives have no clip");
  }
  if (p.input_forget) {
    return KernelOrReason::rejected(RefusalKind::unsupported_attribute,
                                    "oneDNN's LSTM has no coupled input and forget gates (input_forget)");
  }
  if (const std::string why = unsupported_activation(p); !why.empty()) {
    return KernelOrReason::rejected(RefusalKind::unsupported_attribute, why);
  }
  if (p.seq_length == 0 || p.batch == 0 || p.input_size == 0) {
    return KernelOrReason::rejected(RefusalKind::unsupported_shape,
                                    "oneDNN's RNN primitives need non-empty X");
  }
  if (p.batch <= kNativeFasterBatch && !request.timed) {
    return KernelOrReason::rejected(
        RefusalKind::predicted_slower,
        str_cat("batch ", p.batch, " <= ", kNativeFasterBatch,
                ": the native kernel's per-step product of a few rows is faster than oneDNN's here"));
  }
  // oneDNN names its GRU implementations "ref:any" though they run on its optimized GEMMs, so the
  // reference-implementation refusal of create_primitive_kernel does not apply here.
  try {
    apply_thread_count();
    const bool split = p.num_directions == 2 && intra_op_threads() >= 2;
    return {std::make_unique<RecurrentKernel>(spec, p, split), {}, {}};
  } catch (const dnnl::error& error) {
    return KernelOrReason::rejected(RefusalKind::library_refused,
                                    str_cat("oneDNN cannot create the primitive: ", error.what()));
  }
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

}  // namespace kiln::onednn
