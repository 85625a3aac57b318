// GatherND, ScatterND, ScatterElements, Scatter, OneHot, TopK, CumSum, Trilu and ReverseSequence
// against hand-computed values (several are the ONNX spec's examples) and plain loop references
// written from the spec's definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::int_attr;
using testing::OpRun;
using testing::ravel;
using testing::run_op;
using testing::sample_values;
using testing::string_attr;
using testing::unravel;

constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor i64s(std::vector<int64_t> values, Shape shape) {
  return Tensor::from_vector(values, std::move(shape));
}

Tensor f32s(std::vector<float> values, Shape shape) {
  return Tensor::from_vector(values, std::move(shape));
}

template <typename T = float>
std::vector<T> values_of(const Tensor& tensor) {
  const auto span = tensor.values<T>();
  return {span.begin(), span.end()};
}

// start, start + 1, ... in `shape`, as T.
template <typename T = float>
Tensor iota(Shape shape, T start = T(0)) {
  Tensor tensor = Tensor::empty(dtype_of<T>(), std::move(shape));
  for (int64_t i = 0; i < tensor.numel(); ++i)
    tensor.data<T>()[i] = static_cast<T>(start + static_cast<T>(i));
  return tensor;
}

// Deterministic integers in [low, high].
std::vector<int64_t> random_ints(int64_t count, int64_t low, int64_t high, uint32_t seed) {
  std::vector<int64_t> values;
  uint32_t state = seed;
  for (int64_t i = 0; i < count; ++i) {
    state = state * 1664525u + 1013904223u;
    values.push_back(low + static_cast<int64_t>((state >> 8) % static_cast<uint32_t>(high - low + 1)));
  }
  return values;
}

// A float32 tensor of small integers in [low, high] (ties for TopK; exact sums for CumSum).
Tensor integer_valued(const Shape& shape, int64_t low, int64_t high, uint32_t seed) {
  const std::vector<int64_t> ints = random_ints(checked_numel(shape), low, high, seed);
  std::vector<float> values(ints.begin(), ints.end());
  return Tensor::from_vector(values, shape);
}

Tensor random_floats(const Shape& shape, uint32_t seed) {
  return Tensor::from_vector(sample_values(checked_numel(shape), -3, 3, seed), shape);
}

// Checks `actual` (float32) against `expected` within `tolerance`.
void expect_near(const Tensor& actual, const std::vector<float>& expected, const std::string& what,
                 double tolerance = 1e-5) {
  ASSERT_EQ(actual.dtype(), DType::f32) << what;
  ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size())) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual.data<float>()[i], expected[i], tolerance) << what << " [" << i << "]";
  }
}

// ---- GatherND ------------------------------------------------------------------------------------

OpRun gather_nd(Tensor data, Tensor indices, int64_t batch_dims = 0) {
  OpRun run;
  run.op_type = "GatherND";
  run.inputs = {std::move(data), std::move(indices)};
  if (batch_dims != 0) run.attributes.set("batch_dims", int_attr(batch_dims));
  return run;
}

// GatherND by its definition: output[batch..., position..., rest...] =
// data[batch..., indices[batch..., position..., :]..., rest...].
std::vector<float> reference_gather_nd(const Tensor& data, const Tensor& indices, int64_t batch_dims,
                                       Shape& out) {
  const Shape& ds = data.shape();
  const Shape& is = indices.shape();
  const auto b = static_cast<size_t>(batch_dims);
  const int64_t depth = is.back();
  const size_t positions = is.size() - 1;  // dims of `out` taken from indices
  out.assign(is.begin(), is.end() - 1);
  for (size_t d = b + static_cast<size_t>(depth); d < ds.size(); ++d) out.push_back(ds[d]);
  std::vector<float> result;
  for (int64_t flat = 0; flat < checked_numel(out); ++flat) {
    const std::vector<int64_t> o = unravel(flat, out);
    std::vector<int64_t> source(o.begin(), o.begin() + static_cast<std::ptrdiff_t>(b));
    std::vector<int64_t> where(o.begin(), o.begin() + static_cast<std::ptrdiff_t>(positions));
    where.push_back(0);
    for (int64_t k = 0; k < depth; ++k) {
      where.back() = k;
      const int64_t index = indices.data<int64_t>()[ravel(where, is)];
      const int64_t dim = ds[b + static_cast<size_t>(k)];
      source.push_back(index < 0 ? index + dim : index);
    }
    for (size_t d = positions; d < o.size(); ++d) source.push_back(o[d]);
    result.push_back(data.data<float>()[ravel(source, ds)]);
  }
  return result;
}

// Index tuples for data dims [first, first + depth) of `data_shape`, `count` of them, each entry in
// [-dim, dim).
Tensor random_tuples(const Shape& data_shape, size_t first, int64_t depth, Shape indices_shape,
                     uint32_t seed) {
  const int64_t count = checked_numel(indices_shape) / depth;
  std::vector<int64_t> values(static_cast<size_t>(count * depth));
  for (int64_t k = 0; k < depth; ++k) {
    const int64_t dim = data_shape[first + static_cast<size_t>(k)];
    const std::vector<int64_t> column = random_ints(count, -dim, dim - 1, seed + static_cast<uint32_t>(k));
    for (int64_t t = 0; t < count; ++t)
      values[static_cast<size_t>(t * depth + k)] = column[static_cast<size_t>(t)];
  }
  return Tensor::from_vector(values, std::move(indices_shape));
}

