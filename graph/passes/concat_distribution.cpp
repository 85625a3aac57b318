// A convolution over a channel Concat is the sum of convolutions over its parts, each with its slice
// of the weights' input channels: Conv(Concat(a, b), W) = Conv(a, W[:, :Ca]) + Conv(b, W[:, Ca:]).
// Where every reader of a Concat is such a convolution, the model is planned with the Concat gone and
// each reader split into one Conv per part joined by Adds, which the fusion pass makes the oneDNN
// convolutions' sum post-ops: the joined copy is never written. SqueezeNet's fire modules end so.
// Only where a backend fuses those sums into float32 convolutions under the settings (not in
// deterministic mode, where native runs convolutions and sums as separate passes, nor in bf16, where
// each partial sum would be rounded), and where the reader's own result is not itself folded or
// summed into (a BatchNormalization or a residual Add after it would lose their fusion).
#include <algorithm>
#include <map>
#include <set>

#include "backends/registry.h"
#include "backends/selection.h"
#include "core/error.h"
#include "graph/passes/fusion_patterns.h"
#include "graph/passes/passes.h"

namespace kiln {
namespace {

// Ops whose output 0 has input 0's channels (NCHW's dim 1).
const std::set<std::string> kChannelPreserving = {
    "Relu",        "LeakyRelu", "Clip",     "Sigmoid",  "Tanh",    "HardSigmoid",        "HardSwish",
    "Elu",         "Selu",      "Softplus", "Identity", "Dropout", "BatchNormalization", "MaxPool",
    "AveragePool", "LRN"};

// More joined channels than any real model has: counts beyond it are treated as unknown (no overflow).
constexpr int64_t kMaxChannels = int64_t{1} << 40;

struct ModelIndex {
  const Graph& graph;
  std::map<std::string, const Node*> producer;
  std::map<std::string, std::vector<const Node*>> readers;  // one entry per input position read
  std::set<std::string> values;                             // every value and initializer name
  std::set<std::string> node_names;
  std::map<std::string, int64_t> channels;  // known_channels' answers, each value computed once
};

ModelIndex index_model(const Graph& graph) {
  ModelIndex index{graph, {}, {}, {}, {}, {}};
  // Every name the model uses for a value, read or written, so a new one cannot meet a dangling read.
  for (const ValueInfo& input : graph.inputs) index.values.insert(input.name);
  for (const ValueInfo& output : graph.outputs) index.values.insert(output.name);
  for (const auto& [name, tensor] : graph.initializers) index.values.insert(name);
  for (const Node& node : graph.nodes) {
    index.node_names.insert(node.name);
    for (const std::string& output : node.outputs) {
      index.producer[output] = &node;
      index.values.insert(output);
    }
    for (const std::string& input : node.inputs) {
      index.values.insert(input);
      if (!input.empty()) index.readers[input].push_back(&node);
    }
  }
  return index;
}

// A float32 convolution weight of rank >= 3 given as an initializer, or null.
const Tensor* conv_weights(const ModelIndex& index, const Node& conv) {
  if (!is_onnx_op(&conv, "Conv") || conv.inputs.size() < 2) return nullptr;
  const auto found = index.graph.initializers.find(conv.inputs[1]);
  if (found == index.graph.initializers.end()) return nullptr;
  const Tensor& weights = found->second;
  if (!weights.defined() || weights.dtype() != DType::f32 || weights.rank() < 3 || !weights.is_contiguous() ||
      weights.dim(0) <= 0 || weights.dim(1) <= 0)
    return nullptr;
  return &weights;
}

// How many channels `value` has, as the model's weights fix it (a Conv's output channels, through
// channel-preserving ops and channel Concats), or 0 when they do not.
int64_t known_channels(ModelIndex& index, const std::string& value, int depth = 0) {
  if (const auto known = index.channels.find(value); known != index.channels.end()) return known->second;
  const auto found = index.producer.find(value);
  if (found == index.producer.end() || depth > 64) return 0;
  const Node& node = *found->second;
  int64_t channels = 0;
  if (!is_default_domain(node.domain) || node.outputs.empty() || node.outputs[0] != value ||
      node.inputs.empty()) {
    channels = 0;
  } else if (node.op_type == "Conv") {
    const Tensor* weights = conv_weights(index, node);
    channels = weights == nullptr ? 0 : weights->dim(0);
  } else if (kChannelPreserving.count(node.op_type) != 0) {
    channels = known_channels(index, node.inputs[0], depth + 1);
  } else if (node.op_type == "Concat" && node.attributes.get_int("axis", 0) == 1) {
    for (const std::string& part : node.inputs) {
      const int64_t part_channels = part.empty() ? 0 : known_channels(index, part, depth + 1);
      if (part_channels <= 0 || part_channels > kMaxChannels - channels) {
        channels = 0;
        break;
      }
      channels += part_channels;
    }
  }
  index.channels[value] = channels;
  return channels;
}

// The Concat's parts' channels, when every reader of its output is a group-1 float32 Conv reading it
// as its data input, whose result is not read by a BatchNormalization or Add, and the split pays: the
// copy reads and writes the joined channels, the Adds read (parts - 1) x each reader's output
// channels, so only where those are fewer (squeezenet1_1's classifier, 512 channels in and 1000 out,
// measured no faster split). Empty otherwise.
std::vector<int64_t> distributable_parts(ModelIndex& index, const Node& concat) {
  if (!is_onnx_op(&concat, "Concat") || concat.inputs.size() < 2 || concat.outputs.size() != 1) return {};
  const std::string& joined = concat.outputs[0];
  for (const ValueInfo& output : index.graph.outputs) {
    if (output.name == joined) return {};
  }
  const auto readers = index.readers.find(joined);
  if (readers == index.readers.end()) return {};
  for (const Node* reader : readers->second) {
    if (conv_weights(index, *reader) == nullptr) return {};  // before counting any part's channels
  }
  std::vector<int64_t> parts;
  int64_t total = 0;
  for (const std::string& part : concat.inputs) {
    const int64_t channels = part.empty() ? 0 : known_channels(index, part);
    if (channels <= 0 || channels > kMaxChannels - total) return {};
    parts.push_back(channels);
    total += channels;
  }
  const int64_t axis = concat.attributes.get_int("axis", 0);
  int64_t summed = 0;  // channels the Adds read, over every reader
  for (const Node* reader : readers->second) {
    const Tensor& weights = *conv_weights(index, *reader);
    if (reader->inputs[0] != joined || reader->inputs[1] == joined ||
        (reader->inputs.size() > 2 && reader->inputs[2] == joined) || reader->outputs.size() != 1 ||
        reader->outputs[0].empty() || reader->attributes.get_int("group", 1) != 1 ||
        weights.dim(1) != total || (axis != 1 && axis != 1 - weights.rank()))
      return {};
    if (const auto after = index.readers.find(reader->outputs[0]); after != index.readers.end()) {
      for (const Node* next : after->second) {
        if (is_onnx_op(next, "BatchNormalization") || is_onnx_op(next, "Add")) return {};
      }
    }
    summed += (static_cast<int64_t>(parts.size()) - 1) * weights.dim(0);
    if (summed >= total) return {};
  }
  return parts;
}

// Weights [Cout, Cin, k...] restricted to input channels [first, first + count).
Tensor input_channel_slice(const Tensor& weights, int64_t first, int64_t count) {
  Shape shape = weights.shape();
  const int64_t in_channels = shape[1];
  shape[1] = count;
  const int64_t kernel = weights.numel() / (shape[0] * in_channels);
  Tensor slice = Tensor::empty(DType::f32, shape);
  const float* from = weights.data<float>();
  float* to = slice.data<float>();
  for (int64_t o = 0; o < shape[0]; ++o) {
    const float* row = from + (o * in_channels + first) * kernel;
    std::copy(row, row + count * kernel, to + o * count * kernel);
  }
  return slice;
}

// The nodes replacing `conv` (reading the Concat `concat` of `parts`): one Conv per part, the bias on
// the first, and Adds summing them into the conv's own output name. Their nodes are named after the
// conv, their values and weights after its output; false where a name is taken (`values` and
// `node_names` hold every name so far, the ones added here too).
bool split_reader(Graph& graph, const Node& concat, const Node& conv, const std::vector<int64_t>& parts,
                  std::vector<Node>& nodes, std::set<std::string>& values, std::set<std::string>& node_names,
                  std::map<std::string, std::string>& notes) {
  const Tensor weights = graph.initializers.at(conv.inputs[1]);
  const std::string& output = conv.outputs[0];
  std::string previous;
  int64_t first = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    Node part = conv;
    part.name = str_cat(conv.name, ":part", k);
    const std::string weight_name = str_cat(output, ":part", k, ":weights");
    part.outputs = {str_cat(output, ":part", k)};
    if (!node_names.insert(part.name).second || !values.insert(weight_name).second ||
        !values.insert(part.outputs[0]).second)
      return false;
    graph.initializers[weight_name] = input_channel_slice(weights, first, parts[k]);
    part.inputs = {concat.inputs[k], weight_name};
    if (k == 0 && conv.inputs.size() > 2 && !conv.inputs[2].empty()) part.inputs.push_back(conv.inputs[2]);
    notes[part.name] = str_cat("Concat '", concat.name, "' distributed: part ", k + 1, " of ", parts.size(),
                               " (input channels ", first, "..", first + parts[k] - 1, ") of '", conv.name,
                               "', the parts' convolutions summed instead of their inputs joined");
    nodes.push_back(part);
    if (k > 0) {
      Node add;
      add.name = str_cat(conv.name, ":sum", k);
      add.op_type = "Add";
      add.inputs = {part.outputs[0], previous};
      add.outputs = {k + 1 == parts.size() ? output : str_cat(output, ":sum", k)};
      if (!node_names.insert(add.name).second ||
          (k + 1 < parts.size() && !values.insert(add.outputs[0]).second))
        return false;
      nodes.push_back(add);
      previous = add.outputs[0];
    } else {
      previous = part.outputs[0];
    }
    first += parts[k];
  }
  return true;
}

}  // namespace

