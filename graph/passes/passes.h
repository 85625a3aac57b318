// The planning passes, in the order graph/plan.cpp runs them (ARCHITECTURE.md draws the pipeline).
// Each reads and extends the shared PlanState; one file each.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/base/kernel_request.h"
#include "backends/selection.h"
#include "graph/passes/plan_state.h"
#include "ops/op_schema.h"

namespace kiln {

// half_storage.cpp, before the passes: for a model that stores float16 or bfloat16 values (an
// initializer, a graph input or a graph output), a copy computed in float32: initializers and half
// constants (Constant, ConstantOfShape) widened, Casts to a half type cast to float32 instead, half
// inputs read through a Cast to float32 and half outputs cast back from it. Nothing for other models.
std::optional<Model> widen_half_storage(const Model& model);

// captures.cpp, first: for a model whose nodes have subgraphs (If, Loop, Scan, SequenceMap), a copy
// in which each such node's inputs are its own followed by every value its subgraphs read from
// enclosing graphs (their captures); nothing for other models. A read of a value no enclosing graph
// defines is an error naming it.
std::optional<Model> append_captures(const Model& model);
// The values `graph` and its nested subgraphs read without defining them, in order of first read.
std::vector<std::string> outer_scope_reads(const Graph& graph);

// qdq.cpp, before the passes: for a model in QDQ form (QuantizeLinear / DequantizeLinear around
// float ops), a copy in which each Conv, MatMul and Gemm whose input and constant weights are
// dequantized int8 and whose result only a QuantizeLinear reads (through a Relu that the
// quantization implies) is the integer op it computes: QLinearConv, QLinearMatMul, com.microsoft
// QGemm (the float op's name, exact int32 accumulation), and each Add and Mul of two dequantized
// values whose result is quantized is com.microsoft QLinearAdd / QLinearMul (the chain's float32
// arithmetic in one pass); the copy then imports com.microsoft. Notes per node name: what each
// became, with its types, scales and zero points, or why a Conv, MatMul, Gemm, Add or Mul reading
// dequantized values stays float32. Nothing for other models.
struct QuantizedModel {
  Model model;
  std::map<std::string, std::string> notes;
  int integer_ops = 0;
};
std::optional<QuantizedModel> fuse_qdq_chains(const Model& model);

// concat_distribution.cpp, before the passes (it decides which model they plan): a copy of `model`
// in which each channel Concat whose every reader is a group-1 float32 Conv with constant weights
// (the parts' channels fixed by the weights that produce them) is gone, each reader split into one
// Conv per part (its slice of the weights' input channels, the bias on the first) and Adds summing
// them under the reader's output name, where the Adds read fewer channels than the copy would write.
// Only where a backend enabled under `settings` fuses a sum into a Conv, outside deterministic mode
// and bf16 convolutions. Nothing when no Concat qualifies.
struct DistributedConcats {
  struct Join {
    std::string concat;              // the Concat's node name
    std::vector<std::string> parts;  // the values it joined
  };
  Model model;
  std::map<std::string, std::string> notes;  // per split Conv's node name: what it computes and why
  std::vector<Join> joins;                   // the Concats distributed
  int concats = 0;
};
std::optional<DistributedConcats> distribute_concats(const Model& model, const Settings& settings);
// After the passes planned `distributed.model`: throws kiln::Error where the parts of a distributed
// Concat could not have been joined (shapes differing outside the channels), which the split's Adds
// would broadcast instead of refusing; the model is then planned as written, and its Concat refuses.
void check_distributed_joins(const PlanState& state, const DistributedConcats& distributed);

// order.cpp: checks that every value is defined once and read only after it is defined, drops the
// nodes no graph output depends on, fills state.readers, and returns the remaining node indices in
// a topological order (nodes without inputs first, then file order among ready nodes).
std::vector<size_t> order_live_nodes(PlanState& state);

// bind.cpp: the values a plan starts from and ends with. Initializers become constant slots; graph
// inputs are checked against their declarations (a symbol such as "batch" takes one size
// everywhere) and bound; graph outputs are converted to plain storage and checked against their
// declared dtypes.
void bind_constants(PlanState& state);
void bind_inputs(PlanState& state);
void bind_outputs(PlanState& state);

// infer.cpp: the node's op schema; throws naming the node's op when kiln does not implement it or
// the model's opset is older than the op. Then the node's outputs from shape inference, as many as
// it declares; throws NeedsInputValue where a shape-defining value derives from an unbound graph input.
const OpSchema& node_schema(const Node& node, const OpSpec& spec);
std::vector<TensorInfo> infer_outputs(const PlanState& state, const Node& node, const OpSpec& spec,
                                      const OpSchema& schema);

// fold.cpp: nodes that vanish at plan time. Identity and inference Dropout map their output onto
// their input's slot; a node whose outputs shape inference computed, or a foldable node whose inputs
// are all constants (run now with the native kernel), becomes constant slots. True when the node
// was handled so.
bool remove_pass_through(PlanState& state, const Node& node);
bool fold_constants(PlanState& state, const Node& node, const OpSpec& spec, const OpSchema& schema,
                    std::vector<TensorInfo>& outputs);

// What one step computes: a node alone, or with the nodes fused into it.
struct NodeForm {
  std::string op_type;           // as plans show it: LayerNormalization for a synthesized one
  KernelRequest request;         // its inputs: the node's, then post-op operands
  std::vector<int> input_slots;  // per request input: its slot, -1 when absent
  std::vector<std::string> output_names;
  std::vector<TensorInfo> outputs;
  std::vector<const Node*> fused;          // the nodes planned inside this step, in order
  std::string note;                        // what planning changed from what the settings asked
  std::unique_ptr<Attributes> attributes;  // a synthesized node's own (request.op points at them)
  // A fused form proposed for this node that no candidate took: the nodes it would have fused and
  // the candidates' refusals (StepRecord::unfused).
  std::vector<FusedNode> unfused;
  std::vector<Refusal> fused_form_refusals;
};

// deferred.cpp: true when `node` reads a value whose shape only the run knows (and is not an op
// that takes such values: the sequence, optional and control-flow ops) or a value of a node left for
// the run; it is then left for the run too. After the other nodes, plan_deferred_region plans those
// as one step that plans and runs them when the run reaches it.
bool defer_if_run_time_shaped(PlanState& state, const Node& node);
void plan_deferred_region(PlanState& state);

// plan.cpp: plans the node producing `value` now, before its turn in the order, if everything it
// reads is planned or can be planned so (at most `depth` producers deep) and nothing it depends on
// is being planned; true when `value` is then planned. A fusion that needs a value the file order
// computes later (attention's K and mask) pulls it ahead; the nodes are then skipped at their turn.
bool plan_ahead(PlanState& state, const std::string& value, int depth = 4);

// attention_fusion.cpp: where `node` starts the nodes of attention (a Div or Mul of Q by a scalar
// before the scores MatMul, or the scores MatMul), plans them as one ScaledDotProductAttention step
// run by the first kernel of the sdpa_kernels setting that takes it, and returns true. False when
// the pattern does not match or the setting lists no kernel; throws kiln::Error (not_implemented)
// with each listed kernel's reason when it matches but none takes it.
bool plan_attention(PlanState& state, const Node& node);

// residual_norm_fusion.cpp: with mha_fastpath on, where `node` starts a residual Add (or the
// [L, B, E] -> [B, L, E] Transpose before it) whose sum only a LayerNorm over the last axis reads,
// plans them as one ResidualLayerNorm step and returns true. False when the pattern does not match,
// the fast path is off or no backend takes the step (the nodes are then planned as exported).
bool plan_residual_layer_norm(PlanState& state, const Node& node);

// channel_shuffle_fusion.cpp: where `node` is the first Reshape of a channel shuffle (Reshape to
// [N, g, C/g, H, W], Transpose (0, 2, 1, 3, 4), Reshape back, float32), plans the three as one
// ChannelShuffle step in the layout the value is stored in and returns true. False when the pattern
// does not match or no backend takes the step (the nodes are then planned as exported).
bool plan_channel_shuffle(PlanState& state, const Node& node);

// steps.cpp: the precision planning gives a step of `op_type` (Conv: conv_precision; MatMul and
// Gemm, attention's products too: matmul_precision; others float32): float32 with a note in `note`
// where bf16 is asked but the ISA in effect has no bf16 dot products.
Precision planned_precision(const Settings& settings, std::string_view op_type, std::string& note);

// steps.cpp: the form of `node` planned alone, with the precision the settings ask of it.
NodeForm unfused_form(const PlanState& state, const Node& node, const OpSpec& spec,
                      std::vector<TensorInfo> outputs);

// fusion.cpp: a fused form starting at `node`, where a pattern matches. A decomposed LayerNorm
// becomes LayerNormalization whichever backends are enabled (the native backend runs it too). A
// Conv, Gemm or MatMul takes its followers as post-ops (activations, GELU, a MatMul's constant
// bias, a residual sum) and a Conv an inference BatchNormalization into its weights, as far as some
// enabled, built backend fuses them (fusion_offered over backends/registry.h). Nothing when no
// pattern applies. Whether a backend takes the form is selection's answer.
std::optional<NodeForm> propose_fusion(PlanState& state, const Node& node, const NodeForm& alone);

// steps.cpp: adds the step computing `form` with the selected kernel: its record, its inputs in
// the layouts the kernel reads (Reorder steps where needed), its output slots.
void add_step(PlanState& state, NodeForm form, KernelSelection selection, double selection_ms);

// steps.cpp: selects a kernel for `form` (find_kernel) and adds its step, timing the selection;
// false, adding nothing but the refusals (refuse_form), when no backend takes it. The multi-node
// passes (residual_norm_fusion, channel_shuffle_fusion) then leave their nodes to be planned as
// exported.
bool add_step_if_taken(PlanState& state, NodeForm form);
// Records that a whole-pattern form starting at node `head` and fusing `nodes` was refused, and
// why: the step that then computes `head` carries it (StepRecord::unfused).
void refuse_form(PlanState& state, const std::string& head, const std::vector<const Node*>& nodes,
                 std::vector<Refusal> refusals);

// layout.cpp: `slot`'s value stored in `layout`: the slot itself, or a slot a Reorder step fills
// (one per slot and layout, shared by every reader); the Reorder kernel is selected like any other.
int slot_in_layout(PlanState& state, int slot, Layout layout);

// liveness.cpp: releases each computed value after its last reader (graph outputs excepted), lets
// kernels compute output 0 in place of a dying input nothing else sees, and drops constants no
// step reads at run time (weights copied into kernels, values used only for folding). In parallel
// execution mode an in-place write also needs every other reader of the input to precede it.
void plan_liveness(PlanState& state);

// parallel.cpp (parallel execution mode): `full` was planned on the run's threads, `reduced` on
// fewer. For each fork-join group of `full`'s steps, times both kernels of every step on the same
// inputs and schedules the group as a parallel run would; where that beats running it
// sequentially, the group's steps take `reduced`'s kernels (except those whose results would
// differ in any bit: they keep their count, with a note). Fills state.parallel_groups.
void plan_parallel_groups(PlanState& full, PlanState& reduced);

}  // namespace kiln