TEST(IndexingOps, GatherNdBatchDims0) {
  const Tensor data = iota({2, 3, 4});
  Tensor y = run_op(gather_nd(data, i64s({1, -1, 0, 2}, {2, 2})))[0];
  EXPECT_EQ(y.shape(), (Shape{2, 4}));
  EXPECT_EQ(values_of(y), (std::vector<float>{20, 21, 22, 23, 8, 9, 10, 11}));
  y = run_op(gather_nd(data, i64s({1, 0, -1}, {1, 3})))[0];  // whole tuples: scalars
  EXPECT_EQ(y.shape(), (Shape{1}));
  EXPECT_EQ(values_of(y), (std::vector<float>{15}));
  y = run_op(gather_nd(data, i64s({-1, 0}, {2, 1, 1})))[0];
  EXPECT_EQ(y.shape(), (Shape{2, 1, 3, 4}));
  std::vector<float> expected;
  for (int i = 12; i < 24; ++i) expected.push_back(static_cast<float>(i));
  for (int i = 0; i < 12; ++i) expected.push_back(static_cast<float>(i));
  EXPECT_EQ(values_of(y), expected);
  // The spec's examples.
  const Tensor small = Tensor::from_vector<int32_t>({0, 1, 2, 3}, {2, 2});
  y = run_op(gather_nd(small, i64s({0, 0, 1, 1}, {2, 2})))[0];
  EXPECT_EQ(values_of<int32_t>(y), (std::vector<int32_t>{0, 3}));
  y = run_op(gather_nd(small, i64s({1, 0}, {2, 1})))[0];
  EXPECT_EQ(values_of<int32_t>(y), (std::vector<int32_t>{2, 3, 0, 1}));
  // Random tuples, negative entries included, against the reference.
  const Tensor big = random_floats({3, 4, 5}, 11);
  const Tensor indices = random_tuples(big.shape(), 0, 2, {2, 3, 2}, 5);
  Shape out;
  const std::vector<float> reference = reference_gather_nd(big, indices, 0, out);
  y = run_op(gather_nd(big, indices))[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(y.shape(), out);
  EXPECT_EQ(values_of(y), reference);
}

TEST(IndexingOps, GatherNdBatchDims1) {
  const Tensor data = iota({2, 3, 4});
  Tensor y = run_op(gather_nd(data, i64s({2, -3, 1, 0}, {2, 2, 1}), 1))[0];
  EXPECT_EQ(y.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(values_of(y), (std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3, 16, 17, 18, 19, 12, 13, 14, 15}));
  y = run_op(gather_nd(data, i64s({1, 3, 2, -1}, {2, 2}), 1))[0];
  EXPECT_EQ(y.shape(), (Shape{2}));
  EXPECT_EQ(values_of(y), (std::vector<float>{7, 23}));
  // The spec's example.
  y = run_op(gather_nd(iota({2, 2, 2}), i64s({1, 0}, {2, 1}), 1))[0];
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(values_of(y), (std::vector<float>{2, 3, 4, 5}));
  // Random tuples against the reference, batch_dims 1 and 2.
  const Tensor big = random_floats({2, 3, 4, 5}, 12);
  for (int64_t batch_dims : {1, 2}) {
    const Tensor indices = batch_dims == 1 ? random_tuples(big.shape(), 1, 2, {2, 3, 2}, 7)
                                           : random_tuples(big.shape(), 2, 1, {2, 3, 2, 1}, 9);
    Shape out;
    const std::vector<float> reference = reference_gather_nd(big, indices, batch_dims, out);
    y = run_op(gather_nd(big, indices, batch_dims))[0];
    EXPECT_EQ(y.shape(), out) << "batch_dims " << batch_dims;
    EXPECT_EQ(values_of(y), reference) << "batch_dims " << batch_dims;
  }
}

TEST(IndexingOps, GatherNdRejectsOutOfRangeIndices) {
  const Tensor data = iota({2, 3});
  std::string message = error_of([&] { run_op(gather_nd(data, i64s({0, 3}, {1, 2}))); });
  EXPECT_NE(message.find("index 3"), std::string::npos) << message;
  message = error_of([&] { run_op(gather_nd(data, i64s({-3, 0}, {1, 2}))); });
  EXPECT_NE(message.find("index -3"), std::string::npos) << message;
}

// ---- ScatterND -----------------------------------------------------------------------------------

OpRun scatter_nd(Tensor data, Tensor indices, Tensor updates, const std::string& reduction, int64_t opset) {
  OpRun run;
  run.op_type = "ScatterND";
  run.opset = opset;
  run.inputs = {std::move(data), std::move(indices), std::move(updates)};
  if (!reduction.empty()) run.attributes.set("reduction", string_attr(reduction));
  return run;
}

TEST(IndexingOps, ScatterNdReductions) {
  const Tensor data = iota({4, 3}, 1.0f);  // rows 1 2 3 / 4 5 6 / 7 8 9 / 10 11 12
  // Rows 1, 3 (as -1) and 1 again: the reductions combine both updates of row 1.
  const Tensor rows = i64s({1, -1, 1}, {3, 1});
  const Tensor updates = f32s({10, 0, 30, 1, 20, 1, 2, 3, 40}, {3, 3});
  struct Case {
    const char* reduction;
    int64_t opset;
    std::vector<float> expected;
  };
  const Case cases[] = {
      {"add", 16, {1, 2, 3, 16, 8, 76, 7, 8, 9, 11, 31, 13}},
      {"mul", 16, {1, 2, 3, 80, 0, 7200, 7, 8, 9, 10, 220, 12}},
      {"max", 18, {1, 2, 3, 10, 5, 40, 7, 8, 9, 10, 20, 12}},
      {"min", 18, {1, 2, 3, 2, 0, 6, 7, 8, 9, 1, 11, 1}},
  };
  for (const Case& c : cases) {
    const Tensor y = run_op(scatter_nd(data, rows, updates, c.reduction, c.opset))[0];
    EXPECT_EQ(y.shape(), (Shape{4, 3}));
    EXPECT_EQ(values_of(y), c.expected) << c.reduction;
  }
  // Without a reduction (none, or before opset 16), distinct rows.
  const Tensor two_rows = i64s({1, -1}, {2, 1});
  const Tensor two_updates = f32s({10, 0, 30, 1, 20, 1}, {2, 3});
  const std::vector<float> replaced{1, 2, 3, 10, 0, 30, 7, 8, 9, 1, 20, 1};
  EXPECT_EQ(values_of(run_op(scatter_nd(data, two_rows, two_updates, "none", 16))[0]), replaced);
  EXPECT_EQ(values_of(run_op(scatter_nd(data, two_rows, two_updates, "", 11))[0]), replaced);
  EXPECT_EQ(values_of(run_op(scatter_nd(data, two_rows, two_updates, "", 18))[0]), replaced);
  // Whole tuples address single elements.
  const Tensor y = run_op(scatter_nd(data, i64s({0, 2, 3, -3}, {2, 2}), f32s({50, 60}, {2}), "none", 16))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{1, 2, 50, 4, 5, 6, 7, 8, 9, 60, 11, 12}));
  // int64 data; the spec's example.
  const Tensor ints = iota<int64_t>({8}, 1);
  const Tensor sum =
      run_op(scatter_nd(ints, i64s({4, 3, 1, 7, 4}, {5, 1}), i64s({9, 10, 11, 12, 100}, {5}), "add", 16))[0];
  EXPECT_EQ(values_of<int64_t>(sum), (std::vector<int64_t>{1, 13, 3, 14, 114, 6, 7, 20}));
  const Tensor set =
      run_op(scatter_nd(ints, i64s({4, 3, 1, 7}, {4, 1}), i64s({9, 10, 11, 12}, {4}), "", 11))[0];
  EXPECT_EQ(values_of<int64_t>(set), (std::vector<int64_t>{1, 11, 3, 10, 9, 6, 7, 12}));
}

