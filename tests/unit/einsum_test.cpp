// Einsum: the equation's parsing and errors, the contraction path (numpy.einsum_path's cost model,
// greedy, optimal, left to right, the operand limit of optimal), and the native kernel against a
// plain loop over every label in double, under each strategy, at 1 and 2 threads.
#include "ops/einsum.h"

#include <gtest/gtest.h>

#include <random>

#include "backends/native/native_backend.h"
#include "backends/settings.h"
#include "op_test_util.h"
#include "ops/einsum_path.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::string_attr;

// Every label's index as an odometer; each output element sums the product of the operands' elements.
Tensor reference_einsum(const EinsumEquation& equation, const std::vector<Tensor>& inputs) {
  Shape output_shape;
  for (int label : equation.output) output_shape.push_back(equation.sizes[static_cast<size_t>(label)]);
  std::vector<double> output(static_cast<size_t>(checked_numel(output_shape)), 0.0);
  std::vector<int> labels;
  for (int label = 0; label < static_cast<int>(equation.sizes.size()); ++label) {
    if (equation.sizes[static_cast<size_t>(label)] >= 0) labels.push_back(label);
  }
  std::vector<int64_t> index(equation.sizes.size(), 0);
  int64_t combinations = 1;
  for (int label : labels) combinations *= equation.sizes[static_cast<size_t>(label)];
  for (int64_t c = 0; c < combinations; ++c) {
    int64_t rest = c;
    for (int label : labels) {
      index[static_cast<size_t>(label)] = rest % equation.sizes[static_cast<size_t>(label)];
      rest /= equation.sizes[static_cast<size_t>(label)];
    }
    double product = 1;
    for (size_t i = 0; i < inputs.size(); ++i) {
      int64_t offset = 0;
      for (size_t d = 0; d < inputs[i].shape().size(); ++d) {
        const int64_t size = inputs[i].shape()[d];
        offset = offset * size + (size == 1 ? 0 : index[static_cast<size_t>(equation.operands[i][d])]);
      }
      product *= inputs[i].dtype() == DType::f64 ? inputs[i].data<double>()[offset]
                                                 : static_cast<double>(inputs[i].data<float>()[offset]);
    }
    int64_t out = 0;
    for (int label : equation.output)
      out = out * equation.sizes[static_cast<size_t>(label)] + index[static_cast<size_t>(label)];
    output[static_cast<size_t>(out)] += product;
  }
  Tensor result = Tensor::empty(DType::f64, output_shape);
  std::copy(output.begin(), output.end(), result.data<double>());
  return result;
}

struct Einsum {
  Attributes attributes;
  OpSpec spec;
  std::vector<TensorInfo> outputs;
};

// Runs `equation` on the native kernel with the given path settings.
Tensor run_einsum(const std::string& equation, const std::vector<Tensor>& inputs, bool optimize = true,
                  EinsumStrategy strategy = EinsumStrategy::automatic, std::string* note = nullptr) {
  Einsum e;
  e.attributes.set("equation", string_attr(equation));
  e.spec.op_type = "Einsum";
  e.spec.node_name = "einsum";
  e.spec.opset = 12;
  e.spec.attributes = &e.attributes;
  for (const Tensor& input : inputs) e.spec.inputs.push_back(TensorInfo{input.dtype(), input.shape(), {}});
  e.outputs = find_op_schema("Einsum", "")->infer(e.spec);
  KernelRequest request;
  request.op = e.spec;
  auto options = std::make_shared<NativeOptions>();
  options->einsum_optimize = optimize;
  options->einsum_strategy = strategy;
  auto set = std::make_shared<BackendOptionSet>();
  set->add(std::move(options));
  request.options = std::move(set);
  KernelOrReason offer = native_backend().create_kernel(request, e.outputs);
  KILN_CHECK(offer.kernel != nullptr, not_implemented, offer.refusal.detail);
  if (note != nullptr) *note = offer.note;
  Tensor output = Tensor::empty(e.outputs[0].dtype, e.outputs[0].shape);
  offer.kernel->run(inputs, std::span(&output, 1));
  return output;
}

Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor tensor = testing::sample_tensor(shape, -1, 1, seed);
  if (dtype == DType::f32) return tensor;
  Tensor converted = Tensor::empty(DType::f64, shape);
  for (int64_t i = 0; i < tensor.numel(); ++i) converted.data<double>()[i] = tensor.data<float>()[i];
  return converted;
}

