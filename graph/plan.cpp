#include "graph/plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "backends/autotune.h"
#include "backends/native/native_backend.h"
#include "backends/onednn/onednn_backend.h"
#include "core/error.h"
#include "graph/fusion_patterns.h"
#include "graph/onnx_import.h"
#include "graph/verbose.h"
#include "ops/activation.h"
#include "ops/op_schema.h"
#include "runtime/cpu_info.h"

namespace kiln {
namespace {

std::string node_label(const Node& node) {
  return str_cat("node '", node.name, "' (", node.op_type, ")");
}

bool is_default_domain(const std::string& domain) {
  return domain.empty() || domain == "ai.onnx";
}

// Nodes that only forward their input: planning maps their output onto the input's slot.
bool is_pass_through(const Node& node) {
  if (!is_default_domain(node.domain)) return false;
  if (node.op_type == "Identity") return true;
  // Dropout in inference forwards its input; its optional mask output must be unused.
  return node.op_type == "Dropout" && (node.outputs.size() < 2 || node.outputs[1].empty());
}

// Ops whose kernels can apply followers as post-ops, and whether a residual sum is among them.
bool fuses_activations(const Node& node) {
  return is_default_domain(node.domain) &&
         (node.op_type == "Conv" || node.op_type == "Gemm" || node.op_type == "MatMul");
}
bool fuses_sum(const Node& node) {
  return is_default_domain(node.domain) && (node.op_type == "Conv" || node.op_type == "MatMul");
}

// The precision the settings ask of a node: Conv follows conv_precision, MatMul and Gemm
// matmul_precision, everything else computes in float32.
Precision requested_precision(const Node& node, const Settings& settings) {
  if (!is_default_domain(node.domain)) return Precision::fp32;
  if (node.op_type == "Conv") return settings.precision("conv_precision");
  if (node.op_type == "MatMul" || node.op_type == "Gemm") return settings.precision("matmul_precision");
  return Precision::fp32;
}

// bf16 runs only where the ISA tier in effect has bf16 dot products (AVX512_BF16 or AMX); oneDNN
// would emulate it elsewhere, slower than float32. There the plan is exactly the float32 plan (the
// same kernels on every backend, BLAS included), and each affected step carries this note.
bool bf16_in_effect() {
  return isa_in_effect() >= Isa::avx512_bf16;
}

std::string bf16_fallback_note() {
  const IsaChoice& isa = isa_choice();
  return str_cat("precision bf16 requested, float32 used: the ISA in effect (", isa_name(isa.isa), ", from ",
                 isa.source, ") has no bf16 dot products (AVX512_BF16 or AMX)");
}

// How a step's output of logical `info` is stored: shape and dtype of the tensor it writes.
TensorInfo stored_info(const TensorInfo& info) {
  return TensorInfo{
      stored_dtype(info.dtype, info.layout), stored_shape(info.shape, info.layout), {}, info.layout};
}

}  // namespace

class PlanBuilder {
 public:
  PlanBuilder(const Model& model, const std::vector<Shape>& input_shapes,
              const std::vector<Tensor>& input_values, const Settings& settings,
              AutotuneCache& autotune_cache)
      : model_(model),
        settings_(settings),
        autotune_cache_(autotune_cache),
        graph_(model.graph),
        input_shapes_(input_shapes),
        input_values_(input_values),
        plan_(std::make_shared<Plan>()),
        view_{graph_, consumers_, [this](const std::string& name) -> const TensorInfo* {
                auto slot = slot_by_name_.find(name);
                return slot == slot_by_name_.end() ? nullptr : &plan_->slots_[slot->second].info;
              }} {}

  std::shared_ptr<const Plan> build() {
    const std::vector<size_t> order = live_nodes_in_topological_order();
    add_constants();
    bind_inputs();
    for (size_t index : order) {
      const Node& node = graph_.nodes[index];
      if (fused_.count(&node)) continue;  // its work happens inside the node it was fused into
      with_context(node_label(node), [&] { plan_node(node); });
    }
    bind_outputs();
    compute_liveness();
    // A run starts from the constants some step or graph output reads; the others (weights copied
    // into kernels, values used only for folding) are dropped so the plan holds no reference to them.
    std::vector<bool> read_at_run_time(plan_->slots_.size(), false);
    for (const PlanStep& step : plan_->steps_) {
      for (int slot : step.inputs) {
        if (slot >= 0) read_at_run_time[slot] = true;
      }
    }
    for (int slot : plan_->output_slots_) read_at_run_time[slot] = true;
    plan_->initial_values_.resize(plan_->slots_.size());
    for (size_t i = 0; i < plan_->slots_.size(); ++i) {
      Slot& slot = plan_->slots_[i];
      if (slot.origin != SlotOrigin::constant) continue;
      if (read_at_run_time[i]) {
        plan_->initial_values_[i] = slot.info.value;
      } else {
        slot.info.value = Tensor{};
      }
    }
    plan_->memory_plan_ = plan_memory(*plan_);
    if (settings_.max_verbose() >= 2) report_planned_steps(settings_, *plan_);
    return plan_;
  }