TEST(IndexingOps, ScatterNdRejectsOutOfRangeIndices) {
  const Tensor data = iota({4, 3});
  std::string message = error_of([&] {
    run_op(scatter_nd(data, i64s({4}, {1, 1}), f32s({1, 2, 3}, {1, 3}), "", 16));
  });
  EXPECT_NE(message.find("index 4"), std::string::npos) << message;
  message = error_of([&] { run_op(scatter_nd(data, i64s({1, -4}, {1, 2}), f32s({1}, {1}), "", 16)); });
  EXPECT_NE(message.find("index -4"), std::string::npos) << message;
  message = error_of([&] {
    run_op(scatter_nd(data, i64s({1}, {1, 1}), f32s({1, 2, 3}, {1, 3}), "max", 16));
  });
  EXPECT_NE(message.find("reduction 'max'"), std::string::npos) << message;
}

// ---- ScatterElements and Scatter -----------------------------------------------------------------

OpRun scatter_elements(Tensor data, Tensor indices, Tensor updates, int64_t axis,
                       const std::string& reduction = "", int64_t opset = 18,
                       const std::string& op_type = "ScatterElements") {
  OpRun run;
  run.op_type = op_type;
  run.opset = opset;
  run.inputs = {std::move(data), std::move(indices), std::move(updates)};
  run.attributes.set("axis", int_attr(axis));
  if (!reduction.empty()) run.attributes.set("reduction", string_attr(reduction));
  return run;
}

// ScatterElements by its definition: update u at position p goes to p with p[axis] = indices[p],
// combined in order of p.
std::vector<float> reference_scatter_elements(const Tensor& data, const Tensor& indices,
                                              const Tensor& updates, int64_t axis,
                                              const std::string& reduction) {
  std::vector<float> out = values_of(data);
  const Shape& ds = data.shape();
  const auto a = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(ds.size()) : axis);
  for (int64_t i = 0; i < indices.numel(); ++i) {
    std::vector<int64_t> where = unravel(i, indices.shape());
    int64_t index = indices.int_at(i);
    if (index < 0) index += ds[a];
    where[a] = index;
    float& target = out[static_cast<size_t>(ravel(where, ds))];
    const float u = updates.data<float>()[i];
    if (reduction == "add") {
      target = target + u;
    } else if (reduction == "mul") {
      target = target * u;
    } else if (reduction == "max") {
      target = std::max(target, u);
    } else if (reduction == "min") {
      target = std::min(target, u);
    } else {
      target = u;
    }
  }
  return out;
}

TEST(IndexingOps, ScatterElementsAxis0And1) {
  // The spec's examples, with some indices negative.
  const Tensor zeros = Tensor::zeros(DType::f32, {3, 3});
  const Tensor updates = f32s({1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f}, {2, 3});
  const std::vector<float> expected{2.0f, 1.1f, 0.0f, 1.0f, 0.0f, 2.2f, 0.0f, 2.1f, 1.2f};
  Tensor y = run_op(scatter_elements(zeros, i64s({1, 0, -1, 0, -1, 1}, {2, 3}), updates, 0))[0];
  EXPECT_EQ(y.shape(), (Shape{3, 3}));
  EXPECT_EQ(values_of(y), expected);
  y = run_op(
      scatter_elements(zeros, Tensor::from_vector<int32_t>({1, 0, 2, 0, 2, 1}, {2, 3}), updates, 0))[0];
  EXPECT_EQ(values_of(y), expected);  // int32 indices
  const Tensor row = f32s({1, 2, 3, 4, 5}, {1, 5});
  y = run_op(scatter_elements(row, i64s({1, -2}, {1, 2}), f32s({1.1f, 2.1f}, {1, 2}), 1))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{1, 1.1f, 3, 2.1f, 5}));
  y = run_op(scatter_elements(row, i64s({1, 3}, {1, 2}), f32s({1.1f, 2.1f}, {1, 2}), -1))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{1, 1.1f, 3, 2.1f, 5}));
}