double max_relative_diff(const Tensor& actual, const Tensor& expected) {
  double scale = 1e-30, diff = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double want = expected.data<double>()[i];
    const double got = actual.dtype() == DType::f64 ? actual.data<double>()[i] : actual.data<float>()[i];
    scale = std::max(scale, std::abs(want));
    diff = std::max(diff, std::abs(got - want));
  }
  return diff / scale;
}

TEST(Einsum, ParsesExplicitImplicitDiagonalAndEllipsis) {
  const EinsumEquation matmul = parse_einsum("bij, bjk -> bik", {{5, 2, 3}, {5, 3, 4}});
  EXPECT_EQ(matmul.term(matmul.operands[0]), "bij");
  EXPECT_EQ(matmul.term(matmul.output), "bik");
  // Implicit: letters used once, in ASCII order (uppercase first).
  const EinsumEquation implicit = parse_einsum("ba,aC", {{2, 3}, {3, 4}});
  EXPECT_EQ(implicit.term(implicit.output), "Cb");
  const EinsumEquation trace = parse_einsum("ii", {{3, 3}});
  EXPECT_TRUE(trace.output.empty());
  // "..." right-aligned and broadcast; implicit output puts its dims first.
  const EinsumEquation batched = parse_einsum("...ij,jk", {{2, 1, 3, 4}, {4, 5}});
  EXPECT_EQ(batched.ellipsis_dims, 2);
  EXPECT_EQ(batched.term(batched.output), "01ik");
  const EinsumEquation broadcast = parse_einsum("...i,...i->...", {{1, 3}, {4, 3}});
  EXPECT_EQ(broadcast.sizes[kEinsumLetterLabels], 4);
}

TEST(Einsum, BadEquationsNameWhatIsWrong) {
  const auto error = [](const std::string& equation, std::vector<Shape> shapes) {
    return error_of([&] { parse_einsum(equation, shapes); });
  };
  EXPECT_NE(error("ij,jk", {{2, 3}}).find("has 2 operand term(s) but the node has 1 input(s)"),
            std::string::npos);
  EXPECT_NE(error("ijk", {{2, 3}}).find("operand 0 has 3 label(s) but input 0 has rank 2"),
            std::string::npos);
  EXPECT_NE(
      error("ij,jk->ik", {{2, 3}, {4, 5}}).find("label 'j' is 3 in an earlier operand but 4 in operand 1"),
      std::string::npos);
  EXPECT_NE(error("ii", {{2, 3}}).find("repeats label 'i' over dims of different sizes"), std::string::npos);
  EXPECT_NE(error("ij->iz", {{2, 3}}).find("output label 'z' is in no operand"), std::string::npos);
  EXPECT_NE(error("ij->ii", {{2, 3}}).find("output label 'i' is repeated"), std::string::npos);
  EXPECT_NE(error("i1", {{2, 3}}).find("has '1' (labels are letters"), std::string::npos);
  EXPECT_NE(error("...ij->ij", {{4, 2, 3}}).find("the output has no '...'"), std::string::npos);
  EXPECT_NE(error("ij->i->j", {{2, 3}}).find("has '->' twice"), std::string::npos);
  EXPECT_NE(error("", {{2, 3}}).find("empty equation"), std::string::npos);
  EXPECT_NE(error("ij", {{2, -1}}).find("Einsum input 0 has a negative dim"), std::string::npos);
  std::string many;
  std::vector<Shape> shapes;
  for (int i = 0; i <= kMaxEinsumOperands; ++i) {
    many += i == 0 ? "i" : ",i";
    shapes.push_back({2});
  }
  EXPECT_NE(error(many, shapes).find("Einsum with 65 operands: kiln takes at most 64"), std::string::npos);
}

