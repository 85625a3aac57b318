#include "graph/subgraph_runner.h"

#include <algorithm>

#include "graph/executor.h"
#include "graph/passes/passes.h"
#include "graph/plan.h"

namespace kiln {
namespace {

// A plan cache key: what planning depends on for one input.
void append_key(std::string& key, const TensorInfo& info) {
  key += str_cat(static_cast<int>(info.kind), ':', static_cast<int>(info.dtype), ':');
  if (info.shape_known) key += shape_to_string(info.shape);
  key += ';';
}

void append_value_key(std::string& key, const Tensor& value) {
  key += '=';
  for (int64_t i = 0; i < value.numel(); ++i) key += str_cat(value.double_at(i), ',');
  key += ';';
}

ValueInfo value_info(const std::string& name, const TensorInfo& info) {
  ValueInfo value;
  value.name = name;
  value.kind = info.kind;
  value.dtype = info.dtype;
  // A tensor's shape comes with the plan's input shapes; a sequence's element shape only from here.
  value.has_shape = info.kind == ValueKind::sequence && info.shape_known;
  if (value.has_shape) {
    for (int64_t dim : info.shape) value.shape.push_back(Dim{dim, {}});
  }
  return value;
}

// How many times `graph`'s nodes (and the subgraphs nested in them) read `name`.
int reads_of(const Graph& graph, const std::string& name) {
  int reads = 0;
  for (const Node& node : graph.nodes) {
    reads += static_cast<int>(std::count(node.inputs.begin(), node.inputs.end(), name));
    for (const auto& [attribute_name, attribute] : node.attributes.all()) {
      std::vector<std::shared_ptr<const Graph>> nested = attribute.graphs;
      if (attribute.g != nullptr) nested.push_back(attribute.g);
      for (const auto& inner : nested) {
        const std::vector<std::string> outer = outer_scope_reads(*inner);
        reads += static_cast<int>(std::count(outer.begin(), outer.end(), name));
      }
    }
  }
  return reads;
}

// A Loop body (inputs: iteration, condition, carried...; outputs: condition, carried..., scans...)
// whose carried value v leaves as Concat(v, rows) along axis 0, v read nowhere else and the
// Concat's output nowhere else but as v's output: returns the body returning `rows` instead, and
// marks the output in `appended`.
std::shared_ptr<const Graph> returning_appended_rows(const std::shared_ptr<const Graph>& body,
                                                     std::vector<bool>& appended) {
  appended.assign(body->outputs.size(), false);
  if (body->inputs.size() < 2) return body;
  std::shared_ptr<Graph> rewritten;
  const size_t carried =
      std::min(body->inputs.size() - 2, body->outputs.size() - std::min<size_t>(1, body->outputs.size()));
  for (size_t v = 0; v < carried; ++v) {
    const Graph& current = rewritten ? *rewritten : *body;
    const std::string& input = current.inputs[2 + v].name;
    const std::string& output = current.outputs[1 + v].name;
    const auto concat = std::find_if(current.nodes.begin(), current.nodes.end(), [&](const Node& node) {
      return node.outputs.size() == 1 && node.outputs[0] == output;
    });
    if (concat == current.nodes.end() || concat->op_type != "Concat" || !is_default_domain(concat->domain) ||
        concat->inputs.size() != 2 || concat->inputs[0] != input || concat->inputs[1].empty() ||
        concat->attributes.get_int("axis", -1) != 0)
      continue;
    const auto outputs_named =
        std::count_if(current.outputs.begin(), current.outputs.end(),
                      [&](const ValueInfo& info) { return info.name == output || info.name == input; });
    if (reads_of(current, input) != 1 || reads_of(current, output) != 0 || outputs_named != 1) continue;
    if (!rewritten) rewritten = std::make_shared<Graph>(*body);
    const std::string rows = concat->inputs[1];
    rewritten->nodes.erase(rewritten->nodes.begin() + (concat - current.nodes.begin()));
    ValueInfo& returned = rewritten->outputs[1 + v];
    returned.name = rows;
    returned.has_shape = false;
    returned.shape.clear();
    appended[1 + v] = true;
  }
  return rewritten ? rewritten : body;
}

}  // namespace

PlannedSubgraph::PlannedSubgraph(std::shared_ptr<const Graph> graph, std::map<std::string, int64_t> opsets,
                                 std::string producer, std::vector<std::string> captures,
                                 std::vector<TensorInfo> capture_infos, Settings settings, std::string label,
                                 bool loop_body)
    : graph_(std::move(graph)),
      opsets_(std::move(opsets)),
      producer_(std::move(producer)),
      captures_(std::move(captures)),
      capture_infos_(std::move(capture_infos)),
      settings_(std::move(settings)),
      label_(std::move(label)) {
  for (size_t i = 0; i < captures_.size(); ++i) {
    if (!capture_infos_[i].is_constant()) run_time_captures_.push_back(i);
  }
  if (loop_body) graph_ = returning_appended_rows(graph_, appended_);
  const auto unread = [&](const std::string& name) {
    return reads_of(*graph_, name) == 0 &&
           std::none_of(graph_->outputs.begin(), graph_->outputs.end(),
                        [&](const ValueInfo& output) { return output.name == name; });
  };
  for (const ValueInfo& input : graph_->inputs) unread_.push_back(unread(input.name));
  for (size_t i : run_time_captures_) unread_.push_back(unread(captures_[i]));
  // A body runs inside one step of its enclosing run, on that step's threads: its steps run one
  // after another.
  settings_.set("execution_mode", static_cast<int>(ExecutionMode::sequential));
}

std::shared_ptr<const Model> PlannedSubgraph::model_for(std::span<const TensorInfo> infos) const {
  auto model = std::make_shared<Model>();
  model->opsets = opsets_;
  model->producer = producer_;
  Graph& graph = model->graph;
  graph.name = graph_->name;
  graph.nodes = graph_->nodes;
  graph.initializers = graph_->initializers;
  graph.outputs = graph_->outputs;
  graph.value_info = graph_->value_info;
  for (size_t i = 0; i < graph_->inputs.size(); ++i) {
    const ValueInfo& declared = graph_->inputs[i];
    KILN_CHECK(declared.dtype == DType::undefined || declared.dtype == infos[i].dtype, type_mismatch,
               "input '", declared.name, "' is declared ", dtype_name(declared.dtype), " but receives ",
               dtype_name(infos[i].dtype));
    graph.inputs.push_back(value_info(declared.name, infos[i]));
  }
  size_t fed = graph_->inputs.size();
  for (size_t i = 0; i < captures_.size(); ++i) {
    if (capture_infos_[i].is_constant()) {
      graph.initializers[captures_[i]] = capture_infos_[i].value;
    } else {
      graph.inputs.push_back(value_info(captures_[i], infos[fed++]));
    }
  }
  return model;
}

std::vector<TensorInfo> PlannedSubgraph::declared_outputs() const {
  std::vector<TensorInfo> outputs;
  for (const ValueInfo& output : graph_->outputs) {
    KILN_CHECK(output.dtype != DType::undefined, not_implemented, "output '", output.name,
               "' declares no type, and its shape depends on values only the run knows");
    TensorInfo info;
    info.kind = output.kind;
    info.dtype = output.dtype;
    info.shape_known = false;
    outputs.push_back(info);
  }
  return outputs;
}

std::shared_ptr<const Plan> PlannedSubgraph::plan_for(std::span<const TensorInfo> infos,
                                                      std::span<const Tensor> values) const {
  // An input no node reads (a carried value the body now only appends to) plans the same at any
  // shape: its shape is not part of the key.
  std::string key;
  for (size_t i = 0; i < infos.size(); ++i) {
    if (unread_[i]) {
      key += "unread;";
    } else {
      append_key(key, infos[i]);
    }
  }
  std::vector<Tensor> bound(infos.size());
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (const auto found = plans_.find(key); found != plans_.end()) return found->second.plan;
    }
    std::shared_ptr<const Model> model = model_for(infos);
    std::vector<Shape> shapes;
    for (const TensorInfo& info : infos)
      shapes.push_back(info.kind == ValueKind::tensor ? info.shape : Shape{});
    try {
      std::shared_ptr<const Plan> plan = Plan::build(*model, shapes, bound, settings_);
      std::lock_guard lock(mutex_);
      const auto [entry, added] = plans_.try_emplace(key, Planned{model, plan});
      if (added) {
        plan_order_.push_back(key);
        if (plan_order_.size() > kMaxPlans) {
          plans_.erase(plan_order_.front());
          plan_order_.pop_front();
        }
      }
      return plan;
    } catch (const NeedsInputValue& needs) {
      // A shape computed from one of its inputs (a Reshape by the iteration number): planned for
      // that input's value, when the run has it.
      const size_t input = needs.input();
      if (input >= values.size() || bound[input].defined()) throw;
      bound[input] = values[input];
      key += str_cat('#', input);
      append_value_key(key, values[input]);
    }
  }
}