TEST(IndexingOps, ScatterElementsReductions) {
  // The spec's examples: both updates land on element 1 (once as -4).
  const Tensor row = f32s({1, 2, 3, 4, 5}, {1, 5});
  const Tensor indices = i64s({1, -4}, {1, 2});
  const Tensor updates = f32s({1.1f, 2.1f}, {1, 2});
  expect_near(run_op(scatter_elements(row, indices, updates, 1, "add", 16))[0], {1, 5.2f, 3, 4, 5}, "add");
  expect_near(run_op(scatter_elements(row, indices, updates, 1, "mul", 16))[0], {1, 4.62f, 3, 4, 5}, "mul");
  expect_near(run_op(scatter_elements(row, indices, updates, 1, "max", 18))[0], {1, 2.1f, 3, 4, 5}, "max");
  expect_near(run_op(scatter_elements(row, indices, updates, 1, "min", 18))[0], {1, 1.1f, 3, 4, 5}, "min");
  // Random indices (with duplicates and negatives) on both axes against the reference.
  const Tensor data = random_floats({3, 4}, 21);
  struct AxisCase {
    int64_t axis;
    Shape indices;
  };
  for (const AxisCase& a : {AxisCase{0, {2, 4}}, AxisCase{1, {3, 3}}, AxisCase{-1, {2, 4}}}) {
    const int64_t dim = data.shape()[static_cast<size_t>(a.axis < 0 ? a.axis + 2 : a.axis)];
    const Tensor random_indices =
        Tensor::from_vector(random_ints(checked_numel(a.indices), -dim, dim - 1, 23), a.indices);
    const Tensor random_updates = random_floats(a.indices, 25);
    for (const char* reduction : {"add", "mul", "max", "min"}) {
      const Tensor y =
          run_op(scatter_elements(data, random_indices, random_updates, a.axis, reduction, 18))[0];
      expect_near(y, reference_scatter_elements(data, random_indices, random_updates, a.axis, reduction),
                  std::string(reduction) + " axis " + std::to_string(a.axis));
    }
  }
}

TEST(IndexingOps, ScatterOpset9) {
  const Tensor zeros = Tensor::zeros(DType::f32, {3, 3});
  const Tensor updates = f32s({1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f}, {2, 3});
  Tensor y =
      run_op(scatter_elements(zeros, i64s({1, 0, 2, 0, 2, 1}, {2, 3}), updates, 0, "", 9, "Scatter"))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{2.0f, 1.1f, 0.0f, 1.0f, 0.0f, 2.2f, 0.0f, 2.1f, 1.2f}));
  const Tensor row = f32s({1, 2, 3, 4, 5}, {1, 5});
  y = run_op(
      scatter_elements(row, i64s({1, -2}, {1, 2}), f32s({1.1f, 2.1f}, {1, 2}), 1, "", 9, "Scatter"))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{1, 1.1f, 3, 2.1f, 5}));
}

TEST(IndexingOps, ScatterElementsErrors) {
  const Tensor row = f32s({1, 2, 3, 4, 5}, {1, 5});
  std::string message = error_of([&] {
    run_op(scatter_elements(row, i64s({1, 1}, {1, 2}), f32s({1, 2}, {1, 2}), 1, "max", 16));
  });
  EXPECT_NE(message.find("reduction 'max'"), std::string::npos) << message;
  message = error_of([&] { run_op(scatter_elements(row, i64s({5}, {1, 1}), f32s({1}, {1, 1}), 1)); });
  EXPECT_NE(message.find("index 5"), std::string::npos) << message;
  message = error_of([&] { run_op(scatter_elements(row, i64s({-6}, {1, 1}), f32s({1}, {1, 1}), 1)); });
  EXPECT_NE(message.find("index -6"), std::string::npos) << message;
}

// ---- OneHot --------------------------------------------------------------------------------------

OpRun one_hot(Tensor indices, Tensor depth, Tensor values, int64_t axis) {
  OpRun run;
  run.op_type = "OneHot";
  run.inputs = {std::move(indices), std::move(depth), std::move(values)};
  run.attributes.set("axis", int_attr(axis));
  return run;
}

// OneHot by its definition: output[..., k (at axis), ...] = on where the index (negative ones
// counting from depth) is k; indices outside [-depth, depth) select nothing.
std::vector<float> reference_one_hot(const Tensor& indices, int64_t depth, int64_t axis, float off, float on,
                                     Shape& out) {
  const Shape& is = indices.shape();
  const auto a = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(is.size()) + 1 : axis);
  out = is;
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(a), depth);
  std::vector<float> result;
  for (int64_t flat = 0; flat < checked_numel(out); ++flat) {
    std::vector<int64_t> where = unravel(flat, out);
    const int64_t k = where[a];
    where.erase(where.begin() + static_cast<std::ptrdiff_t>(a));
    int64_t index = indices.int_at(ravel(where, is));
    if (index < 0) index += depth;
    result.push_back(index == k ? on : off);
  }
  return result;
}

TEST(IndexingOps, OneHotAxes) {
  // 5 and -4 are outside [-3, 3): rows of off values.
  const Tensor indices = i64s({0, 2, -1, 5, -4, 1}, {2, 3});
  const Tensor values = f32s({-1, 5}, {2});
  Tensor y = run_op(one_hot(indices, Tensor::scalar<int64_t>(3), values, -1))[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3, 3}));
  EXPECT_EQ(values_of(y), (std::vector<float>{5, -1, -1, -1, -1, 5, -1, -1, 5,  //
                                              -1, -1, -1, -1, -1, -1, -1, 5, -1}));
  y = run_op(one_hot(indices, Tensor::scalar<int64_t>(3), values, 0))[0];
  EXPECT_EQ(y.shape(), (Shape{3, 2, 3}));
  EXPECT_EQ(values_of(y), (std::vector<float>{5, -1, -1, -1, -1, -1,  //
                                              -1, -1, -1, -1, -1, 5,  //
                                              -1, 5, 5, -1, -1, -1}));
  for (int64_t axis : {-3, -2, -1, 0, 1, 2}) {
    Shape out;
    const std::vector<float> expected = reference_one_hot(indices, 4, axis, -1, 5, out);
    y = run_op(one_hot(indices, i64s({4}, {1}), values, axis))[0];
    EXPECT_EQ(y.shape(), out) << "axis " << axis;
    EXPECT_EQ(values_of(y), expected) << "axis " << axis;
  }
}