TEST(EinsumPath, FollowsNumpysCostModel) {
  // numpy.einsum_path('ij,jk,kl->il', ones((2,3)), ones((3,4)), ones((4,5))): greedy contracts
  // (1, 2) then (0, 1): 1.810e+02 FLOPs against 3.600e+02 naive, largest intermediate 15.
  const EinsumEquation chain = parse_einsum("ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 5}});
  const EinsumPath greedy = einsum_path(chain, EinsumStrategy::greedy, true);
  ASSERT_EQ(greedy.steps.size(), 2u);
  EXPECT_EQ(greedy.steps[0].positions, (std::vector<int>{1, 2}));
  EXPECT_EQ(greedy.steps[1].positions, (std::vector<int>{0, 1}));
  EXPECT_EQ(greedy.optimized_flops, 181);
  EXPECT_EQ(greedy.naive_flops, 360);
  EXPECT_EQ(greedy.largest_intermediate, 15);
  EXPECT_EQ(
      greedy.describe(),
      "((1, 2), (0, 1)), greedy: 1.810e+02 FLOPs, naive 3.600e+02, largest intermediate 1.500e+01 elements");
  // Optimal finds the cheaper order greedy misses: (0, 1) then (0, 1), 1.290e+02 in numpy.
  const EinsumPath optimal = einsum_path(chain, EinsumStrategy::optimal, true);
  EXPECT_EQ(optimal.optimized_flops, 129);
  EXPECT_EQ(optimal.steps[0].positions, (std::vector<int>{0, 1}));
  // Not optimizing: left to right, everything the first product makes kept.
  const EinsumPath plain = einsum_path(chain, EinsumStrategy::optimal, false);
  EXPECT_EQ(plain.strategy, "left to right");
  EXPECT_EQ(plain.steps[0].positions, (std::vector<int>{0, 1}));
  EXPECT_EQ(plain.optimized_flops, 2 * 3 * 4 * 2 + 2 * 4 * 5 * 2 + 1);
  // Each result goes to the end of the list, so left to right takes the first operand and the last.
  const EinsumPath four = einsum_path(parse_einsum("ab,bc,cd,de->ae", {{2, 3}, {3, 4}, {4, 5}, {5, 6}}),
                                      EinsumStrategy::automatic, false);
  ASSERT_EQ(four.steps.size(), 3u);
  EXPECT_EQ(four.steps[1].positions, (std::vector<int>{0, 2}));
  EXPECT_EQ(four.steps[2].positions, (std::vector<int>{0, 1}));
  EXPECT_EQ(four.optimized_flops, 2 * 3 * 4 * 2 + 2 * 4 * 5 * 2 + 2 * 5 * 6 * 2 + 1);
  // numpy's docstring example: sizes a=1 b=2 c=3 d=4, 'abd,ac,bdc->' contracts (0, 2) then (0, 1).
  const EinsumEquation doc = parse_einsum("abd,ac,bdc->", {{1, 2, 4}, {1, 3}, {2, 4, 3}});
  for (EinsumStrategy strategy : {EinsumStrategy::greedy, EinsumStrategy::optimal}) {
    const EinsumPath path = einsum_path(doc, strategy, true);
    ASSERT_EQ(path.steps.size(), 2u);
    EXPECT_EQ(path.steps[0].positions, (std::vector<int>{0, 2}));
  }
  // One or two operands, or nothing summed: one step.
  EXPECT_EQ(einsum_path(parse_einsum("ij,jk", {{2, 3}, {3, 4}}), EinsumStrategy::optimal, true).strategy,
            "one step");
  EXPECT_EQ(einsum_path(parse_einsum("i,j,k", {{2}, {3}, {4}}), EinsumStrategy::greedy, true).strategy,
            "one step");
}

TEST(EinsumPath, OptimalIsRefusedAboveItsOperandCountAndAutoSwitchesToGreedy) {
  std::string terms;
  std::vector<Shape> shapes;
  for (int i = 0; i < kMaxOptimalOperands + 1; ++i) {
    terms += str_cat(i == 0 ? "" : ",", std::string(1, static_cast<char>('a' + i)),
                     std::string(1, static_cast<char>('a' + i + 1)));
    shapes.push_back({2, 2});
  }
  const EinsumEquation long_chain =
      parse_einsum(terms + "->a" + std::string(1, static_cast<char>('a' + kMaxOptimalOperands + 1)), shapes);
  const std::string message = error_of([&] { einsum_path(long_chain, EinsumStrategy::optimal, true); });
  EXPECT_NE(message.find("'optimal' searches every contraction order"), std::string::npos) << message;
  EXPECT_NE(message.find("refused above 8 operands; this Einsum has 9"), std::string::npos) << message;
  EXPECT_EQ(einsum_path(long_chain, EinsumStrategy::automatic, true).strategy, "greedy");
  EXPECT_EQ(einsum_path(long_chain, EinsumStrategy::greedy, true).steps.size(), 8u);
  const EinsumEquation four = parse_einsum("ab,bc,cd,de->ae", {{2, 3}, {3, 4}, {4, 5}, {5, 6}});
  EXPECT_EQ(einsum_path(four, EinsumStrategy::automatic, true).strategy, "optimal");
}

TEST(Einsum, MatchesThePlainLoopUnderEveryStrategy) {
  struct Case {
    std::string equation;
    std::vector<Shape> shapes;
  };
  const std::vector<Case> cases = {
      {"bij,bjk->bik", {{5, 2, 3}, {5, 3, 4}}},
      {"ij,jk,kl->il", {{4, 5}, {5, 6}, {6, 3}}},
      {"ij,jk,kl", {{4, 5}, {5, 6}, {6, 3}}},
      {"abd,ac,bdc->", {{2, 3, 4}, {2, 5}, {3, 4, 5}}},
      {"ii->i", {{4, 4}}},
      {"ii", {{4, 4}}},
      {"...ii->...i", {{3, 5, 5}}},
      {"ij->ji", {{3, 4}}},
      {"ij->i", {{3, 4}}},
      {"i,i", {{5}, {5}}},
      {"i,i", {{1}, {5}}},
      {"i,j->ij", {{3}, {4}}},
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {3, 4, 2}}},
      {"bhld,bhmd->bhlm", {{2, 3, 4, 8}, {2, 3, 5, 8}}},
      {"ijk,jl,kl->il", {{3, 4, 5}, {4, 6}, {5, 6}}},
      {"iij,jk->ik", {{3, 3, 4}, {4, 2}}},
      {"ab,cd,bc,da->", {{2, 3}, {4, 5}, {3, 4}, {5, 2}}},
      {"ab,ab,ab->ab", {{3, 4}, {3, 4}, {3, 4}}},
      {"ij,jk->ik", {{0, 3}, {3, 4}}},
      {"ij,jk->ik", {{2, 0}, {0, 4}}},
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Case& c : cases) {
      std::vector<Tensor> inputs;
      for (size_t i = 0; i < c.shapes.size(); ++i)
        inputs.push_back(random_tensor(c.shapes[i], dtype, static_cast<uint32_t>(i + 1)));
      const Tensor expected = reference_einsum(parse_einsum(c.equation, c.shapes), inputs);
      const double tolerance = dtype == DType::f32 ? 1e-5 : 1e-12;
      for (int threads : {1, 2}) {
        const ScopedThreads scoped(threads);
        for (bool optimize : {false, true}) {
          for (EinsumStrategy strategy :
               {EinsumStrategy::automatic, EinsumStrategy::greedy, EinsumStrategy::optimal}) {
            const Tensor actual = run_einsum(c.equation, inputs, optimize, strategy);
            ASSERT_EQ(actual.shape(), expected.shape()) << c.equation;
            EXPECT_LE(max_relative_diff(actual, expected), tolerance)
                << c.equation << " " << dtype_name(dtype) << " threads " << threads << " optimize "
                << optimize << " strategy " << static_cast<int>(strategy);
          }
        }
      }
    }
  }
}