 private:
  // Checks that every value is defined once and consumed only after it is defined, drops nodes no
  // graph output depends on, and returns the remaining node indices in a topological order.
  std::vector<size_t> live_nodes_in_topological_order() {
    std::unordered_map<std::string, size_t> producer;
    std::unordered_set<std::string> sources;
    for (const ValueInfo& input : graph_.inputs) sources.insert(input.name);
    for (const auto& [name, tensor] : graph_.initializers) sources.insert(name);
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      const Node& node = graph_.nodes[i];
      for (const std::string& output : node.outputs) {
        if (output.empty()) continue;
        KILN_CHECK(!sources.count(output), invalid_model, node_label(node), ": output '", output,
                   "' redefines a graph input or initializer");
        auto [it, inserted] = producer.emplace(output, i);
        KILN_CHECK(inserted, invalid_model, node_label(node), ": output '", output, "' is also produced by ",
                   node_label(graph_.nodes[it->second]));
      }
    }
    for (const Node& node : graph_.nodes) {
      for (const std::string& input : node.inputs) {
        KILN_CHECK(input.empty() || sources.count(input) || producer.count(input), invalid_model,
                   node_label(node), ": input '", input,
                   "' is not a graph input, an initializer, or the output of any node");
      }
    }
    // Liveness: walk back from the graph outputs.
    std::vector<bool> live(graph_.nodes.size(), false);
    std::vector<size_t> pending;
    for (const ValueInfo& output : graph_.outputs) {
      auto it = producer.find(output.name);
      if (it != producer.end()) {
        pending.push_back(it->second);
      } else {
        KILN_CHECK(sources.count(output.name), invalid_model, "graph output '", output.name,
                   "' is not produced by any node");
      }
    }
    while (!pending.empty()) {
      const size_t index = pending.back();
      pending.pop_back();
      if (live[index]) continue;
      live[index] = true;
      for (const std::string& input : graph_.nodes[index].inputs) {
        auto it = producer.find(input);
        if (it != producer.end() && !live[it->second]) pending.push_back(it->second);
      }
    }
    // Kahn's algorithm over live nodes, keeping file order among ready nodes.
    std::vector<int> missing(graph_.nodes.size(), 0);
    std::unordered_map<std::string, std::vector<size_t>> consumers;
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      if (!live[i]) continue;
      for (const std::string& input : graph_.nodes[i].inputs) {
        if (producer.count(input)) {
          ++missing[i];
          consumers[input].push_back(i);
        }
      }
    }
    // Nodes without inputs (Constant) go first, so fusion finds e.g. Clip's bounds already planned.
    std::deque<size_t> ready;
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      if (live[i] && missing[i] == 0 && graph_.nodes[i].inputs.empty()) ready.push_back(i);
    }
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      if (live[i] && missing[i] == 0 && !graph_.nodes[i].inputs.empty()) ready.push_back(i);
    }
    consumers_ = consumers;
    std::vector<size_t> order;
    while (!ready.empty()) {
      const size_t index = ready.front();
      ready.pop_front();
      order.push_back(index);
      for (const std::string& output : graph_.nodes[index].outputs) {
        auto it = consumers.find(output);
        if (it == consumers.end()) continue;
        for (size_t consumer : it->second) {
          if (--missing[consumer] == 0) ready.push_back(consumer);
        }
      }
    }
    const size_t live_count = static_cast<size_t>(std::count(live.begin(), live.end(), true));
    if (order.size() != live_count) {
      for (size_t i = 0; i < graph_.nodes.size(); ++i) {
        if (live[i] && missing[i] > 0) {
          fail(ErrorKind::invalid_model, "the graph has a cycle through ", node_label(graph_.nodes[i]));
        }
      }
    }
    return order;
  }

  int add_slot(const std::string& name, TensorInfo info, SlotOrigin origin, std::vector<size_t> inputs = {}) {
    const int slot = static_cast<int>(plan_->slots_.size());
    plan_->slots_.push_back({name, std::move(info), origin});
    input_dependencies_.push_back(std::move(inputs));
    if (!name.empty()) slot_by_name_[name] = slot;
    return slot;
  }

  void add_constants() {
    for (const auto& [name, tensor] : graph_.initializers) {
      add_slot(name, TensorInfo{tensor.dtype(), tensor.shape(), tensor}, SlotOrigin::constant);
    }
  }

  // Checks the concrete input shapes against the declared ones; a symbol ("batch") must take the
  // same size everywhere it appears.
  void bind_inputs() {
    KILN_CHECK(input_shapes_.size() == graph_.inputs.size(), invalid_argument, "the model has ",
               graph_.inputs.size(), " inputs, got shapes for ", input_shapes_.size());
    std::unordered_map<std::string, int64_t> symbols;
    for (size_t i = 0; i < graph_.inputs.size(); ++i) {
      const ValueInfo& declared = graph_.inputs[i];
      const Shape& shape = input_shapes_[i];
      KILN_CHECK(declared.dtype != DType::undefined, invalid_model, "graph input '", declared.name,
                 "' has no element type");
      if (declared.has_shape) {
        KILN_CHECK(shape.size() == declared.shape.size(), invalid_argument, "input '", declared.name,
                   "' must have rank ", declared.shape.size(), " (shape ", dims_to_string(declared.shape),
                   "), got shape ", shape_to_string(shape));
        for (size_t d = 0; d < shape.size(); ++d) {
          const Dim& dim = declared.shape[d];
          if (dim.is_known()) {
            KILN_CHECK(shape[d] == dim.value, invalid_argument, "input '", declared.name,
                       "' must have shape ", dims_to_string(declared.shape), ", got ", shape_to_string(shape),
                       " (dim ", d, ")");
          } else if (!dim.symbol.empty()) {
            auto [it, inserted] = symbols.emplace(dim.symbol, shape[d]);
            KILN_CHECK(inserted || it->second == shape[d], invalid_argument, "input '", declared.name,
                       "' dim ", d, " ('", dim.symbol, "') is ", shape[d], " but another input set '",
                       dim.symbol, "' to ", it->second);
          }
        }
      }
      checked_numel(shape);
      const Tensor value = i < input_values_.size() ? input_values_[i] : Tensor{};
      plan_->input_slots_.push_back(
          add_slot(declared.name, TensorInfo{declared.dtype, shape, value}, SlotOrigin::graph_input, {i}));
    }
  }

  // Everything of a node's OpSpec but its inputs.
  OpSpec spec_without_inputs(const Node& node) const {
    OpSpec spec;
    spec.op_type = node.op_type;
    spec.domain = node.domain;
    spec.node_name = node.name;
    auto opset = model_.opsets.find(is_default_domain(node.domain) ? "" : node.domain);
    spec.opset = opset == model_.opsets.end() ? 0 : opset->second;
    spec.attributes = &node.attributes;
    spec.num_outputs = static_cast<int>(node.outputs.size());
    const Precision requested = requested_precision(node, settings_);
    spec.precision = requested == Precision::bf16 && !bf16_in_effect() ? Precision::fp32 : requested;
    return spec;
  }

  OpSpec make_spec(const Node& node) const {
    OpSpec spec = spec_without_inputs(node);
    for (const std::string& input : node.inputs) {
      spec.inputs.push_back(input.empty() ? TensorInfo{} : plan_->slots_[slot_by_name_.at(input)].info);
    }
    return spec;
  }

  void plan_node(const Node& node) {
    const OpSchema* schema = find_op_schema(node.op_type, node.domain);
    const OpSpec spec = make_spec(node);
    if (schema == nullptr) {
      fail(ErrorKind::not_implemented, "unknown op '", node.op_type, "'",
           is_default_domain(node.domain) ? "" : str_cat(" in domain '", node.domain, "'"), " at opset ",
           spec.opset, ": kiln does not implement it");
    }
    KILN_CHECK(spec.opset >= schema->since_opset, invalid_model, node.op_type, " needs opset ",
               schema->since_opset, " or later, the model imports opset ", spec.opset);
    std::vector<TensorInfo> outputs;
    try {
      outputs = schema->infer(spec);
    } catch (const MissingConstantInput& missing) {
      // A shape-defining value computed from caller inputs: ask for one of those inputs' values to be
      // bound into the plan (the session retries until the value folds).
      const int slot = slot_by_name_.at(node.inputs.at(static_cast<size_t>(missing.input())));
      for (size_t input : input_dependencies_[static_cast<size_t>(slot)]) {
        if (input >= input_values_.size() || !input_values_[input].defined()) {
          throw NeedsInputValue(input, missing.message());
        }
      }
      throw;
    }
    KILN_CHECK(outputs.size() >= node.outputs.size(), invalid_model, node.op_type, " declares ",
               node.outputs.size(), " outputs but produces at most ", outputs.size());
    outputs.resize(node.outputs.size());

    if (is_pass_through(node)) {
      slot_by_name_[node.outputs[0]] = slot_by_name_.at(node.inputs.at(0));
      ++plan_->removed_nodes_;
      return;
    }
    const bool all_inputs_constant =
        std::all_of(spec.inputs.begin(), spec.inputs.end(),
                    [](const TensorInfo& info) { return !info.present() || info.is_constant(); });
    const bool values_known = std::all_of(outputs.begin(), outputs.end(),
                                          [](const TensorInfo& info) { return info.is_constant(); });
    if (values_known || (schema->foldable && all_inputs_constant)) {
      if (!values_known) fold(spec, outputs);
      for (size_t i = 0; i < node.outputs.size(); ++i) {
        if (!node.outputs[i].empty()) add_slot(node.outputs[i], outputs[i], SlotOrigin::constant);
      }
      ++plan_->folded_nodes_;
      return;
    }

    OpSpec fused_spec = spec;
    std::vector<const Node*> followers;
    std::string op_type = node.op_type;
    std::vector<std::string> input_names = node.inputs;
    Attributes layer_norm_attributes;  // the synthesized LayerNormalization's; outlives selection
    if (std::optional<LayerNormMatch> match = match_layer_norm(view_, node)) {
      // The nine nodes of a decomposed LayerNorm become one LayerNormalization step.
      op_type = "LayerNormalization";
      Attribute axis;
      axis.type = Attribute::Type::i;
      axis.i = -1;
      Attribute epsilon;
      epsilon.type = Attribute::Type::f;
      epsilon.f = match->epsilon;
      layer_norm_attributes.set("axis", axis);
      layer_norm_attributes.set("epsilon", epsilon);
      fused_spec.op_type = op_type;
      fused_spec.opset = 17;
      fused_spec.attributes = &layer_norm_attributes;
      input_names = {node.inputs[0], match->scale, match->bias};
      fused_spec.inputs.clear();
      for (const std::string& name : input_names)
        fused_spec.inputs.push_back(plan_->slots_[slot_by_name_.at(name)].info);
      followers = match->nodes;
      outputs = {TensorInfo{DType::f32, fused_spec.inputs[0].shape, {}}};
    } else {
      followers = fusable_followers(node, fused_spec, outputs[0]);
      for (size_t i = node.inputs.size(); i < fused_spec.inputs.size(); ++i) {
        // Inputs fusion added: a residual or bias has a value name; a folded BatchNorm's bias has none.
        auto named = fused_inputs_.find(i);
        input_names.push_back(named != fused_inputs_.end() ? named->second : std::string());
      }
    }
    KernelSelection selection;
    const auto selection_start = std::chrono::steady_clock::now();
    if (op_type == "LayerNormalization") {
      selection = select_kernel(fused_spec, outputs, settings_, &autotune_cache_);
    } else if (!followers.empty()) {
      try {
        selection = select_kernel(fused_spec, outputs, settings_, &autotune_cache_);
      } catch (const Error&) {
        followers.clear();  // no backend fuses this chain; plan the followers as their own steps
      }
    }
    if (followers.empty()) {
      fused_spec = spec;
      input_names = node.inputs;
      selection = select_kernel(spec, outputs, settings_, &autotune_cache_);
    }
    const double selection_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - selection_start).count();
    std::vector<std::string> output_names = node.outputs;
    if (!followers.empty()) {
      // The chain's last value is what the fused kernel writes; the intermediate values vanish.
      output_names[0] = followers.back()->outputs[0];
      for (const Node* follower : followers) fused_.insert(follower);
      plan_->fused_nodes_ += static_cast<int>(followers.size());
    }

    PlanStep step;
    step.record.node_name = node.name;
    step.record.op_type = op_type;
    step.record.backend = std::string(selection.backend->name());
    step.backend_index = backend_index(step.record.backend);
    step.record.kernel = std::string(selection.kernel->name());
    step.record.rejected = std::move(selection.rejected);
    step.record.note = std::move(selection.note);
    if (requested_precision(node, settings_) != spec.precision) step.record.note = bf16_fallback_note();
    step.record.timed = std::move(selection.timed);
    step.record.creation_ms = selection_ms;
    for (const Node* follower : followers)
      step.record.fused.push_back(str_cat(follower->op_type, " '", follower->name, "'"));
    const Kernel& kernel = *selection.kernel;
    for (size_t i = 0; i < input_names.size(); ++i) {
      int slot = input_names[i].empty() ? -1 : slot_by_name_.at(input_names[i]);
      // A constant the kernel copied (reordered weights) is not needed at run time.
      if (slot >= 0 && kernel.copied_at_plan_time(i) && plan_->slots_[slot].origin == SlotOrigin::constant)
        slot = -1;
      if (slot >= 0) slot = slot_in_layout(slot, kernel.input_layout(i));
      step.inputs.push_back(slot);
      step.record.input_shapes.push_back(fused_spec.inputs[i].shape);
      step.record.input_dtypes.push_back(fused_spec.inputs[i].dtype);
      step.record.input_layouts.push_back(slot >= 0 ? plan_->slots_[slot].info.layout : Layout::plain);
    }
    const bool is_view = kernel.is_view();
    std::vector<size_t> dependencies;  // graph inputs this step's outputs are computed from
    for (int slot : step.inputs) {
      if (slot < 0) continue;
      for (size_t input : input_dependencies_[static_cast<size_t>(slot)]) {
        if (std::find(dependencies.begin(), dependencies.end(), input) == dependencies.end()) {
          dependencies.push_back(input);
        }
      }
    }
    for (size_t i = 0; i < output_names.size(); ++i) {
      const Layout layout = kernel.output_layout(i);
      TensorInfo info{outputs[i].dtype, outputs[i].shape, {}, layout};
      step.record.output_shapes.push_back(info.shape);
      step.record.output_dtypes.push_back(info.dtype);
      step.record.output_layouts.push_back(layout);
      step.output_infos.push_back(stored_info(info));
      if (output_names[i].empty()) {
        step.outputs.push_back(-1);
        continue;
      }
      // A view shares its first input's storage, so it inherits that input's origin.
      const SlotOrigin origin =
          (is_view && step.inputs.at(0) >= 0) ? plan_->slots_[step.inputs[0]].origin : SlotOrigin::computed;
      step.outputs.push_back(add_slot(output_names[i], info, origin, dependencies));
    }
    for (const Node* follower : followers) slot_by_name_[follower->outputs[0]] = step.outputs[0];
    step.kernel = std::move(selection.kernel);
    plan_->steps_.push_back(std::move(step));
  }

  // The nodes after `node` that its kernel can apply as post-ops (activations, and for Conv one
  // residual Add whose other operand is already computed), added to `spec` as post_ops; the sum's
  // operand is appended to spec.inputs. Each intermediate value must have no other reader and
  // not be a graph output. Empty when nothing fuses or oneDNN (the only fusing backend) is off.
  std::vector<const Node*> fusable_followers(const Node& node, OpSpec& spec, const TensorInfo& result) {
    std::vector<const Node*> followers;
    if (!fuses_activations(node) || !settings_.backend_enabled(kOnednnIndex) || result.dtype != DType::f32)
      return followers;
    fused_inputs_.clear();
    std::string value = node.outputs.at(0);
    bool has_sum = false;
    // An inference BatchNormalization right after a Conv is folded into its weights and bias.
    if (node.op_type == "Conv") {
      const Node* next = sole_reader(view_, value);
      if (next != nullptr && fold_batch_norm(*next, spec)) {
        followers.push_back(next);
        value = next->outputs[0];
      }
    }
    for (;;) {
      // GELU reads its input twice, so it is matched before looking for a sole reader.
      if (std::vector<const Node*> gelu = match_gelu(view_, value); !gelu.empty()) {
        spec.post_ops.push_back(
            PostOp{PostOp::Kind::gelu_erf, 0, 0, -1, gelu.back()->name, gelu.back()->op_type});
        followers.insert(followers.end(), gelu.begin(), gelu.end());
        value = gelu.back()->outputs[0];
        continue;
      }
      const Node* next = sole_reader(view_, value);
      if (next == nullptr || next->outputs.size() != 1 || next->outputs[0].empty()) break;
      const bool is_add = next->op_type == "Add" && is_default_domain(next->domain) &&
                          next->inputs.size() == 2 && next->inputs[0] != next->inputs[1];
      const std::string other = !is_add                    ? std::string()
                                : next->inputs[0] == value ? next->inputs[1]
                                                           : next->inputs[0];
      const TensorInfo* addend = nullptr;
      if (is_add) {
        auto slot = slot_by_name_.find(other);
        if (slot == slot_by_name_.end()) break;  // the other branch is planned later
        addend = &plan_->slots_[slot->second].info;
      }
      if (is_add && fuses_sum(node) && !has_sum && addend->dtype == DType::f32 &&
          addend->shape == result.shape) {
        if (node.op_type == "Conv") {
          while (spec.inputs.size() < 3) spec.inputs.emplace_back();  // X, W, B before the addend
        }
        spec.post_ops.push_back(PostOp{PostOp::Kind::sum, 0, 0, append_fused_input(spec, *addend, other),
                                       next->name, next->op_type});
        has_sum = true;
      } else if (is_add && node.op_type == "MatMul" && spec.post_ops.empty()) {
        // A constant per-column bias becomes the matmul's own bias.
        const int64_t n = result.shape.empty() ? 0 : result.shape.back();
        if (!addend->is_constant() || addend->dtype != DType::f32 || checked_numel(addend->shape) != n ||
            (!addend->shape.empty() && addend->shape.back() != n)) {
          break;
        }
        spec.post_ops.push_back(PostOp{PostOp::Kind::bias, 0, 0, append_fused_input(spec, *addend, other),
                                       next->name, next->op_type});
      } else {
        const std::optional<OpSpec> follower = make_spec_with_first_input(*next, result);
        if (!follower) break;
        const std::optional<PostOp> activation = activation_post_op(*follower);
        if (!activation) break;
        spec.post_ops.push_back(*activation);
      }
      followers.push_back(next);
      value = next->outputs[0];
    }
    return followers;
  }

  // Folds `bn` (scale, B, mean, var: constants over the output channels) into the Conv of `conv`
  // (constant weights and bias): w' = w * s and b' = (b - mean) * s + B with s = scale / sqrt(var + eps).
  // False, leaving `conv` unchanged, when `bn` is not such a node.
  bool fold_batch_norm(const Node& bn, OpSpec& conv) const {
    if (bn.op_type != "BatchNormalization" || !is_default_domain(bn.domain) || bn.inputs.size() != 5)
      return false;
    if (bn.outputs.size() != 1 || bn.attributes.get_int("training_mode", 0) != 0) return false;
    if (!conv.has_input(1) || !conv.inputs[1].is_constant() || conv.inputs[1].dtype != DType::f32)
      return false;
    const Tensor& weights = conv.inputs[1].value;
    const int64_t channels = weights.dim(0);
    const bool has_bias = conv.has_input(2);
    if (has_bias && (!conv.inputs[2].is_constant() || conv.inputs[2].dtype != DType::f32)) return false;
    std::vector<const float*> parameters;  // scale, B, mean, var
    for (size_t i = 1; i < 5; ++i) {
      const TensorInfo* info = view_.planned(bn.inputs[i]);
      if (info == nullptr || !info->is_constant() || info->dtype != DType::f32 ||
          info->shape != Shape{channels}) {
        return false;
      }
      parameters.push_back(info->value.data<float>());
    }
    const double epsilon = bn.attributes.get_float("epsilon", 1e-5f);
    Tensor folded_weights = weights.clone();
    Tensor folded_bias = Tensor::empty(DType::f32, {channels});
    const int64_t per_channel = weights.numel() / channels;
    for (int64_t c = 0; c < channels; ++c) {
      const double factor = parameters[0][c] / std::sqrt(static_cast<double>(parameters[3][c]) + epsilon);
      float* w = folded_weights.data<float>() + c * per_channel;
      for (int64_t i = 0; i < per_channel; ++i) w[i] = static_cast<float>(w[i] * factor);
      const double bias = has_bias ? conv.inputs[2].value.data<float>()[c] : 0.0;
      folded_bias.data<float>()[c] =
          static_cast<float>((bias - parameters[2][c]) * factor + parameters[1][c]);
    }
    conv.inputs[1].value = folded_weights;
    conv.inputs.resize(std::max<size_t>(conv.inputs.size(), 3));
    conv.inputs[2] = TensorInfo{DType::f32, {channels}, folded_bias};
    return true;
  }

  int append_fused_input(OpSpec& spec, const TensorInfo& info, const std::string& name) {
    const int index = static_cast<int>(spec.inputs.size());
    spec.inputs.push_back(info);
    fused_inputs_[static_cast<size_t>(index)] = name;
    return index;
  }

  // make_spec for a node whose first input has no slot yet (it is fused away); nothing when another
  // input is not planned yet either.
  std::optional<OpSpec> make_spec_with_first_input(const Node& node, const TensorInfo& first) const {
    OpSpec spec = spec_without_inputs(node);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (i == 0 || node.inputs[i].empty()) {
        spec.inputs.push_back(i == 0 ? TensorInfo{first.dtype, first.shape, {}} : TensorInfo{});
        continue;
      }
      auto slot = slot_by_name_.find(node.inputs[i]);
      if (slot == slot_by_name_.end()) return std::nullopt;  // computed later: cannot fuse
      spec.inputs.push_back(plan_->slots_[slot->second].info);
    }
    return spec;
  }

  // `slot`'s value stored in `layout`: the slot itself, or a slot filled by a reorder step (one per
  // slot and layout, shared by every reader).
  int slot_in_layout(int slot, Layout layout) {
    const TensorInfo& info = plan_->slots_[static_cast<size_t>(slot)].info;
    if (info.layout == layout) return slot;
    const auto key = std::make_pair(slot, layout);
    if (auto it = reordered_.find(key); it != reordered_.end()) return it->second;
    const bool channels_last = is_channels_last(info.layout) || is_channels_last(layout);
    KILN_CHECK(info.dtype == DType::f32 && (!channels_last || info.shape.size() == 4), not_implemented,
               "value '", plan_->slots_[static_cast<size_t>(slot)].name, "' is stored ",
               layout_name(info.layout), " but a reader needs ", layout_name(layout),
               " (layouts convert float32 values, channels-last ones of rank 4)");
    PlanStep step;
    step.kernel = make_layout_reorder(info.shape, info.layout, layout);
    step.inputs = {slot};
    step.record.node_name =
        str_cat(plan_->slots_[static_cast<size_t>(slot)].name, ":to_", layout_name(layout));
    step.record.op_type = "Reorder";
    step.record.backend = "onednn";
    step.backend_index = kOnednnIndex;
    step.record.kernel = std::string(step.kernel->name());
    step.record.input_shapes = {info.shape};
    step.record.output_shapes = {info.shape};
    step.record.input_dtypes = {info.dtype};
    step.record.output_dtypes = {info.dtype};
    step.record.input_layouts = {info.layout};
    step.record.output_layouts = {layout};
    step.output_infos = {stored_info(TensorInfo{info.dtype, info.shape, {}, layout})};
    const SlotOrigin origin =
        step.kernel->is_view() ? plan_->slots_[static_cast<size_t>(slot)].origin : SlotOrigin::computed;
    const int converted = add_slot(step.record.node_name, TensorInfo{info.dtype, info.shape, {}, layout},
                                   origin, input_dependencies_[static_cast<size_t>(slot)]);
    // add_slot registered the name; readers find values by their graph names, not this one.
    slot_by_name_.erase(step.record.node_name);
    step.outputs = {converted};
    plan_->steps_.push_back(std::move(step));
    ++plan_->reorder_steps_;
    reordered_[key] = converted;
    return converted;
  }

  // Runs a node whose inputs are all constants with the native reference kernel, at plan time.
  void fold(const OpSpec& spec, std::vector<TensorInfo>& outputs) {
    KernelOrReason offer = native_backend().create_kernel(spec, outputs);
    KILN_CHECK(offer.kernel != nullptr, not_implemented, "cannot fold ", spec.op_type, ": ", offer.reason);
    std::vector<Tensor> inputs;
    for (const TensorInfo& info : spec.inputs) inputs.push_back(info.value);
    std::vector<Tensor> values(outputs.size());
    if (!offer.kernel->is_view()) {
      for (size_t i = 0; i < outputs.size(); ++i)
        values[i] = Tensor::empty(outputs[i].dtype, outputs[i].shape);
    }
    offer.kernel->run(inputs, values);
    for (size_t i = 0; i < outputs.size(); ++i) outputs[i].value = values[i];
  }

  void bind_outputs() {
    for (const ValueInfo& output : graph_.outputs) {
      const int slot = slot_in_layout(slot_by_name_.at(output.name), Layout::plain);
      const TensorInfo& info = plan_->slots_[slot].info;
      KILN_CHECK(output.dtype == DType::undefined || output.dtype == info.dtype, invalid_model,
                 "graph output '", output.name, "' is declared ", dtype_name(output.dtype), " but computes ",
                 dtype_name(info.dtype));
      plan_->output_slots_.push_back(slot);
    }
  }

  // Releases each computed value after its last reader, except graph outputs.
  void compute_liveness() {
    std::vector<int> last_reader(plan_->slots_.size(), -1);
    for (size_t s = 0; s < plan_->steps_.size(); ++s) {
      for (int slot : plan_->steps_[s].inputs) {
        if (slot >= 0) last_reader[slot] = static_cast<int>(s);
      }
    }
    for (int slot : plan_->output_slots_) last_reader[slot] = -1;
    for (size_t slot = 0; slot < last_reader.size(); ++slot) {
      if (last_reader[slot] >= 0 && plan_->slots_[slot].origin != SlotOrigin::constant) {
        plan_->steps_[last_reader[slot]].release_after.push_back(static_cast<int>(slot));
      }
    }
    // Slots whose storage another slot shares: views' inputs and outputs.
    std::vector<bool> shared(plan_->slots_.size(), false);
    for (const PlanStep& step : plan_->steps_) {
      if (!step.kernel->is_view()) continue;
      for (int slot : step.inputs) {
        if (slot >= 0) shared[slot] = true;
      }
      for (int slot : step.outputs) {
        if (slot >= 0) shared[slot] = true;
      }
    }
    // A kernel may take over a dying input's storage for output 0 when nothing else can see it.
    for (size_t s = 0; s < plan_->steps_.size(); ++s) {
      PlanStep& step = plan_->steps_[s];
      const int input = step.kernel->in_place_input();
      if (input < 0 || static_cast<size_t>(input) >= step.inputs.size() || step.outputs.empty()) continue;
      const int slot = step.inputs[static_cast<size_t>(input)];
      if (slot < 0 || step.outputs[0] < 0 || shared[slot] || last_reader[slot] != static_cast<int>(s))
        continue;
      if (plan_->slots_[slot].origin != SlotOrigin::computed) continue;
      if (std::count(step.inputs.begin(), step.inputs.end(), slot) != 1) continue;
      const TensorInfo& in = plan_->slots_[slot].info;
      const TensorInfo& out = step.output_infos[0];
      if (stored_dtype(in.dtype, in.layout) != out.dtype || in.layout != out.layout ||
          stored_shape(in.shape, in.layout) != out.shape)
        continue;
      step.in_place_input = input;
      step.record.in_place = true;
    }
  }

  const Model& model_;
  const Settings& settings_;
  AutotuneCache& autotune_cache_;
  const Graph& graph_;
  const std::vector<Shape>& input_shapes_;
  const std::vector<Tensor>& input_values_;
  std::shared_ptr<Plan> plan_;
  std::unordered_map<std::string, int> slot_by_name_;
  std::vector<std::vector<size_t>> input_dependencies_;             // per slot: graph inputs it derives from
  std::unordered_map<std::string, std::vector<size_t>> consumers_;  // value name -> live reader nodes
  PlanningView view_;                                     // what the pattern matchers read of the above
  std::unordered_set<const Node*> fused_;                 // nodes planned inside another
  std::unordered_map<size_t, std::string> fused_inputs_;  // spec input index -> value name
  std::map<std::pair<int, Layout>, int> reordered_;       // (slot, layout) -> converted slot
};

std::shared_ptr<const Plan> Plan::build(const Model& model, const std::vector<Shape>& input_shapes,
                                        const std::vector<Tensor>& input_values, const Settings& settings,
                                        AutotuneCache* autotune_cache) {
  // Planning runs kernels too (constant folding, autotune's timings): on the plan's thread count.
  const ScopedIntraOpThreads threads(settings.threads());
  AutotuneCache build_only;
  return PlanBuilder(model, input_shapes, input_values, settings,
                     autotune_cache != nullptr ? *autotune_cache : build_only)
      .build();
}

}  // namespace kiln