TEST(IndexingOps, OneHotFloatIndicesAndIntegerValues) {
  // Float indices are cast to int64 (toward zero): 1.7 -> 1, -1.2 -> -1 -> 2, 2.9 -> 2.
  const Tensor indices = f32s({0, 1.7f, -1.2f, 2.9f}, {4});
  Tensor y = run_op(one_hot(indices, Tensor::scalar<float>(3.0f), f32s({0, 1}, {2}), -1))[0];
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  EXPECT_EQ(values_of(y), (std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1}));
  // The output takes the values' dtype.
  y = run_op(one_hot(i64s({2, 0}, {2}), Tensor::scalar<int64_t>(3), i64s({7, -9}, {2}), -1))[0];
  ASSERT_EQ(y.dtype(), DType::i64);
  EXPECT_EQ(values_of<int64_t>(y), (std::vector<int64_t>{7, 7, -9, -9, 7, 7}));
}

TEST(IndexingOps, OneHotRejectsDepthZero) {
  const std::string message = error_of([&] {
    run_op(one_hot(i64s({0, 1}, {2}), Tensor::scalar<int64_t>(0), f32s({0, 1}, {2}), -1));
  });
  EXPECT_NE(message.find("depth must be >= 1"), std::string::npos) << message;
}

// ---- TopK ----------------------------------------------------------------------------------------

OpRun topk(Tensor x, int64_t k, int64_t axis, bool largest, int64_t opset = 17) {
  OpRun run;
  run.op_type = "TopK";
  run.opset = opset;
  run.num_outputs = 2;
  run.inputs = {std::move(x), i64s({k}, {1})};
  run.attributes.set("axis", int_attr(axis));
  run.attributes.set("largest", int_attr(largest ? 1 : 0));
  return run;
}

// TopK by its definition: along `axis`, the k largest (smallest) values in order, equal values by
// lower index first.
template <typename T>
std::pair<std::vector<T>, std::vector<int64_t>> reference_topk(const Tensor& x, int64_t k, int64_t axis,
                                                               bool largest) {
  const Shape& shape = x.shape();
  const auto a = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis);
  Shape out = shape;
  out[a] = k;
  std::vector<T> values(static_cast<size_t>(checked_numel(out)));
  std::vector<int64_t> indices(values.size());
  for (int64_t flat = 0; flat < checked_numel(out); ++flat) {
    std::vector<int64_t> where = unravel(flat, out);
    const int64_t rank_in_line = where[a];
    std::vector<int64_t> order(static_cast<size_t>(shape[a]));
    for (size_t j = 0; j < order.size(); ++j) order[j] = static_cast<int64_t>(j);
    auto value_at = [&](int64_t j) {
      std::vector<int64_t> at = where;
      at[a] = j;
      return x.data<T>()[ravel(at, shape)];
    };
    std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
      return largest ? value_at(p) > value_at(q) : value_at(p) < value_at(q);
    });
    const int64_t picked = order[static_cast<size_t>(rank_in_line)];
    values[static_cast<size_t>(flat)] = value_at(picked);
    indices[static_cast<size_t>(flat)] = picked;
  }
  return {values, indices};
}