TEST(Einsum, AnIntermediateTooLargeToCountIsAnErrorNotAnOverflow) {
  // Empty operands whose labels multiply past 64 bits in the left-to-right product of the first two.
  constexpr int64_t kHuge = int64_t{1} << 32;
  const std::vector<Tensor> inputs = {Tensor::empty(DType::f32, {kHuge, 0}),
                                      Tensor::empty(DType::f32, {0, kHuge}),
                                      Tensor::empty(DType::f32, {0, kHuge, kHuge})};
  const std::string message =
      error_of([&] { run_einsum("ak,kb,xab->", inputs, false, EinsumStrategy::automatic); });
  EXPECT_NE(message.find("Einsum: an intermediate over labels"), std::string::npos) << message;
  EXPECT_NE(message.find("has too many elements"), std::string::npos) << message;
}

TEST(Einsum, IntegersAndTheNoteNameThePath) {
  const Tensor a = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = Tensor::from_vector<int64_t>({1, 0, 0, 1, 1, 1}, {3, 2});
  const Tensor product = run_einsum("ij,jk->ik", {a, b});
  EXPECT_EQ(std::vector<int64_t>(product.data<int64_t>(), product.data<int64_t>() + 4),
            (std::vector<int64_t>{4, 5, 10, 11}));
  std::string note;
  const Tensor m = testing::sample_tensor({4, 5});
  run_einsum("ij,jk,kl->il", {m, testing::sample_tensor({5, 6}), testing::sample_tensor({6, 3})}, true,
             EinsumStrategy::greedy, &note);
  EXPECT_EQ(note.rfind("contraction path ((", 0), 0u) << note;
  EXPECT_NE(note.find("greedy: "), std::string::npos) << note;
  const std::string refused = error_of([] {
    run_einsum("ij->ij", {Tensor::from_vector<float>({1}, {1, 1})});
    testing::OpRun run;
    run.op_type = "Einsum";
    run.attributes.set("equation", string_attr("ij"));
    run.inputs = {Tensor::from_vector<uint8_t>({1}, {1, 1})};
    testing::run_op(run);
  });
  EXPECT_NE(refused.find("Einsum input 0 must be float32, float64, int32 or int64, got uint8"),
            std::string::npos)
      << refused;
}

}  // namespace
}  // namespace kiln