std::optional<DistributedConcats> distribute_concats(const Model& model, const Settings& settings) {
  if (settings.on("deterministic") || settings.precision("conv_precision") == Precision::bf16 ||
      !has_post_op_kind(fusion_offered("Conv", settings).post_ops, PostOp::Kind::sum))
    return std::nullopt;
  ModelIndex index = index_model(model.graph);
  std::map<const Node*, std::vector<int64_t>> distributed;
  for (const Node& node : model.graph.nodes) {
    try {
      std::vector<int64_t> parts = distributable_parts(index, node);
      if (!parts.empty()) distributed.emplace(&node, std::move(parts));
    } catch (const Error&) {
      // An attribute of the wrong type: planning the model as it is reports it.
    }
  }
  if (distributed.empty()) return std::nullopt;

  DistributedConcats result{model, {}, {}, 0};
  Graph& graph = result.model.graph;
  std::vector<Node> nodes;
  std::set<const Node*> removed;
  std::map<const Node*, std::pair<const Node*, const std::vector<int64_t>*>> split;  // conv -> concat
  for (const auto& [concat, parts] : distributed) {
    for (const Node* reader : index.readers.at(concat->outputs[0])) split[reader] = {concat, &parts};
    removed.insert(concat);
    result.joins.push_back({concat->name, concat->inputs});
  }
  for (const Node& node : model.graph.nodes) {
    const auto reader = split.find(&node);
    if (reader == split.end()) {
      if (removed.count(&node) == 0) nodes.push_back(node);
    } else if (!split_reader(graph, *reader->second.first, node, *reader->second.second, nodes, index.values,
                             index.node_names, result.notes)) {
      return std::nullopt;  // a name the split would give is taken: the model is planned as it is
    }
  }
  graph.nodes = std::move(nodes);
  result.concats = static_cast<int>(removed.size());
  return result;
}

void check_distributed_joins(const PlanState& state, const DistributedConcats& distributed) {
  for (const DistributedConcats::Join& join : distributed.joins) {
    const Slot* first = state.planned(join.parts[0]);
    KILN_CHECK(first != nullptr, runtime, "Concat '", join.concat, "': part '", join.parts[0],
               "' was not planned");
    for (const std::string& part : join.parts) {
      const Slot* slot = state.planned(part);
      KILN_CHECK(slot != nullptr, runtime, "Concat '", join.concat, "': part '", part, "' was not planned");
      const Shape& a = first->info.shape;
      const Shape& b = slot->info.shape;
      bool joinable = a.size() == b.size() && a.size() >= 2;
      for (size_t d = 0; joinable && d < a.size(); ++d) joinable = d == 1 || a[d] == b[d];
      KILN_CHECK(joinable, invalid_argument, "Concat '", join.concat, "': parts ", shape_to_string(a),
                 " and ", shape_to_string(b), " differ outside the channels");
    }
  }
}

}  // namespace kiln
