// Control flow (If, Loop, Scan), sequences and optionals through whole sessions: subgraphs read
// enclosing graphs' values, branches and iterations run their own plans (nested under the step
// that ran them in a profile), values whose shape only the run knows defer their readers, and bad
// bodies, counts and positions fail with errors naming them.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "graph/plan.h"
#include "graph/session.h"
#include "op_test_util.h"
#include "profiler/profile.h"
#include "runtime/run_control.h"

namespace kiln {
namespace {

using testing::error_of;

Tensor f32s(std::vector<float> values, Shape shape) {
  return Tensor::from_vector(values, std::move(shape));
}

template <typename T>
std::vector<T> values_of(const Tensor& tensor) {
  return {tensor.data<T>(), tensor.data<T>() + tensor.numel()};
}

Node node(std::string name, std::string op, std::vector<std::string> inputs, std::vector<std::string> outputs,
          Attributes attributes = {}) {
  Node made;
  made.name = std::move(name);
  made.op_type = std::move(op);
  made.inputs = std::move(inputs);
  made.outputs = std::move(outputs);
  made.attributes = std::move(attributes);
  return made;
}

ValueInfo value(std::string name, DType dtype, std::vector<int64_t> shape = {}, bool has_shape = true,
                ValueKind kind = ValueKind::tensor) {
  ValueInfo info{std::move(name), dtype, has_shape, {}, kind};
  for (int64_t dim : shape) info.shape.push_back(Dim{dim, {}});
  return info;
}

Attribute graph_attr(Graph graph) {
  Attribute attribute;
  attribute.type = Attribute::Type::g;
  attribute.g = std::make_shared<const Graph>(std::move(graph));
  return attribute;
}

Attributes attrs(std::initializer_list<std::pair<const char*, Attribute>> entries) {
  Attributes made;
  for (const auto& [name, attribute] : entries) made.set(name, attribute);
  return made;
}

Model model_of(Graph graph, int64_t opset = 16) {
  Model model;
  model.opsets[""] = opset;
  model.graph = std::move(graph);
  return model;
}

// x [2, 3] -> Relu -> y; If(cond) returns y + 1 (then) or y * x (else): both branches read
// values of the enclosing graph, one of them computed when the model runs.
Model if_model() {
  Graph then_branch;
  then_branch.initializers["one"] = f32s({1}, {});
  then_branch.nodes = {node("plus", "Add", {"y", "one"}, {"then_out"})};
  then_branch.outputs = {value("then_out", DType::f32, {2, 3})};
  Graph else_branch;
  else_branch.nodes = {node("times", "Mul", {"y", "x"}, {"else_out"})};
  else_branch.outputs = {value("else_out", DType::f32, {2, 3})};
  Graph graph;
  graph.inputs = {value("x", DType::f32, {2, 3}), value("cond", DType::boolean)};
  graph.nodes = {
      node("relu", "Relu", {"x"}, {"y"}),
      node("if", "If", {"cond"}, {"out"},
           attrs({{"then_branch", graph_attr(then_branch)}, {"else_branch", graph_attr(else_branch)}}))};
  graph.outputs = {value("out", DType::f32, {}, false)};
  return model_of(graph);
}

TEST(ControlFlow, IfRunsTheBranchItsConditionNamesOnValuesOfTheEnclosingGraph) {
  Session session(if_model());
  const Tensor x = f32s({-1, 2, -3, 4, 0, 6}, {2, 3});
  const Tensor then_out = session.run({{"x", x}, {"cond", Tensor::scalar(true)}}).at("out");
  EXPECT_EQ(values_of<float>(then_out), (std::vector<float>{1, 3, 1, 5, 1, 7}));
  const Tensor else_out = session.run({{"x", x}, {"cond", Tensor::scalar(false)}}).at("out");
  EXPECT_EQ(values_of<float>(else_out), (std::vector<float>{0, 4, 0, 16, 0, 36}));
  // Both branches give [2, 3]: the If's output is planned, an ordinary step output.
  const std::shared_ptr<const Plan> plan = session.plan_for(std::vector<Shape>{{2, 3}, {}});
  const StepRecord& step = plan->steps().back().record;
  EXPECT_EQ(step.op_type, "If");
  EXPECT_EQ(step.backend, "native");
  EXPECT_EQ(step.output_shapes.at(0), (Shape{2, 3}));
  // explain lists each branch's planned steps on the If's step.
  const auto has_note = [&](const std::string& text) {
    return std::any_of(step.notes.begin(), step.notes.end(),
                       [&](const std::string& note) { return note.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(has_note("subgraph 'then_branch': 1 plan so far; the newest has 1 steps: Add ("))
      << step.notes.at(0);
  EXPECT_TRUE(has_note("subgraph 'else_branch': 1 plan so far; the newest has 1 steps: Mul ("));
}

TEST(ControlFlow, BranchesOfDifferentShapesDeferTheirReaders) {
  Graph then_branch;
  then_branch.nodes = {node("same", "Identity", {"x"}, {"then_out"})};
  then_branch.outputs = {value("then_out", DType::f32, {}, false)};
  Graph else_branch;
  else_branch.nodes = {
      node("twice", "Concat", {"x", "x"}, {"else_out"}, attrs({{"axis", testing::int_attr(0)}}))};
  else_branch.outputs = {value("else_out", DType::f32, {}, false)};
  Graph graph;
  graph.inputs = {value("x", DType::f32, {2, 3}), value("cond", DType::boolean)};
  graph.nodes = {
      node("if", "If", {"cond"}, {"picked"},
           attrs({{"then_branch", graph_attr(then_branch)}, {"else_branch", graph_attr(else_branch)}})),
      node("neg", "Neg", {"picked"}, {"out"})};
  graph.outputs = {value("out", DType::f32, {}, false)};
  Session session(model_of(graph));
  const Tensor x = f32s({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor small = session.run({{"x", x}, {"cond", Tensor::scalar(true)}}).at("out");
  EXPECT_EQ(small.shape(), (Shape{2, 3}));
  EXPECT_EQ(values_of<float>(small), (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  const Tensor large = session.run({{"x", x}, {"cond", Tensor::scalar(false)}}).at("out");
  EXPECT_EQ(large.shape(), (Shape{4, 3}));
  EXPECT_EQ(values_of<float>(large).back(), -6);
  const std::shared_ptr<const Plan> plan = session.plan_for(std::vector<Shape>{{2, 3}, {}});
  EXPECT_EQ(plan->steps().back().record.op_type, "DeferredRegion");
}

// Loop(M, cond=true, acc=zeros [3]): acc += x per iteration, scan output acc, and the body's
// condition iteration < 3 ends it after 4 iterations whatever M says (if M is larger). A nested If
// in the body reads x, a value two graphs out.
Model loop_model() {
  Graph add_branch;
  add_branch.nodes = {node("add", "Add", {"acc_in", "x"}, {"added"})};
  add_branch.outputs = {value("added", DType::f32, {3})};
  Graph keep_branch;
  keep_branch.nodes = {node("keep", "Sub", {"acc_in", "x"}, {"kept"}),
                       node("back", "Add", {"kept", "x"}, {"kept2"}),
                       node("again", "Add", {"kept2", "x"}, {"kept3"})};
  keep_branch.outputs = {value("kept3", DType::f32, {3})};
  Graph body;
  body.inputs = {value("i", DType::i64), value("cond_in", DType::boolean), value("acc_in", DType::f32, {3})};
  body.initializers["three"] = Tensor::scalar<int64_t>(3);
  body.initializers["zero"] = Tensor::scalar<int64_t>(0);
  body.nodes = {
      node("first", "Equal", {"i", "zero"}, {"is_first"}),
      node("nested", "If", {"is_first"}, {"acc_out"},
           attrs({{"then_branch", graph_attr(add_branch)}, {"else_branch", graph_attr(keep_branch)}})),
      node("more", "Less", {"i", "three"}, {"cond_out"}), node("scan", "Identity", {"acc_out"}, {"row"})};
  body.outputs = {value("cond_out", DType::boolean), value("acc_out", DType::f32, {3}),
                  value("row", DType::f32, {3})};
  Graph graph;
  graph.inputs = {value("M", DType::i64), value("x", DType::f32, {3})};
  graph.initializers["start"] = Tensor::zeros(DType::f32, {3});
  graph.initializers["true"] = Tensor::scalar(true);
  graph.nodes = {
      node("loop", "Loop", {"M", "true", "start"}, {"acc", "rows"}, attrs({{"body", graph_attr(body)}}))};
  graph.outputs = {value("acc", DType::f32, {3}), value("rows", DType::f32, {}, false)};
  return model_of(graph);
}

TEST(ControlFlow, LoopCarriesValuesStacksScanOutputsAndStopsOnItsCondition) {
  Session session(loop_model());
  const Tensor x = f32s({1, 2, 3}, {3});
  TensorMap outputs = session.run({{"M", Tensor::scalar<int64_t>(10)}, {"x", x}});
  EXPECT_EQ(values_of<float>(outputs.at("acc")), (std::vector<float>{4, 8, 12}));
  ASSERT_EQ(outputs.at("rows").shape(), (Shape{4, 3}));
  EXPECT_EQ(values_of<float>(outputs.at("rows")), (std::vector<float>{1, 2, 3, 2, 4, 6, 3, 6, 9, 4, 8, 12}));
  // The trip count ends it first; zero and negative counts run no iteration.
  outputs = session.run({{"M", Tensor::scalar<int64_t>(2)}, {"x", x}});
  EXPECT_EQ(values_of<float>(outputs.at("acc")), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(outputs.at("rows").shape(), (Shape{2, 3}));
  for (int64_t none : {0, -5}) {
    outputs = session.run({{"M", Tensor::scalar<int64_t>(none)}, {"x", x}});
    EXPECT_EQ(values_of<float>(outputs.at("acc")), (std::vector<float>{0, 0, 0}));
    EXPECT_EQ(outputs.at("rows").shape()[0], 0);
  }
}

// A carried value growing by Concat(carried, rows) along axis 0 (torchvision's paste-masks loop):
// the Loop appends the rows to a buffer instead of the body copying the whole value each time.
TEST(ControlFlow, LoopAppendingRowsToACarriedValue) {
  Graph body;
  body.inputs = {value("i", DType::i64), value("cond_in", DType::boolean),
                 value("grown_in", DType::f32, {}, false)};
  body.initializers["shape"] = Tensor::from_vector<int64_t>({1, 2}, {2});
  body.nodes = {
      node("c", "Identity", {"cond_in"}, {"cond_out"}),
      node("f", "Cast", {"i"}, {"fi"}, attrs({{"to", testing::int_attr(1)}})),
      node("row", "Expand", {"fi", "shape"}, {"row"}),
      node("append", "Concat", {"grown_in", "row"}, {"grown_out"}, attrs({{"axis", testing::int_attr(0)}}))};
  body.outputs = {value("cond_out", DType::boolean), value("grown_out", DType::f32, {}, false)};
  Graph graph;
  graph.inputs = {value("M", DType::i64), value("start", DType::f32, {1, 2})};
  graph.initializers["true"] = Tensor::scalar(true);
  graph.nodes = {
      node("loop", "Loop", {"M", "true", "start"}, {"grown"}, attrs({{"body", graph_attr(body)}}))};
  graph.outputs = {value("grown", DType::f32, {}, false)};
  Session session(model_of(graph));
  for (int64_t count : {0, 1, 37}) {
    const Tensor start = f32s({-1, -2}, {1, 2});
    const Tensor grown = session.run({{"M", Tensor::scalar<int64_t>(count)}, {"start", start}}).at("grown");
    ASSERT_EQ(grown.shape(), (Shape{count + 1, 2}));
    std::vector<float> expected = {-1, -2};
    for (int64_t i = 0; i < count; ++i) expected.insert(expected.end(), 2, static_cast<float>(i));
    EXPECT_EQ(values_of<float>(grown), expected);
    EXPECT_EQ(values_of<float>(start), (std::vector<float>{-1, -2}));  // the caller's value is not written
  }
}

TEST(ControlFlow, LoopBodyStepsNestUnderTheLoopStepInAProfile) {
  Session session(loop_model());
  const TensorMap inputs = {{"M", Tensor::scalar<int64_t>(3)}, {"x", f32s({1, 2, 3}, {3})}};
  session.run(inputs);
  profiler::Profile profile;
  profile.start();
  session.run(inputs);
  const profiler::Trace trace = profile.stop();
  const profiler::TraceEvent* loop = nullptr;
  int body_steps = 0;
  for (const profiler::TraceEvent& event : trace.events) {
    if (event.kind == profiler::EventKind::step && event.name == "Loop") loop = &event;
  }
  ASSERT_NE(loop, nullptr);
  for (const profiler::TraceEvent& event : trace.events) {
    if (event.kind != profiler::EventKind::step || &event == loop) continue;
    for (const profiler::TraceEvent* parent = trace.find(event.parent_id); parent != nullptr;
         parent = trace.find(parent->parent_id)) {
      if (parent == loop) {
        ++body_steps;
        EXPECT_GE(event.start_ns, loop->start_ns);
        EXPECT_LE(event.end_ns, loop->end_ns);
        break;
      }
    }
  }
  // Three iterations of Equal, If (with its branch's steps), Less: every one under the Loop.
  EXPECT_GE(body_steps, 3 * 3);
  EXPECT_EQ(trace.unparented, 0);
}

TEST(ControlFlow, LoopLimitsAndDeadlineStopIt) {
  Session session(loop_model());
  const Tensor x = f32s({1, 2, 3}, {3});
  const std::string message = error_of([&] {
    session.run({{"M", Tensor::scalar<int64_t>(int64_t{1} << 40)}, {"x", x}});
  });
  EXPECT_NE(message.find("exceeds kiln's limit of 16777216 iterations"), std::string::npos) << message;

  // No trip count and a condition that stays true: a deadline stops it between iterations.
  Graph body;
  body.inputs = {value("i", DType::i64), value("cond_in", DType::boolean), value("v_in", DType::f32, {1})};
  body.nodes = {node("stay", "Identity", {"cond_in"}, {"cond_out"}),
                node("same", "Identity", {"v_in"}, {"v_out"})};
  body.outputs = {value("cond_out", DType::boolean), value("v_out", DType::f32, {1})};
  Graph graph;
  graph.inputs = {value("cond", DType::boolean), value("v", DType::f32, {1})};
  graph.nodes = {node("forever", "Loop", {"", "cond", "v"}, {"out"}, attrs({{"body", graph_attr(body)}}))};
  graph.outputs = {value("out", DType::f32, {1})};
  Session forever(model_of(graph));
  RunControl control;
  control.set_timeout(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  const std::string stopped = error_of([&] {
    forever.run({{"cond", Tensor::scalar(true)}, {"v", f32s({1}, {1})}}, control);
  });
  EXPECT_NE(stopped.find("deadline"), std::string::npos) << stopped;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

// A Loop over constants folds at plan time, unless folding takes longer than a second: then it is a
// step, and planning returns.
TEST(ControlFlow, ALoopTooLongToFoldRunsAsAStep) {
  const auto counting = [](int64_t iterations) {
    Graph body;
    body.inputs = {value("i", DType::i64), value("cond_in", DType::boolean), value("n_in", DType::i64)};
    body.initializers["one"] = Tensor::scalar<int64_t>(1);
    body.nodes = {node("c", "Identity", {"cond_in"}, {"cond_out"}),
                  node("add", "Add", {"n_in", "one"}, {"n_out"})};
    body.outputs = {value("cond_out", DType::boolean), value("n_out", DType::i64)};
    Graph graph;
    graph.inputs = {value("x", DType::i64)};
    graph.initializers["M"] = Tensor::scalar<int64_t>(iterations);
    graph.initializers["zero"] = Tensor::scalar<int64_t>(0);
    graph.nodes = {node("loop", "Loop", {"M", "", "zero"}, {"count"}, attrs({{"body", graph_attr(body)}})),
                   node("sum", "Add", {"count", "x"}, {"out"})};
    graph.outputs = {value("out", DType::i64)};
    return model_of(graph);
  };
  Session short_loop(counting(5));
  EXPECT_EQ(values_of<int64_t>(short_loop.run({{"x", Tensor::scalar<int64_t>(1)}}).at("out")),
            (std::vector<int64_t>{6}));
  EXPECT_EQ(short_loop.plan_for(std::vector<Shape>{{}})->folded_nodes(), 1);  // the Loop

  Session long_loop(counting(int64_t{1} << 23));
  const auto start = std::chrono::steady_clock::now();
  const std::shared_ptr<const Plan> plan = long_loop.plan_for(std::vector<Shape>{{}});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(plan->folded_nodes(), 0);
  EXPECT_EQ(plan->steps().front().record.op_type, "Loop");
}

TEST(ControlFlow, BadBodiesAndReadsFailNamingThem) {
  // A body returning fewer values than it carries.
  Graph body;
  body.inputs = {value("i", DType::i64), value("cond_in", DType::boolean), value("v", DType::f32, {3})};
  body.nodes = {node("c", "Identity", {"cond_in"}, {"cond_out"})};
  body.outputs = {value("cond_out", DType::boolean)};
  Graph graph;
  graph.inputs = {value("x", DType::f32, {3})};
  graph.initializers["M"] = Tensor::scalar<int64_t>(2);
  graph.nodes = {node("loop", "Loop", {"M", "", "x"}, {"y"}, attrs({{"body", graph_attr(body)}}))};
  graph.outputs = {value("y", DType::f32, {3})};
  std::string message = error_of([&] { Session(model_of(graph)).run({{"x", f32s({1, 2, 3}, {3})}}); });
  EXPECT_NE(message.find("a Loop body returns the condition and its 1 loop-carried values, got 1 outputs"),
            std::string::npos)
      << message;

  // A subgraph reading a name nothing defines.
  Graph then_branch;
  then_branch.nodes = {node("bad", "Neg", {"nowhere"}, {"t"})};
  then_branch.outputs = {value("t", DType::f32, {3})};
  Graph reads;
  reads.inputs = {value("x", DType::f32, {3}), value("cond", DType::boolean)};
  reads.nodes = {
      node("if", "If", {"cond"}, {"y"},
           attrs({{"then_branch", graph_attr(then_branch)}, {"else_branch", graph_attr(then_branch)}}))};
  reads.outputs = {value("y", DType::f32, {3})};
  message = error_of([&] {
    Session(model_of(reads)).run({{"x", f32s({1, 2, 3}, {3})}, {"cond", Tensor::scalar(true)}});
  });
  EXPECT_NE(message.find("reads 'nowhere', which neither it nor an enclosing graph defines"),
            std::string::npos)
      << message;
}

// Scan over the rows of x [3, 2] in reverse: state += row, each partial sum a scan output.
TEST(ControlFlow, ScanFoldsRowsInEitherDirection) {
  Graph body;
  body.inputs = {value("sum_in", DType::f32, {2}), value("row", DType::f32, {2})};
  body.nodes = {node("add", "Add", {"sum_in", "row"}, {"sum_out"}),
                node("copy", "Identity", {"sum_out"}, {"partial"})};
  body.outputs = {value("sum_out", DType::f32, {2}), value("partial", DType::f32, {2})};
  Graph graph;
  graph.inputs = {value("x", DType::f32, {3, 2})};
  graph.initializers["zero"] = Tensor::zeros(DType::f32, {2});
  graph.nodes = {node("scan", "Scan", {"zero", "x"}, {"total", "partials"},
                      attrs({{"body", graph_attr(body)},
                             {"num_scan_inputs", testing::int_attr(1)},
                             {"scan_input_directions", testing::ints_attr({1})}}))};
  graph.outputs = {value("total", DType::f32, {2}), value("partials", DType::f32, {3, 2})};
  Session session(model_of(graph));
  const TensorMap outputs = session.run({{"x", f32s({1, 2, 3, 4, 5, 6}, {3, 2})}});
  EXPECT_EQ(values_of<float>(outputs.at("total")), (std::vector<float>{9, 12}));
  EXPECT_EQ(values_of<float>(outputs.at("partials")), (std::vector<float>{5, 6, 8, 10, 9, 12}));
}

// x [2, 3] split into its 3 columns, y inserted at the front, the last column erased, the rest
// stacked along a new axis; SequenceAt reads one element, SequenceLength counts them.
TEST(Sequences, BuildReadAndStack) {
  Graph graph;
  graph.inputs = {value("x", DType::f32, {2, 3}), value("y", DType::f32, {2}), value("at", DType::i64)};
  graph.initializers["front"] = Tensor::scalar<int64_t>(0);
  graph.initializers["last"] = Tensor::scalar<int64_t>(-1);
  graph.nodes = {
      node("split", "SplitToSequence", {"x"}, {"columns"},
           attrs({{"axis", testing::int_attr(1)}, {"keepdims", testing::int_attr(0)}})),
      node("insert", "SequenceInsert", {"columns", "y", "front"}, {"with_y"}),
      node("erase", "SequenceErase", {"with_y", "last"}, {"trimmed"}),
      node("length", "SequenceLength", {"trimmed"}, {"count"}),
      node("at", "SequenceAt", {"trimmed", "at"}, {"picked"}),
      node("stack", "ConcatFromSequence", {"trimmed"}, {"stacked"},
           attrs({{"axis", testing::int_attr(0)}, {"new_axis", testing::int_attr(1)}})),
  };
  graph.outputs = {value("count", DType::i64), value("picked", DType::f32, {2}),
                   value("stacked", DType::f32, {}, false),
                   value("trimmed", DType::f32, {}, false, ValueKind::sequence)};
  Session session(model_of(graph));
  const TensorMap outputs = session.run({{"x", f32s({1, 2, 3, 4, 5, 6}, {2, 3})},
                                         {"y", f32s({7, 8}, {2})},
                                         {"at", Tensor::scalar<int64_t>(-2)}});
  EXPECT_EQ(values_of<int64_t>(outputs.at("count")), (std::vector<int64_t>{3}));
  EXPECT_EQ(values_of<float>(outputs.at("picked")), (std::vector<float>{1, 4}));
  ASSERT_EQ(outputs.at("stacked").shape(), (Shape{3, 2}));
  EXPECT_EQ(values_of<float>(outputs.at("stacked")), (std::vector<float>{7, 8, 1, 4, 2, 5}));
  const Tensor& trimmed = outputs.at("trimmed");
  ASSERT_TRUE(trimmed.is_sequence());
  ASSERT_EQ(trimmed.elements().size(), 3u);
  EXPECT_EQ(values_of<float>(trimmed.elements()[2]), (std::vector<float>{2, 5}));

  const std::string message = error_of([&] {
    session.run({{"x", f32s({1, 2, 3, 4, 5, 6}, {2, 3})},
                 {"y", f32s({7, 8}, {2})},
                 {"at", Tensor::scalar<int64_t>(3)}});
  });
  EXPECT_NE(message.find("SequenceAt position 3 is out of range for a sequence of 3 elements (valid: -3..2)"),
            std::string::npos)
      << message;
}

// A sequence input of tensors of different shapes, concatenated: the caller's list, its own shapes.
TEST(Sequences, GraphInputsTakeListsOfAnyShapes) {
  Graph graph;
  graph.inputs = {value("parts", DType::f32, {}, false, ValueKind::sequence)};
  graph.nodes = {
      node("cat", "ConcatFromSequence", {"parts"}, {"joined"}, attrs({{"axis", testing::int_attr(0)}}))};
  graph.outputs = {value("joined", DType::f32, {}, false)};
  Session session(model_of(graph));
  const Tensor parts = Tensor::sequence(DType::f32, {f32s({1, 2}, {1, 2}), f32s({3, 4, 5, 6}, {2, 2})});
  const Tensor joined = session.run({{"parts", parts}}).at("joined");
  ASSERT_EQ(joined.shape(), (Shape{3, 2}));
  EXPECT_EQ(values_of<float>(joined), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_NE(error_of([&] {
              session.run({{"parts", f32s({1}, {1})}});
            }).find("must be a sequence (a list of tensors)"),
            std::string::npos);
}

TEST(Optionals, EmptyOrHoldingAValue) {
  Graph graph;
  graph.inputs = {value("maybe", DType::f32, {}, false, ValueKind::optional_tensor)};
  graph.nodes = {node("has", "OptionalHasElement", {"maybe"}, {"present"}),
                 node("get", "OptionalGetElement", {"maybe"}, {"held"})};
  graph.outputs = {value("present", DType::boolean), value("held", DType::f32, {}, false)};
  Session session(model_of(graph));
  TensorMap outputs = session.run({{"maybe", f32s({1, 2}, {2})}});
  EXPECT_TRUE(outputs.at("present").data<bool>()[0]);
  EXPECT_EQ(values_of<float>(outputs.at("held")), (std::vector<float>{1, 2}));
  const std::string message = error_of([&] { session.run({{"maybe", Tensor{}}}); });
  EXPECT_NE(message.find("OptionalGetElement read an empty optional"), std::string::npos) << message;

  Graph has_only;
  has_only.inputs = graph.inputs;
  has_only.nodes = {graph.nodes[0]};
  has_only.outputs = {graph.outputs[0]};
  Session empty(model_of(has_only));
  EXPECT_FALSE(empty.run({{"maybe", Tensor{}}}).at("present").data<bool>()[0]);
}

}  // namespace
}  // namespace kiln