TEST(IndexingOps, TopKLargestAndSmallest) {
  const Tensor x = f32s({3, 1, 3, 2, 0, 5, 3, 5}, {2, 4});
  std::vector<Tensor> y = run_op(topk(x, 2, -1, true));
  ASSERT_EQ(y.size(), 2u);
  EXPECT_EQ(y[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values_of(y[0]), (std::vector<float>{3, 3, 5, 5}));
  EXPECT_EQ(values_of<int64_t>(y[1]), (std::vector<int64_t>{0, 2, 1, 3}));  // ties: lower index first
  y = run_op(topk(x, 2, 1, false));
  EXPECT_EQ(values_of(y[0]), (std::vector<float>{1, 2, 0, 3}));
  EXPECT_EQ(values_of<int64_t>(y[1]), (std::vector<int64_t>{1, 3, 0, 2}));
  y = run_op(topk(x, 1, 0, true));
  EXPECT_EQ(y[0].shape(), (Shape{1, 4}));
  EXPECT_EQ(values_of(y[0]), (std::vector<float>{3, 5, 3, 5}));
  EXPECT_EQ(values_of<int64_t>(y[1]), (std::vector<int64_t>{0, 1, 0, 1}));  // column 2: a tie
  y = run_op(topk(x, 2, 0, false));
  EXPECT_EQ(values_of(y[0]), (std::vector<float>{0, 1, 3, 2, 3, 5, 3, 5}));
  EXPECT_EQ(values_of<int64_t>(y[1]), (std::vector<int64_t>{1, 0, 0, 0, 0, 1, 1, 1}));
  // k = dim sorts whole lines; k = 0 is empty.
  y = run_op(topk(x, 4, -1, true));
  EXPECT_EQ(values_of(y[0]), (std::vector<float>{3, 3, 2, 1, 5, 5, 3, 0}));
  EXPECT_EQ(values_of<int64_t>(y[1]), (std::vector<int64_t>{0, 2, 3, 1, 1, 3, 2, 0}));
  y = run_op(topk(x, 4, -1, false));
  EXPECT_EQ(values_of(y[0]), (std::vector<float>{1, 2, 3, 3, 0, 3, 5, 5}));
  EXPECT_EQ(values_of<int64_t>(y[1]), (std::vector<int64_t>{1, 3, 0, 2, 0, 2, 1, 3}));
  y = run_op(topk(x, 0, -1, true));
  EXPECT_EQ(y[0].shape(), (Shape{2, 0}));
  EXPECT_EQ(y[1].shape(), (Shape{2, 0}));
  EXPECT_EQ(y[1].dtype(), DType::i64);
  // int64 input.
  const Tensor ints = i64s({3, -1, 7, 7, 7, -9}, {2, 3});
  y = run_op(topk(ints, 2, -1, true));
  EXPECT_EQ(values_of<int64_t>(y[0]), (std::vector<int64_t>{7, 3, 7, 7}));
  EXPECT_EQ(values_of<int64_t>(y[1]), (std::vector<int64_t>{2, 0, 0, 1}));
  y = run_op(topk(ints, 2, -1, false));
  EXPECT_EQ(values_of<int64_t>(y[0]), (std::vector<int64_t>{-1, 3, -9, 7}));
  EXPECT_EQ(values_of<int64_t>(y[1]), (std::vector<int64_t>{1, 0, 2, 0}));
  // Opset 1 takes k as an attribute (and always the largest).
  OpRun v1;
  v1.op_type = "TopK";
  v1.opset = 1;
  v1.num_outputs = 2;
  v1.inputs = {x};
  v1.attributes.set("k", int_attr(1));
  y = run_op(v1);
  EXPECT_EQ(values_of(y[0]), (std::vector<float>{3, 5}));
  EXPECT_EQ(values_of<int64_t>(y[1]), (std::vector<int64_t>{0, 1}));
}

// NaN ranks above every number (as torch.topk has it): first when largest, last when smallest.
TEST(IndexingOps, TopKOrdersNaNAsLargest) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = f32s({2, nan, 7, 1, nan}, {1, 5});
  std::vector<Tensor> y = run_op(topk(x, 3, -1, true));
  EXPECT_EQ(values_of<int64_t>(y[1]), (std::vector<int64_t>{1, 4, 2}));
  y = run_op(topk(x, 5, -1, false));
  EXPECT_EQ(values_of<int64_t>(y[1]), (std::vector<int64_t>{3, 0, 2, 1, 4}));
}

TEST(IndexingOps, TopKMatchesReference) {
  const Tensor x = integer_valued({3, 5, 4}, -2, 2, 31);  // few distinct values: many ties
  for (int64_t axis : {0, 1, 2}) {
    const int64_t dim = x.shape()[static_cast<size_t>(axis)];
    for (int64_t k : {int64_t{1}, dim - 1, dim}) {
      for (bool largest : {true, false}) {
        const auto [values, indices] = reference_topk<float>(x, k, axis, largest);
        const std::vector<Tensor> y = run_op(topk(x, k, axis, largest));
        EXPECT_EQ(values_of(y[0]), values) << "axis " << axis << " k " << k << " largest " << largest;
        EXPECT_EQ(values_of<int64_t>(y[1]), indices)
            << "axis " << axis << " k " << k << " largest " << largest;
      }
    }
  }
  Tensor ints = iota<int64_t>({2, 7});
  for (int64_t i = 0; i < ints.numel(); ++i) ints.data<int64_t>()[i] = (i * 5) % 4 - 1;
  const auto [values, indices] = reference_topk<int64_t>(ints, 4, 1, true);
  const std::vector<Tensor> y = run_op(topk(ints, 4, 1, true));
  EXPECT_EQ(values_of<int64_t>(y[0]), values);
  EXPECT_EQ(values_of<int64_t>(y[1]), indices);
}

TEST(IndexingOps, TopKRejectsKAboveDim) {
  const Tensor x = iota({2, 4});
  std::string message = error_of([&] { run_op(topk(x, 5, -1, true)); });
  EXPECT_NE(message.find("outside [0, 4]"), std::string::npos) << message;
  message = error_of([&] { run_op(topk(x, 3, 0, true)); });
  EXPECT_NE(message.find("outside [0,"), std::string::npos) << message;
  message = error_of([&] { run_op(topk(x, -1, -1, true)); });
  EXPECT_NE(message.find("outside [0,"), std::string::npos) << message;
}

// ---- CumSum --------------------------------------------------------------------------------------

OpRun cumsum(Tensor x, Tensor axis, bool exclusive, bool reverse) {
  OpRun run;
  run.op_type = "CumSum";
  run.inputs = {std::move(x), std::move(axis)};
  run.attributes.set("exclusive", int_attr(exclusive ? 1 : 0));
  run.attributes.set("reverse", int_attr(reverse ? 1 : 0));
  return run;
}

// CumSum by its definition: each element is the sum of the elements before it along `axis` (after
// it when reversed), itself included unless exclusive.
std::vector<double> reference_cumsum(const std::vector<double>& x, const Shape& shape, int64_t axis,
                                     bool exclusive, bool reverse) {
  const auto a = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis);
  std::vector<double> result;
  for (int64_t flat = 0; flat < checked_numel(shape); ++flat) {
    std::vector<int64_t> where = unravel(flat, shape);
    const int64_t position = where[a];
    double sum = 0;
    for (int64_t j = 0; j < shape[a]; ++j) {
      const bool counted =
          reverse ? (exclusive ? j > position : j >= position) : (exclusive ? j < position : j <= position);
      if (!counted) continue;
      where[a] = j;
      sum += x[static_cast<size_t>(ravel(where, shape))];
    }
    result.push_back(sum);
  }
  return result;
}