std::vector<TensorInfo> PlannedSubgraph::infer(std::span<const TensorInfo> inputs) const {
  KILN_CHECK(inputs.size() == num_inputs(), invalid_model, label_, " takes ", num_inputs(), " inputs, given ",
             inputs.size());
  const bool shapes_known = std::all_of(inputs.begin(), inputs.end(), [](const TensorInfo& info) {
    return info.shape_known || info.kind != ValueKind::tensor;
  });
  if (!shapes_known) return declared_outputs();
  std::vector<TensorInfo> infos(inputs.begin(), inputs.end());
  for (size_t i : run_time_captures_) infos.push_back(capture_infos_[i]);
  std::shared_ptr<const Plan> plan;
  try {
    plan = with_context(label_, [&] { return plan_for(infos, {}); });
  } catch (const NeedsInputValue&) {
    return declared_outputs();
  }
  std::vector<TensorInfo> outputs;
  for (int slot : plan->output_slots()) outputs.push_back(plan->slots()[static_cast<size_t>(slot)].info);
  return outputs;
}

std::vector<Tensor> PlannedSubgraph::run(std::span<const Tensor> inputs) const {
  const size_t own = num_inputs();
  KILN_CHECK(inputs.size() == own + captures_.size(), runtime, label_, " runs with ", own, " inputs and ",
             captures_.size(), " captured values, given ", inputs.size(), " values");
  // Planned for what the values are now: a sequence whose elements share a shape plans on it.
  const auto run_info = [](const Tensor& value, ValueKind declared, DType dtype) {
    TensorInfo info = info_of(value);
    if (is_optional(declared)) {
      info.kind = declared;
      info.shape_known = false;
      info.shape.clear();
      if (!value.defined()) info.dtype = dtype;
    }
    return info;
  };
  std::vector<TensorInfo> infos;
  for (size_t i = 0; i < own; ++i)
    infos.push_back(run_info(inputs[i], graph_->inputs[i].kind, graph_->inputs[i].dtype));
  for (size_t i : run_time_captures_)
    infos.push_back(run_info(inputs[own + i], capture_infos_[i].kind, capture_infos_[i].dtype));
  std::vector<const Tensor*> fed;
  std::vector<Tensor> values;
  for (size_t i = 0; i < own; ++i) fed.push_back(&inputs[i]);
  for (size_t i : run_time_captures_) fed.push_back(&inputs[own + i]);
  for (const Tensor* value : fed) values.push_back(*value);
  std::shared_ptr<const Plan> plan = with_context(label_, [&] { return plan_for(infos, values); });
  return with_context(label_, [&] { return execute_plan(*plan, fed, {}, settings_); });
}

size_t PlannedSubgraph::plans() const {
  std::lock_guard lock(mutex_);
  return plans_.size();
}

std::string PlannedSubgraph::summary() const {
  std::shared_ptr<const Plan> newest;
  size_t count = 0;
  {
    std::lock_guard lock(mutex_);
    count = plans_.size();
    if (!plan_order_.empty()) {
      const auto found = plans_.find(plan_order_.back());
      if (found != plans_.end()) newest = found->second.plan;
    }
  }
  if (newest == nullptr) return "planned when it runs, for the shapes it is given";
  std::string text = str_cat(count, count == 1 ? " plan" : " plans", " so far; the newest has ",
                             newest->steps().size(), " steps:");
  for (const PlanStep& step : newest->steps()) {
    text += str_cat(" ", step.record.op_type, " (", step.record.kernel, ")");
    for (const std::string& note : step.record.notes) {
      if (note.rfind("subgraph '", 0) == 0) text += str_cat(" [", note, "]");
    }
    text += ',';
  }
  text.back() = '.';
  return text;
}

}  // namespace kiln
