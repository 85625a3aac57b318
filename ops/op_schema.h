// The op table: for every op kiln knows, how to infer its outputs. Each op family (ops/conv.cpp,
// ops/elementwise.cpp, ...) owns a table of its ops; op_table.cpp lists the families. Adding an op
// means one row in its family's table plus a kernel row in each backend that implements it.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "ops/op_spec.h"

namespace kiln {

// Returns one TensorInfo per declared output: dtype and concrete shape, and the value when it can be
// computed from shapes alone (Shape, Size). Validates attributes, input counts, dtypes and shapes,
// throwing kiln::Error that names what was wrong.
using InferFn = std::vector<TensorInfo> (*)(const OpSpec& spec);

struct OpSchema {
  std::string_view op_type;
  InferFn infer = nullptr;
  int64_t since_opset = 1;  // first default-domain opset that defines the op
  // May run at plan time when every input is a constant (false for ops with side effects or
  // randomness).
  bool foldable = true;
  // Reads sequences, optionals and tensors whose shape only the run knows (the sequence, optional
  // and control-flow ops); every other op's inputs are tensors of planned shapes.
  bool reads_any_value = false;
  // "" for ONNX's own ops; another domain (ONNX Runtime's "com.microsoft") for the few contrib ops
  // kiln runs, whose since_opset is then that domain's version.
  std::string_view domain = {};
};

// ONNX Runtime's contrib domain, whose quantized ops kiln runs (QGemm, QLinearAdd, QLinearMul).
inline constexpr std::string_view kMicrosoftDomain = "com.microsoft";

// Schema for `op_type` in `domain` ("" or "ai.onnx" for ONNX's ops), or null when kiln does not know
// the op.
const OpSchema* find_op_schema(std::string_view op_type, std::string_view domain);
// Every known op, for `kiln info` and the docs.
std::vector<const OpSchema*> all_op_schemas();

// Family tables (defined in the family's .cpp file).
std::span<const OpSchema> conv_schemas();            // ops/conv.cpp: Conv, ConvTranspose, Col2Im
std::span<const OpSchema> pool_schemas();            // ops/pool.cpp: MaxPool, AveragePool, LpPool, Global*Pool, MaxUnpool
std::span<const OpSchema> matmul_schemas();          // ops/matmul.cpp: MatMul, Gemm, Det
std::span<const OpSchema> elementwise_schemas();     // ops/elementwise.cpp: unary, binary, Where, Clip, Cast
std::span<const OpSchema> normalization_schemas();   // ops/normalization.cpp: BatchNormalization, LayerNormalization, GroupNormalization, LRN, ...
std::span<const OpSchema> softmax_schemas();         // ops/softmax.cpp: Softmax, LogSoftmax
std::span<const OpSchema> reduce_schemas();          // ops/reduce.cpp: ReduceMean, ReduceSum, ...
std::span<const OpSchema> shape_schemas();           // ops/shape_ops.cpp: Shape, Reshape, Flatten, ...
std::span<const OpSchema> data_movement_schemas();   // ops/data_movement.cpp: Concat, Split, Slice, ...
std::span<const OpSchema> einsum_schemas();          // ops/einsum.cpp: Einsum
std::span<const OpSchema> resize_schemas();          // ops/resize.cpp: Resize, Upsample
std::span<const OpSchema> indexing_schemas();        // ops/indexing.cpp: GatherND, ScatterND, TopK, CumSum, ...
std::span<const OpSchema> data_dependent_schemas();  // ops/data_dependent.cpp: NonZero, Unique, Compress, NMS
std::span<const OpSchema> roi_schemas();             // ops/roi.cpp: RoiAlign, MaxRoiPool
std::span<const OpSchema> grid_sample_schemas();     // ops/grid_sample.cpp: GridSample
std::span<const OpSchema> recurrent_schemas();       // ops/recurrent.cpp: LSTM, GRU, RNN
std::span<const OpSchema> signal_schemas();          // ops/signal.cpp: DFT, STFT, windows, MelWeightMatrix
std::span<const OpSchema> random_schemas();          // ops/random.cpp: RandomNormal, Bernoulli, ...
std::span<const OpSchema>
sequence_schemas();  // ops/sequence.cpp: Sequence*, SplitToSequence, ConcatFromSequence, Optional*
std::span<const OpSchema> control_flow_schemas();  // ops/control_flow.cpp: If, Loop, Scan, SequenceMap
std::span<const OpSchema>
quantize_schemas();  // ops/quantize.cpp: Quantize/DequantizeLinear, QLinearConv, ConvInteger, QGemm, ...

}  // namespace kiln