// Integer sums wrap around on overflow, as numpy's and ONNX Runtime's do (no undefined behaviour).
TEST(IndexingOps, CumSumIntegersWrapAround) {
  const int32_t big = std::numeric_limits<int32_t>::max();
  const std::vector<Tensor> out = run_op(
      cumsum(Tensor::from_vector<int32_t>({big, 1, 1}, {3}), Tensor::scalar<int64_t>(0), false, false));
  const int32_t* sums = out[0].data<int32_t>();
  EXPECT_EQ(sums[0], big);
  EXPECT_EQ(sums[1], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(sums[2], std::numeric_limits<int32_t>::min() + 1);
  const int64_t big64 = std::numeric_limits<int64_t>::max();
  const std::vector<Tensor> out64 =
      run_op(cumsum(Tensor::from_vector<int64_t>({big64, 2}, {2}), Tensor::scalar<int64_t>(0), false, false));
  EXPECT_EQ(out64[0].data<int64_t>()[1], std::numeric_limits<int64_t>::min() + 1);
}

TEST(IndexingOps, CumSumExclusiveReverse) {
  struct Case {
    bool exclusive;
    bool reverse;
    std::vector<float> axis0;
    std::vector<float> axis1;
  };
  // x = [[1, 2, 3], [4, 5, 6]]
  const Case cases[] = {
      {false, false, {1, 2, 3, 5, 7, 9}, {1, 3, 6, 4, 9, 15}},
      {true, false, {0, 0, 0, 1, 2, 3}, {0, 1, 3, 0, 4, 9}},
      {false, true, {5, 7, 9, 4, 5, 6}, {6, 5, 3, 15, 11, 6}},
      {true, true, {4, 5, 6, 0, 0, 0}, {5, 3, 0, 11, 6, 0}},
  };
  const Tensor x = iota({2, 3}, 1.0f);
  const Tensor xi = iota<int64_t>({2, 3}, 1);
  for (const Case& c : cases) {
    const std::string what =
        std::string("exclusive ") + (c.exclusive ? "1" : "0") + " reverse " + (c.reverse ? "1" : "0");
    // Axis as an int32 scalar and as an int64 scalar (and [1]); negative counts from the end.
    EXPECT_EQ(values_of(run_op(cumsum(x, Tensor::scalar<int32_t>(0), c.exclusive, c.reverse))[0]), c.axis0)
        << what;
    EXPECT_EQ(values_of(run_op(cumsum(x, Tensor::scalar<int64_t>(1), c.exclusive, c.reverse))[0]), c.axis1)
        << what;
    EXPECT_EQ(values_of(run_op(cumsum(x, i64s({-1}, {1}), c.exclusive, c.reverse))[0]), c.axis1) << what;
    std::vector<int64_t> axis0(c.axis0.begin(), c.axis0.end());
    std::vector<int64_t> axis1(c.axis1.begin(), c.axis1.end());
    EXPECT_EQ(values_of<int64_t>(run_op(cumsum(xi, Tensor::scalar<int64_t>(0), c.exclusive, c.reverse))[0]),
              axis0)
        << what;
    EXPECT_EQ(values_of<int64_t>(run_op(cumsum(xi, Tensor::scalar<int32_t>(1), c.exclusive, c.reverse))[0]),
              axis1)
        << what;
  }
  // The spec's 1-D examples.
  const Tensor line = iota({5}, 1.0f);
  EXPECT_EQ(values_of(run_op(cumsum(line, Tensor::scalar<int32_t>(0), true, false))[0]),
            (std::vector<float>{0, 1, 3, 6, 10}));
  EXPECT_EQ(values_of(run_op(cumsum(line, Tensor::scalar<int32_t>(0), false, true))[0]),
            (std::vector<float>{15, 14, 12, 9, 5}));
  EXPECT_EQ(values_of(run_op(cumsum(line, Tensor::scalar<int32_t>(0), true, true))[0]),
            (std::vector<float>{14, 12, 9, 5, 0}));
}

TEST(IndexingOps, CumSumMatchesReference) {
  const Shape shape{3, 4, 5};
  const Tensor x = integer_valued(shape, -9, 9, 41);  // integers: float sums are exact
  std::vector<double> doubles;
  for (int64_t i = 0; i < x.numel(); ++i) doubles.push_back(x.data<float>()[i]);
  for (int64_t axis : {0, 1, 2, -1}) {
    for (bool exclusive : {false, true}) {
      for (bool reverse : {false, true}) {
        const std::vector<double> expected = reference_cumsum(doubles, shape, axis, exclusive, reverse);
        const Tensor y = run_op(cumsum(x, Tensor::scalar<int64_t>(axis), exclusive, reverse))[0];
        EXPECT_EQ(values_of(y), std::vector<float>(expected.begin(), expected.end()))
            << "axis " << axis << " exclusive " << exclusive << " reverse " << reverse;
      }
    }
  }
}

// ---- Trilu ---------------------------------------------------------------------------------------

OpRun trilu(Tensor x, bool upper, const int64_t* k) {
  OpRun run;
  run.op_type = "Trilu";
  run.inputs = {std::move(x)};
  if (k != nullptr) run.inputs.push_back(Tensor::scalar<int64_t>(*k));
  run.attributes.set("upper", int_attr(upper ? 1 : 0));
  return run;
}

// Trilu keeps element (i, j) of each matrix when j - i >= k (upper) or j - i <= k (lower).
bool trilu_keeps(int64_t i, int64_t j, bool upper, int64_t k) {
  return upper ? j - i >= k : j - i <= k;
}

TEST(IndexingOps, TriluUpperAndLower) {
  const Tensor x = iota({3, 4}, 1.0f);  // 1 2 3 4 / 5 6 7 8 / 9 10 11 12
  struct Case {
    bool upper;
    int64_t k;
    std::vector<float> expected;
  };
  const Case cases[] = {
      {true, 0, {1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}},  {true, -1, {1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12}},
      {true, 2, {0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0}},    {false, 0, {1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0}},
      {false, -1, {0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}}, {false, 2, {1, 2, 3, 0, 5, 6, 7, 8, 9, 10, 11, 12}},
  };
  for (const Case& c : cases) {
    const Tensor y = run_op(trilu(x, c.upper, &c.k))[0];
    EXPECT_EQ(y.shape(), (Shape{3, 4}));
    EXPECT_EQ(values_of(y), c.expected) << (c.upper ? "upper" : "lower") << " k " << c.k;
  }
  // Without k: 0.
  EXPECT_EQ(values_of(run_op(trilu(x, true, nullptr))[0]), cases[0].expected);
  EXPECT_EQ(values_of(run_op(trilu(x, false, nullptr))[0]), cases[3].expected);
  // A batch of matrices against the rule.
  const Tensor batch = iota({2, 3, 3}, 1.0f);
  for (bool upper : {true, false}) {
    for (int64_t k : {-1, 0, 2}) {
      const Tensor y = run_op(trilu(batch, upper, &k))[0];
      ASSERT_EQ(y.shape(), (Shape{2, 3, 3}));
      for (int64_t flat = 0; flat < y.numel(); ++flat) {
        const std::vector<int64_t> at = unravel(flat, y.shape());
        const float expected = trilu_keeps(at[1], at[2], upper, k) ? batch.data<float>()[flat] : 0.0f;
        EXPECT_EQ(y.data<float>()[flat], expected)
            << (upper ? "upper" : "lower") << " k " << k << " at " << flat;
      }
    }
  }
}

// Trilu selects: -inf where kept, exactly 0 elsewhere (multiplying by a 0/1 mask would give NaN).
TEST(IndexingOps, TriluSelectsInfinities) {
  const Tensor x = f32s(std::vector<float>(9, -kInf), {3, 3});
  for (bool upper : {true, false}) {
    for (int64_t k : {-1, 0, 2}) {
      const Tensor y = run_op(trilu(x, upper, &k))[0];
      for (int64_t flat = 0; flat < 9; ++flat) {
        const float value = y.data<float>()[flat];
        if (trilu_keeps(flat / 3, flat % 3, upper, k)) {
          EXPECT_TRUE(std::isinf(value) && value < 0) << value << " at " << flat;
        } else {
          EXPECT_EQ(value, 0.0f) << "at " << flat;
        }
      }
    }
  }
}

TEST(IndexingOps, TriluRejectsRankOne) {
  const std::string message = error_of([&] { run_op(trilu(iota({4}), true, nullptr)); });
  EXPECT_NE(message.find("rank >= 2"), std::string::npos) << message;
}

// ---- ReverseSequence -----------------------------------------------------------------------------

OpRun reverse_sequence(Tensor x, std::vector<int64_t> lens, int64_t batch_axis, int64_t time_axis) {
  OpRun run;
  run.op_type = "ReverseSequence";
  const auto count = static_cast<int64_t>(lens.size());
  run.inputs = {std::move(x), i64s(std::move(lens), {count})};
  run.attributes.set("batch_axis", int_attr(batch_axis));
  run.attributes.set("time_axis", int_attr(time_axis));
  return run;
}

// ReverseSequence by its definition: for batch b, time steps [0, lens[b]) are reversed, the rest
// copied.
std::vector<float> reference_reverse_sequence(const Tensor& x, const std::vector<int64_t>& lens,
                                              int64_t batch_axis) {
  const Shape& shape = x.shape();
  const auto b = static_cast<size_t>(batch_axis);
  const size_t t = 1 - b;
  std::vector<float> result;
  for (int64_t flat = 0; flat < x.numel(); ++flat) {
    std::vector<int64_t> where = unravel(flat, shape);
    const int64_t length = lens[static_cast<size_t>(where[b])];
    if (where[t] < length) where[t] = length - 1 - where[t];
    result.push_back(x.data<float>()[ravel(where, shape)]);
  }
  return result;
}

TEST(IndexingOps, ReverseSequenceBothLayouts) {
  // The spec's examples. Time along dim 0, batch along dim 1:
  const Tensor by_time = f32s({0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15}, {4, 4});
  Tensor y = run_op(reverse_sequence(by_time, {4, 3, 2, 1}, 1, 0))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{3, 6, 9, 12, 2, 5, 8, 13, 1, 4, 10, 14, 0, 7, 11, 15}));
  // Batch along dim 0, time along dim 1:
  const Tensor by_batch = iota({4, 4});
  y = run_op(reverse_sequence(by_batch, {1, 2, 3, 4}, 0, 1))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{0, 1, 2, 3, 5, 4, 6, 7, 10, 9, 8, 11, 15, 14, 13, 12}));
  // Rank 3 (rows of 2 elements move together), a length 0, against the reference.
  const Tensor x3 = iota({3, 4, 2});
  const std::vector<int64_t> lens_for_4{3, 0, 1, 2};
  y = run_op(reverse_sequence(x3, lens_for_4, 1, 0))[0];
  EXPECT_EQ(values_of(y), reference_reverse_sequence(x3, lens_for_4, 1));
  const std::vector<int64_t> lens_for_3{4, 0, 2};
  y = run_op(reverse_sequence(x3, lens_for_3, 0, 1))[0];
  EXPECT_EQ(values_of(y), reference_reverse_sequence(x3, lens_for_3, 0));
}

TEST(IndexingOps, ReverseSequenceRejectsBadAxes) {
  const std::string message = error_of([&] { run_op(reverse_sequence(iota({2, 2}), {1, 1}, 0, 0)); });
  EXPECT_NE(message.find("must be 0 and 1 in some order"), std::string::npos) << message;
  EXPECT_THROW(run_op(reverse_sequence(iota({2, 2}), {1, 3}, 1, 0)), Error);  // length above the time dim
}

}  // namespace
}  // namespace kiln
