// A QDQ model writes each quantized op as float: DequantizeLinear on its int8 inputs, the float op,
// QuantizeLinear on its result. Run so, it is fake quantization: float arithmetic on values that
// happen to be on a grid, rounded to the grid between ops. The product DQ(x) * DQ(w) summed over a
// window equals x_scale * w_scale * (the int32 sum of (x - x_zp) * (w - w_zp)), so the chain
// DQ -> Conv -> Q is exactly QLinearConv (DQ -> MatMul -> Q QLinearMatMul, DQ -> Gemm -> Q ONNX
// Runtime's com.microsoft QGemm): integer products with exact int32 accumulation, one requantization.
// DQ -> Add / Mul -> Q becomes com.microsoft QLinearAdd / QLinearMul, the same float32 arithmetic in
// one pass over the int8 tensors. A Relu or Clip between the op and Q is kept in the integer op when
// Q saturates where it clamps (Relu: Q's zero point is its type's minimum). DQ -> MaxPool -> Q with
// one scale and zero point is MaxPool on the int8 values: the maximum commutes with dequantizing, and
// quantizing a dequantized value again with its own parameters gives it back.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"
#include "graph/passes/fusion_patterns.h"
#include "graph/passes/passes.h"

namespace kiln {
namespace {

struct QdqIndex {
  const Graph& graph;
  std::map<std::string, const Node*> producer;
  std::map<std::string, int> reads;  // per value: node inputs and graph outputs reading it
  std::map<std::string, const Node*> reader;  // per value: a node reading it (the one, when reads is 1)
};

QdqIndex index_graph(const Graph& graph) {
  QdqIndex index{graph, {}, {}, {}};
  for (const Node& node : graph.nodes) {
    for (const std::string& output : node.outputs) index.producer[output] = &node;
    for (const std::string& input : node.inputs) {
      if (input.empty()) continue;
      ++index.reads[input];
      index.reader[input] = &node;
    }
  }
  for (const ValueInfo& output : graph.outputs) ++index.reads[output.name];
  return index;
}

const Node* producer_of(const QdqIndex& index, const std::string& value, const char* op_type) {
  const auto found = index.producer.find(value);
  return found != index.producer.end() && is_onnx_op(found->second, op_type) ? found->second : nullptr;
}

const Tensor* initializer(const QdqIndex& index, const std::string& name) {
  const auto found = index.graph.initializers.find(name);
  return found == index.graph.initializers.end() ? nullptr : &found->second;
}

// An initializer, or the tensor a Constant node holds (PyTorch writes Clip's bounds so).
const Tensor* constant_tensor(const QdqIndex& index, const std::string& name) {
  if (const Tensor* constant = initializer(index, name)) return constant;
  const auto found = index.producer.find(name);
  if (found == index.producer.end() || !is_onnx_op(found->second, "Constant")) return nullptr;
  const Attributes& attributes = found->second->attributes;
  return attributes.has("value") ? &attributes.require_tensor("value") : nullptr;
}

const std::string& input_or_empty(const Node& node, size_t i) {
  static const std::string kAbsent;
  return i < node.inputs.size() ? node.inputs[i] : kAbsent;
}

// The int8 type a dequantized value has before planning: an initializer's, a graph input's, or the
// zero point's of the QuantizeLinear computing it (uint8 without one). Undefined when unknown.
DType quantized_type(const QdqIndex& index, const std::string& value) {
  if (const Tensor* constant = constant_tensor(index, value)) return constant->dtype();
  for (const ValueInfo& input : index.graph.inputs) {
    if (input.name == value) return input.dtype;
  }
  if (const Node* quantize = producer_of(index, value, "QuantizeLinear")) {
    const std::string& zero_point = input_or_empty(*quantize, 2);
    if (zero_point.empty()) return DType::u8;
    const Tensor* constant = constant_tensor(index, zero_point);
    return constant == nullptr ? DType::undefined : constant->dtype();
  }
  return DType::undefined;
}

// A scale (or zero point) that is a constant: its values, or none when it is not a constant.
std::vector<double> constant_values(const QdqIndex& index, const std::string& name) {
  const Tensor* constant = constant_tensor(index, name);
  std::vector<double> values;
  if (constant == nullptr || !constant->is_contiguous()) return values;
  for (int64_t i = 0; i < constant->numel(); ++i) values.push_back(constant->double_at(i));
  return values;
}

// A Q or DQ node's scale and zero point, constant and one value each (a zero point may be absent).
struct PerTensor {
  double scale = 0;
  double zero_point = 0;
};
std::optional<PerTensor> per_tensor_parameters(const QdqIndex& index, const Node& node) {
  const std::vector<double> scale = constant_values(index, input_or_empty(node, 1));
  if (scale.size() != 1) return std::nullopt;
  const std::string& zero_point_name = input_or_empty(node, 2);
  const std::vector<double> zero_point = constant_values(index, zero_point_name);
  if (!zero_point_name.empty() && zero_point.size() != 1) return std::nullopt;
  return PerTensor{scale[0], zero_point.empty() ? 0 : zero_point[0]};
}

bool is_int8(DType dtype) {
  return dtype == DType::i8 || dtype == DType::u8;
}

// What one Conv or MatMul of a QDQ model becomes.
struct Rewrite {
  Node integer_node;                  // QLinearConv / QLinearMatMul, named as the float op
  std::vector<const Node*> absorbed;  // the Relu and QuantizeLinear after the float op
  std::string note;
};

// Why the float op stays float, or the integer op replacing it.
struct Outcome {
  std::optional<Rewrite> rewrite;
  std::string refusal;  // empty when the op is not between Q and DQ at all
};

Outcome refuse(std::string why) {
  return {std::nullopt, std::move(why)};
}

// "x uint8 (scale 0.02, zero point 128)"; per-index scales are counted, one per `per`.
std::string describe_value(const char* what, DType dtype, const std::vector<double>& scales,
                           const std::vector<double>& zero_points, const char* per = "") {
  std::string text = str_cat(what, " ", dtype_name(dtype));
  if (scales.size() == 1) {
    text += str_cat(" (scale ", scales[0], ", zero point ", zero_points.empty() ? 0.0 : zero_points[0], ")");
  } else {
    text += str_cat(" (", scales.size(), " scales, one per ", per, ", zero point ",
                    zero_points.size() > 1 ? "per " + std::string(per)
                                           : str_cat(zero_points.empty() ? 0.0 : zero_points[0]),
                    ")");
  }
  return text;
}

// A Relu's or Clip's bounds: Relu's [0, inf), Clip's constant min and max (attributes before opset
// 11, inputs from it; absent: unbounded). None when a bound is not a constant.
struct Clamp {
  double low = -std::numeric_limits<double>::infinity();
  double high = std::numeric_limits<double>::infinity();
};
std::optional<Clamp> clamp_of(const QdqIndex& index, const Node& node) {
  if (is_onnx_op(&node, "Relu")) return Clamp{0, std::numeric_limits<double>::infinity()};
  Clamp clamp;
  if (node.inputs.size() > 1) {
    for (size_t i = 1; i < node.inputs.size() && i < 3; ++i) {
      if (node.inputs[i].empty()) continue;
      const std::vector<double> bound = constant_values(index, node.inputs[i]);
      if (bound.size() != 1) return std::nullopt;
      (i == 1 ? clamp.low : clamp.high) = bound[0];
    }
    return clamp;
  }
  if (node.attributes.has("min")) clamp.low = node.attributes.get_float("min", 0);
  if (node.attributes.has("max")) clamp.high = node.attributes.get_float("max", 0);
  return clamp;
}

// Whether quantizing to `dtype` with these parameters saturates wherever the clamp would clamp: the
// clamp's bounds quantize to the type's ends (Relu: the zero point is the minimum). Q(clamp(v)) then
// equals Q(v) for every v, NaN included (both give the zero point).
bool saturation_implies(const Clamp& clamp, DType dtype, const PerTensor& q) {
  const auto quantized = [&](double bound) {
    return std::nearbyint(static_cast<float>(bound) / static_cast<float>(q.scale)) + q.zero_point;
  };
  const double minimum = dtype == DType::u8 ? 0 : -128;
  const double maximum = dtype == DType::u8 ? 255 : 127;
  const double infinity = std::numeric_limits<double>::infinity();
  return (clamp.low == -infinity || quantized(clamp.low) <= minimum) &&
         (clamp.high == infinity || quantized(clamp.high) >= maximum);
}

// The QuantizeLinear that is a float op's result's one reader (directly, or through a Relu or Clip the
// quantization implies: see saturation_implies), with its int8 type and per-tensor constant scale and
// zero point; or why there is none.
struct QuantizedResult {
  const Node* quantize = nullptr;
  const Node* relu = nullptr;  // the Relu or Clip absorbed
  DType dtype = DType::undefined;
  PerTensor parameters;
  std::string refusal;
};

QuantizedResult quantized_result(const QdqIndex& index, const Node& op) {
  const auto refuse_result = [](std::string why) { return QuantizedResult{{}, {}, {}, {}, std::move(why)}; };
  const std::string& result = op.outputs.empty() ? "" : op.outputs[0];
  const auto reads = [&](const std::string& value) {
    return index.reads.count(value) ? index.reads.at(value) : 0;
  };
  const auto reader_of = [&](const std::string& value) -> const Node* {
    const auto found = index.reader.find(value);
    return found == index.reader.end() ? nullptr : found->second;
  };
  const Node* reader = reader_of(result);
  if (reads(result) != 1 || reader == nullptr) {
    return refuse_result(
        "stays float32: its result is read by more than one node or is a graph output, not only by "
        "a QuantizeLinear");
  }
  const Node* relu = nullptr;
  const bool clamp = is_onnx_op(reader, "Relu") || is_onnx_op(reader, "Clip");
  if (clamp && !reader->outputs.empty() && reads(reader->outputs[0]) == 1) {
    relu = reader;
    reader = reader_of(relu->outputs[0]);
  }
  if (!is_onnx_op(reader, "QuantizeLinear") || reader->inputs.empty() ||
      reader->inputs[0] != (relu ? relu->outputs[0] : result)) {
    return refuse_result(
        str_cat("stays float32: its result is not quantized (", relu ? relu->op_type + " then " : "",
                reader ? reader->op_type : std::string("nothing"), " reads it, not QuantizeLinear)"));
  }
  const DType dtype = quantized_type(index, reader->outputs[0]);
  if (!is_int8(dtype)) {
    return refuse_result(str_cat("stays float32: its result must be quantized to int8 or uint8, not ",
                                 dtype_name(dtype), " (undefined: not known before planning)"));
  }
  const std::optional<PerTensor> parameters = per_tensor_parameters(index, *reader);
  if (!parameters) {
    return refuse_result(
        "stays float32: its result's scale and zero point must be constants with one value each (per "
        "tensor)");
  }
  if (relu != nullptr) {
    const std::optional<Clamp> bounds = clamp_of(index, *relu);
    if (!bounds) return refuse_result("stays float32: the Clip after it has bounds that are not constants");
    if (!saturation_implies(*bounds, dtype, *parameters)) {
      return refuse_result(str_cat(
          "stays float32: the ", relu->op_type, " after it is not implied by the quantization (its bounds [",
          bounds->low, ", ", bounds->high, "] are not where ", dtype_name(dtype), " with scale ",
          parameters->scale, " and zero point ", parameters->zero_point, " saturates)"));
    }
  }
  return {reader, relu, dtype, *parameters, {}};
}

Outcome integer_form(const QdqIndex& index, const Node& op) {
  const bool is_conv = op.op_type == "Conv";
  const bool is_gemm = op.op_type == "Gemm";
  const Node* dq_x = producer_of(index, input_or_empty(op, 0), "DequantizeLinear");
  const Node* dq_w = producer_of(index, input_or_empty(op, 1), "DequantizeLinear");
  if (dq_x == nullptr && dq_w == nullptr) return {};  // not a quantized op
  if (dq_x == nullptr || dq_w == nullptr) {
    return refuse(str_cat("stays float32: only its ", dq_x == nullptr ? "weights are" : "input is",
                          " dequantized (both must be int8 for an integer ", op.op_type, ")"));
  }
  const QuantizedResult quantized = quantized_result(index, op);
  if (quantized.quantize == nullptr) return refuse(quantized.refusal);
  const Node& q_y = *quantized.quantize;
  const Node* relu = quantized.relu;
  std::vector<const Node*> absorbed;
  if (relu != nullptr) absorbed.push_back(relu);
  absorbed.push_back(&q_y);
  const bool has_bias = (is_conv || is_gemm) && !input_or_empty(op, 2).empty();
  if (is_gemm) {
    // QGemm scales the accumulators and C alike by alpha (C's scale is alpha * a_scale * b_scale), so
    // a Gemm whose alpha or beta is not 1 has no integer form with the bias the model quantized.
    const float alpha = op.attributes.get_float("alpha", 1.0f);
    const float beta = op.attributes.get_float("beta", 1.0f);
    if (alpha != 1 || (has_bias && beta != 1)) {
      return refuse(str_cat("stays float32: its alpha (", alpha, ") and beta (", beta,
                            ") must be 1 for the integer Gemm (QGemm adds C to the accumulators)"));
    }
  }

  const DType x_type = quantized_type(index, dq_x->inputs[0]);
  const DType w_type = quantized_type(index, dq_w->inputs[0]);
  const DType y_type = quantized.dtype;
  if (!is_int8(x_type) || !is_int8(w_type)) {
    return refuse(str_cat("stays float32: its input and weights must be int8 or uint8, they are ",
                          dtype_name(x_type), " and ", dtype_name(w_type),
                          " (undefined: not known before planning)"));
  }
  const std::optional<PerTensor> x = per_tensor_parameters(index, *dq_x);
  const std::optional<PerTensor> y = quantized.parameters;
  if (!x) {
    return refuse(
        "stays float32: its input's scale and zero point must be constants with one value each (per "
        "tensor)");
  }
  // The weights: a constant, per tensor or (Conv) per output channel or (MatMul) per column of a 2-D B.
  const Tensor* weights = constant_tensor(index, dq_w->inputs[0]);
  const std::vector<double> w_scales = constant_values(index, input_or_empty(*dq_w, 1));
  const std::vector<double> w_zero_points = constant_values(index, input_or_empty(*dq_w, 2));
  if (weights == nullptr || w_scales.empty()) {
    return refuse("stays float32: its weights and their scales must be constants");
  }
  if (w_scales.size() > 1) {
    const int64_t rank = weights->rank();
    const int64_t axis = dq_w->attributes.get_int("axis", 1);
    // B's columns are its dim 1, or dim 0 when a Gemm stores B transposed.
    const bool trans_b = is_gemm && op.attributes.get_int("transB", 0) != 0;
    const int64_t wanted = is_conv || trans_b ? 0 : 1;
    const bool along = rank >= 1 && (axis == wanted || axis + rank == wanted) && (is_conv || rank == 2);
    if (!along) {
      return refuse(str_cat("stays float32: its weights are quantized along axis ", axis, ", not per ",
                            is_conv   ? "output channel (axis 0)"
                            : trans_b ? "column of B' (axis 0 of B, stored transposed)"
                                      : "column of a 2-D B (axis 1)"));
    }
  }
  Node integer_node;
  integer_node.name = op.name;
  integer_node.op_type = is_conv ? "QLinearConv" : is_gemm ? "QGemm" : "QLinearMatMul";
  integer_node.inputs = {dq_x->inputs[0], input_or_empty(*dq_x, 1), input_or_empty(*dq_x, 2),
                         dq_w->inputs[0], input_or_empty(*dq_w, 1), input_or_empty(*dq_w, 2)};
  integer_node.outputs = {q_y.outputs[0]};
  if (is_conv) integer_node.attributes = op.attributes;
  if (is_gemm) {
    integer_node.domain = kMicrosoftDomain;
    for (const char* name : {"transA", "transB"}) {
      integer_node.attributes.set_int(name, op.attributes.get_int(name, 0));
    }
  }
  std::string bias_name;  // QLinearConv takes the bias after y's scale and zero point, QGemm before
  std::string bias_text;
  if (has_bias) {
    // The bias must be int32 at scale x_scale * w_scale, as the integer op adds it to the accumulators.
    const Node* dq_b = producer_of(index, op.inputs[2], "DequantizeLinear");
    const Tensor* bias = dq_b ? constant_tensor(index, dq_b->inputs[0]) : nullptr;
    const std::vector<double> b_scales =
        dq_b ? constant_values(index, input_or_empty(*dq_b, 1)) : std::vector<double>{};
    const std::vector<double> b_zero_points =
        dq_b ? constant_values(index, input_or_empty(*dq_b, 2)) : std::vector<double>{};
    if (bias == nullptr || bias->dtype() != DType::i32 || b_scales.empty()) {
      return refuse("stays float32: its bias is not a dequantized int32 constant");
    }
    for (size_t m = 0; m < std::max(b_scales.size(), w_scales.size()); ++m) {
      const double want = static_cast<float>(static_cast<float>(x->scale) *
                                             static_cast<float>(w_scales[w_scales.size() == 1 ? 0 : m]));
      const double got = b_scales[b_scales.size() == 1 ? 0 : std::min(m, b_scales.size() - 1)];
      if (std::abs(got - want) > 1e-6 * std::abs(want)) {
        return refuse(str_cat("stays float32: its bias's scale ", got, " is not x_scale * w_scale = ", want,
                              " (output channel ", m, ")"));
      }
    }
    for (double zero_point : b_zero_points) {
      if (zero_point != 0) return refuse("stays float32: its bias has a zero point other than 0");
    }
    bias_name = dq_b->inputs[0];
    bias_text = ", + int32 bias";
  }
  if (is_gemm) integer_node.inputs.push_back(bias_name);
  integer_node.inputs.push_back(input_or_empty(q_y, 1));
  integer_node.inputs.push_back(input_or_empty(q_y, 2));
  if (is_conv && !bias_name.empty()) integer_node.inputs.push_back(bias_name);
  Rewrite rewrite;
  rewrite.integer_node = std::move(integer_node);
  rewrite.absorbed = std::move(absorbed);
  rewrite.note = str_cat("quantized: ", rewrite.integer_node.op_type, " from DequantizeLinear -> ",
                         op.op_type, relu ? " -> " + relu->op_type : "", " -> QuantizeLinear; ",
                         describe_value(is_conv ? "x" : "A", x_type, {x->scale}, {x->zero_point}), ", ",
                         describe_value(is_conv ? "w" : "B", w_type, w_scales, w_zero_points,
                                        is_conv ? "output channel" : "column"),
                         " -> int32 accumulators (exact)", bias_text, ", requantized to ",
                         describe_value("y", y_type, {y->scale}, {y->zero_point}),
                         relu ? "; the " + relu->op_type + " is the quantization's saturation" : "");
  return {std::move(rewrite), {}};
}

// DQ(a) + DQ(b) -> [Relu ->] Q (or Mul) is com.microsoft QLinearAdd (QLinearMul) computing the same
// float32 arithmetic in one pass: the chain's bits, without its three float tensors.
Outcome binary_form(const QdqIndex& index, const Node& op) {
  const Node* dq_a = producer_of(index, input_or_empty(op, 0), "DequantizeLinear");
  const Node* dq_b = producer_of(index, input_or_empty(op, 1), "DequantizeLinear");
  if (dq_a == nullptr && dq_b == nullptr) return {};
  if (dq_a == nullptr || dq_b == nullptr) {
    return refuse(str_cat("stays float32: only its ", dq_a == nullptr ? "second" : "first",
                          " input is dequantized (both must be for QLinear", op.op_type, ")"));
  }
  const QuantizedResult quantized = quantized_result(index, op);
  if (quantized.quantize == nullptr) return refuse(quantized.refusal);
  const DType a_type = quantized_type(index, dq_a->inputs[0]);
  const DType b_type = quantized_type(index, dq_b->inputs[0]);
  if (a_type != quantized.dtype || b_type != quantized.dtype) {
    return refuse(str_cat("stays float32: its inputs and result must share one int8 type, they are ",
                          dtype_name(a_type), ", ", dtype_name(b_type), " and ",
                          dtype_name(quantized.dtype)));
  }
  const std::optional<PerTensor> a = per_tensor_parameters(index, *dq_a);
  const std::optional<PerTensor> b = per_tensor_parameters(index, *dq_b);
  if (!a || !b) {
    return refuse(
        "stays float32: its inputs' scales and zero points must be constants with one value each (per "
        "tensor)");
  }
  Rewrite rewrite;
  Node& node = rewrite.integer_node;
  node.name = op.name;
  node.op_type = "QLinear" + op.op_type;
  node.domain = kMicrosoftDomain;
  node.inputs = {dq_a->inputs[0],
                 input_or_empty(*dq_a, 1),
                 input_or_empty(*dq_a, 2),
                 dq_b->inputs[0],
                 input_or_empty(*dq_b, 1),
                 input_or_empty(*dq_b, 2),
                 input_or_empty(*quantized.quantize, 1),
                 input_or_empty(*quantized.quantize, 2)};
  node.outputs = {quantized.quantize->outputs[0]};
  if (quantized.relu != nullptr) rewrite.absorbed.push_back(quantized.relu);
  rewrite.absorbed.push_back(quantized.quantize);
  rewrite.note = str_cat(
      "quantized: ", node.op_type, " from DequantizeLinear -> ", op.op_type,
      quantized.relu ? " -> " + quantized.relu->op_type : "", " -> QuantizeLinear; ",
      describe_value("A", a_type, {a->scale}, {a->zero_point}), ", ",
      describe_value("B", b_type, {b->scale}, {b->zero_point}), " -> ",
      describe_value("y", quantized.dtype, {quantized.parameters.scale}, {quantized.parameters.zero_point}),
      "; the same float32 arithmetic as the chain, in one pass",
      quantized.relu ? "; the " + quantized.relu->op_type + " is the quantization's saturation" : "");
  return {std::move(rewrite), {}};
}

// DQ(q) -> MaxPool -> Q with Q's type, scale and zero point equal to DQ's is MaxPool(q): the pooled
// int8 values themselves, bit for bit (see the file comment).
Outcome max_pool_form(const QdqIndex& index, const Node& op) {
  const Node* dq = producer_of(index, input_or_empty(op, 0), "DequantizeLinear");
  if (dq == nullptr) return {};
  if (op.outputs.size() > 1 && !op.outputs[1].empty())
    return refuse("stays float32: its Indices output is read (int8 pooling writes values only)");
  const QuantizedResult quantized = quantized_result(index, op);
  if (quantized.quantize == nullptr) return refuse(quantized.refusal);
  if (quantized.relu != nullptr)
    return refuse("stays float32: a Relu or Clip follows it before QuantizeLinear");
  const DType x_type = quantized_type(index, dq->inputs[0]);
  const std::optional<PerTensor> x = per_tensor_parameters(index, *dq);
  const PerTensor& y = quantized.parameters;
  // Compared as the float32 values the ops compute with.
  const bool same = x && x_type == quantized.dtype &&
                    static_cast<float>(x->scale) == static_cast<float>(y.scale) &&
                    x->zero_point == y.zero_point;
  if (!same) {
    return refuse(str_cat("stays float32: its input and result are quantized differently (",
                          describe_value("x", x_type, {x ? x->scale : 0}, {x ? x->zero_point : 0}), ", ",
                          describe_value("y", quantized.dtype, {y.scale}, {y.zero_point}), ")"));
  }
  Rewrite rewrite;
  rewrite.integer_node = op;
  rewrite.integer_node.inputs = {dq->inputs[0]};
  rewrite.integer_node.outputs = {quantized.quantize->outputs[0]};
  rewrite.absorbed.push_back(quantized.quantize);
  rewrite.note =
      str_cat("quantized: MaxPool on the int8 values from DequantizeLinear -> MaxPool -> QuantizeLinear, ",
              describe_value("x and y", x_type, {x->scale}, {x->zero_point}),
              "; the maximum commutes with dequantizing, the chain's bits");
  return {std::move(rewrite), {}};
}

}  // namespace

std::optional<QuantizedModel> fuse_qdq_chains(const Model& model) {
  const Graph& graph = model.graph;
  const bool has_qdq = std::any_of(graph.nodes.begin(), graph.nodes.end(),
                                   [](const Node& node) { return is_onnx_op(&node, "DequantizeLinear"); });
  if (!has_qdq) return std::nullopt;
  const QdqIndex index = index_graph(graph);
  QuantizedModel result{model, {}, 0};
  std::map<const Node*, Node> replaced;
  std::set<const Node*> removed;
  for (const Node& node : graph.nodes) {
    const bool product =
        is_onnx_op(&node, "Conv") || is_onnx_op(&node, "MatMul") || is_onnx_op(&node, "Gemm");
    const bool binary = is_onnx_op(&node, "Add") || is_onnx_op(&node, "Mul");
    const bool max_pool = is_onnx_op(&node, "MaxPool");
    if (!product && !binary && !max_pool) continue;
    Outcome outcome = product  ? integer_form(index, node)
                      : binary ? binary_form(index, node)
                               : max_pool_form(index, node);
    if (outcome.rewrite) {
      if (!outcome.rewrite->integer_node.domain.empty()) result.model.opsets.emplace(kMicrosoftDomain, 1);
      for (const Node* absorbed : outcome.rewrite->absorbed) removed.insert(absorbed);
      result.notes[node.name] = outcome.rewrite->note;
      replaced.emplace(&node, std::move(outcome.rewrite->integer_node));
      ++result.integer_ops;
    } else if (!outcome.refusal.empty()) {
      result.notes[node.name] = outcome.refusal;
    }
  }
  if (result.integer_ops == 0 && result.notes.empty()) return std::nullopt;
  result.model.graph.nodes.clear();
  for (const Node& node : graph.nodes) {
    if (removed.count(&node) != 0) continue;
    const auto replacement = replaced.find(&node);
    result.model.graph.nodes.push_back(replacement != replaced.end() ? replacement->second : node);
  }
  return result;
}

}  // namespace kiln
