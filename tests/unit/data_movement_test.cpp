// Data-movement ops against hand-computed values and plain loop references: Concat, Split, Slice,
// Transpose (every fast path), Gather, GatherElements, Tile, Pad, DepthToSpace, SpaceToDepth.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::int_attr;
using testing::ints_attr;
using testing::OpRun;
using testing::run_op;
using testing::string_attr;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

Tensor i64s(std::vector<int64_t> values) {
  const int64_t count = static_cast<int64_t>(values.size());
  return Tensor::from_vector(values, {count});
}

// 0, 1, 2, ... in `shape`, as T.
template <typename T = float>
Tensor iota(Shape shape) {
  Tensor tensor = Tensor::empty(dtype_of<T>(), std::move(shape));
  for (int64_t i = 0; i < tensor.numel(); ++i) tensor.data<T>()[i] = static_cast<T>(i);
  return tensor;
}

template <typename T = float>
std::vector<T> values_of(const Tensor& tensor) {
  const auto span = tensor.values<T>();
  return {span.begin(), span.end()};
}

using testing::error_of;
using testing::ravel;
using testing::unravel;

// ---- Concat / Split -----------------------------------------------------------------------------

TEST(DataMovement, ConcatAlongEachAxis) {
  const Tensor a = iota({2, 2});
  Tensor b = iota({2, 1});
  b.data<float>()[0] = 10;
  b.data<float>()[1] = 11;
  OpRun run;
  run.op_type = "Concat";
  run.inputs = {a, b};
  run.attributes.set("axis", int_attr(-1));
  const Tensor y = run_op(run)[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values_of(y), (std::vector<float>{0, 1, 10, 2, 3, 11}));
  run.inputs = {Tensor::from_vector<int8_t>({1, 2}, {1, 2}), Tensor::zeros(DType::i8, {0, 2}),
                Tensor::from_vector<int8_t>({3, 4, 5, 6}, {2, 2})};
  run.attributes.set("axis", int_attr(0));
  EXPECT_EQ(values_of<int8_t>(run_op(run)[0]), (std::vector<int8_t>{1, 2, 3, 4, 5, 6}));
  run.inputs = {a, iota({3, 1})};
  run.attributes.set("axis", int_attr(1));
  EXPECT_NE(error_of([&] { run_op(run); }).find("[3, 1]"), std::string::npos);
  run.inputs = {a, iota<int32_t>({2, 2})};
  EXPECT_THROW(run_op(run), Error);
}

// Many rows take the row-parallel path, few rows the piece path; both against a loop reference.
TEST(DataMovement, ConcatLargeMatchesReference) {
  for (const Shape& base : {Shape{3000, 2, 5}, Shape{2, 2, 70000}}) {
    Shape other = base;
    other[1] = 3;
    const Tensor a = iota(base);
    Tensor b = iota(other);
    for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = -static_cast<float>(i);
    OpRun run;
    run.op_type = "Concat";
    run.inputs = {a, b};
    run.attributes.set("axis", int_attr(1));
    const Tensor y = run_op(run)[0];
    ASSERT_EQ(y.shape(), (Shape{base[0], base[1] + 3, base[2]}));
    bool same = true;
    for (int64_t i = 0; i < y.numel() && same; ++i) {
      std::vector<int64_t> index = unravel(i, y.shape());
      float expected;
      if (index[1] < base[1]) {
        expected = a.data<float>()[ravel(index, base)];
      } else {
        index[1] -= base[1];
        expected = b.data<float>()[ravel(index, other)];
      }
      same = y.data<float>()[i] == expected;
    }
    EXPECT_TRUE(same) << shape_to_string(base);
  }
}

TEST(DataMovement, SplitEqualAndExplicitSizes) {
  const Tensor x = iota({2, 6});
  OpRun run;
  run.op_type = "Split";
  run.inputs = {x};
  run.num_outputs = 3;
  run.attributes.set("axis", int_attr(1));
  std::vector<Tensor> parts = run_op(run);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(values_of(parts[0]), (std::vector<float>{0, 1, 6, 7}));
  EXPECT_EQ(values_of(parts[2]), (std::vector<float>{4, 5, 10, 11}));
  // Sizes as an attribute before opset 13, as an input after.
  run.num_outputs = 2;
  run.opset = 11;
  run.attributes.set("split", ints_attr({1, 5}));
  parts = run_op(run);
  EXPECT_EQ(values_of(parts[0]), (std::vector<float>{0, 6}));
  EXPECT_EQ(values_of(parts[1]), (std::vector<float>{1, 2, 3, 4, 5, 7, 8, 9, 10, 11}));
  run.opset = 13;
  run.attributes = {};
  run.attributes.set("axis", int_attr(-1));
  run.inputs = {x, i64s({4, 2})};
  parts = run_op(run);
  EXPECT_EQ(values_of(parts[1]), (std::vector<float>{4, 5, 10, 11}));
  run.inputs = {x, i64s({4, 3})};
  EXPECT_NE(error_of([&] { run_op(run); }).find("sum to 7"), std::string::npos);
  run.inputs = {x};
  run.num_outputs = 4;
  EXPECT_THROW(run_op(run), Error);  // 6 does not split into 4 equal parts
  // Opset 18's num_outputs: ceil-sized parts, the last one smaller.
  run.opset = 18;
  run.attributes.set("num_outputs", int_attr(4));
  parts = run_op(run);
  EXPECT_EQ(parts[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(parts[3].shape(), (Shape{2, 0}));
}

// ---- Slice -------------------------------------------------------------------------------------

OpRun slice(Tensor x, std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> axes = {},
            std::vector<int64_t> steps = {}) {
  OpRun run;
  run.op_type = "Slice";
  run.inputs = {std::move(x), i64s(std::move(starts)), i64s(std::move(ends))};
  if (!axes.empty() || !steps.empty()) run.inputs.push_back(axes.empty() ? Tensor{} : i64s(std::move(axes)));
  if (!steps.empty()) run.inputs.push_back(i64s(std::move(steps)));
  return run;
}

TEST(DataMovement, SliceBasicAndClamped) {
  const Tensor x = iota({3, 4});
  Tensor y = run_op(slice(x, {1, 1}, {3, 3}))[0];
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(values_of(y), (std::vector<float>{5, 6, 9, 10}));
  // Out-of-range ends (INT64_MAX) clamp; negative starts count from the end.
  y = run_op(slice(x, {-2}, {kMax}, {1}))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{2, 3, 6, 7, 10, 11}));
  y = run_op(slice(x, {5}, {kMax}, {0}))[0];
  EXPECT_EQ(y.shape(), (Shape{0, 4}));
  y = run_op(slice(x, {-100}, {1}, {0}))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{0, 1, 2, 3}));
}

TEST(DataMovement, SliceNegativeAndLargeSteps) {
  const Tensor x = iota({3, 4});
  // Reverse both dims: starts -1, ends INT64_MIN.
  Tensor y = run_op(slice(x, {-1, -1}, {kMin, kMin}, {0, 1}, {-1, -1}))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  y = run_op(slice(x, {kMax}, {0}, {1}, {-2}))[0];  // start clamps to 3: columns 3, 1
  EXPECT_EQ(values_of(y), (std::vector<float>{3, 1, 7, 5, 11, 9}));
  y = run_op(slice(x, {0}, {kMax}, {1}, {3}))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{0, 3, 4, 7, 8, 11}));
  y = run_op(slice(x, {2}, {-1}, {0}, {-1}))[0];  // end -1 means index 2: empty
  EXPECT_EQ(y.shape(), (Shape{0, 4}));
  EXPECT_THROW(run_op(slice(x, {0}, {1}, {0}, {0})), Error);
  EXPECT_THROW(run_op(slice(x, {0, 0}, {1, 1}, {1, -1})), Error);  // same axis twice
}

TEST(DataMovement, SliceOpset1Attributes) {
  OpRun run;
  run.op_type = "Slice";
  run.opset = 9;
  run.inputs = {iota<int64_t>({2, 5})};
  run.attributes.set("starts", ints_attr({1}));
  run.attributes.set("ends", ints_attr({-1}));
  run.attributes.set("axes", ints_attr({1}));
  EXPECT_EQ(values_of<int64_t>(run_op(run)[0]), (std::vector<int64_t>{1, 2, 3, 6, 7, 8}));
}

// A 4-D slice with mixed steps against a loop reference.
TEST(DataMovement, SliceMatchesReference) {
  const Shape shape{3, 5, 7, 9};
  const Tensor x = iota(shape);
  const std::vector<int64_t> starts{2, 0, -1, 1}, ends{kMin, 5, 0, 8}, steps{-1, 2, -3, 1};
  const Tensor y = run_op(slice(x, starts, ends, {0, 1, 2, 3}, steps))[0];
  // Per axis, the indices the slice visits.
  std::vector<std::vector<int64_t>> picked = {{2, 1, 0}, {0, 2, 4}, {6, 3}, {1, 2, 3, 4, 5, 6, 7}};
  ASSERT_EQ(y.shape(), (Shape{3, 3, 2, 7}));
  for (int64_t i = 0; i < y.numel(); ++i) {
    const std::vector<int64_t> index = unravel(i, y.shape());
    std::vector<int64_t> source(4);
    for (size_t d = 0; d < 4; ++d) source[d] = picked[d][static_cast<size_t>(index[d])];
    ASSERT_EQ(y.data<float>()[i], x.data<float>()[ravel(source, shape)]) << "element " << i;
  }
}

// ---- Transpose ---------------------------------------------------------------------------------

template <typename T>
void expect_transpose_matches(const Shape& shape, const std::vector<int64_t>& perm) {
  const Tensor x = iota<T>(shape);
  OpRun run;
  run.op_type = "Transpose";
  run.inputs = {x};
  if (!perm.empty()) run.attributes.set("perm", ints_attr(perm));
  const Tensor y = run_op(run)[0];
  std::vector<int64_t> order = perm;
  if (order.empty()) {
    for (size_t d = shape.size(); d-- > 0;) order.push_back(static_cast<int64_t>(d));
  }
  Shape out;
  for (int64_t axis : order) out.push_back(shape[static_cast<size_t>(axis)]);
  ASSERT_EQ(y.shape(), out);
  for (int64_t i = 0; i < y.numel(); ++i) {
    const std::vector<int64_t> index = unravel(i, out);
    std::vector<int64_t> source(shape.size());
    for (size_t d = 0; d < order.size(); ++d) source[static_cast<size_t>(order[d])] = index[d];
    ASSERT_EQ(y.data<T>()[i], x.data<T>()[ravel(source, shape)])
        << shape_to_string(shape) << " perm " << shape_to_string(order) << " element " << i;
  }
}

TEST(DataMovement, TransposeSmallValues) {
  OpRun run;
  run.op_type = "Transpose";
  run.inputs = {iota({2, 3})};
  const Tensor y = run_op(run)[0];
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(values_of(y), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  run.attributes.set("perm", ints_attr({0, 0}));
  EXPECT_THROW(run_op(run), Error);
  run.attributes.set("perm", ints_attr({0}));
  EXPECT_THROW(run_op(run), Error);
}

TEST(DataMovement, TransposeFastPathsMatchReference) {
  // 2-D tiles (odd sizes leave partial tiles), the attention [0, 2, 1, 3], NCHW <-> NHWC, the
  // default reversal, size-1 dims that collapse away, and a generic 5-D permutation.
  expect_transpose_matches<float>({67, 45}, {});
  expect_transpose_matches<float>({300, 257}, {1, 0});
  expect_transpose_matches<float>({2, 7, 4, 16}, {0, 2, 1, 3});
  expect_transpose_matches<float>({1, 128, 12, 64}, {0, 2, 1, 3});
  expect_transpose_matches<float>({2, 3, 17, 19}, {0, 2, 3, 1});
  expect_transpose_matches<float>({2, 17, 19, 3}, {0, 3, 1, 2});
  expect_transpose_matches<float>({2, 3, 4, 5}, {});
  expect_transpose_matches<float>({1, 5, 1, 7}, {3, 2, 1, 0});
  expect_transpose_matches<float>({2, 3, 4, 5, 6}, {4, 1, 3, 0, 2});
  expect_transpose_matches<float>({2, 3, 4}, {0, 1, 2});
}

TEST(DataMovement, TransposeEveryElementSize) {
  expect_transpose_matches<int8_t>({33, 65}, {1, 0});
  expect_transpose_matches<int16_t>({3, 33, 65}, {0, 2, 1});
  expect_transpose_matches<int64_t>({5, 6, 7}, {2, 0, 1});
  expect_transpose_matches<double>({40, 3, 40}, {2, 1, 0});
  expect_transpose_matches<bool>({2, 2, 2}, {1, 2, 0});
}

// ---- Gather ------------------------------------------------------------------------------------

TEST(DataMovement, GatherAxesAndNegativeIndices) {
  const Tensor x = iota({3, 4});
  OpRun run;
  run.op_type = "Gather";
  run.inputs = {x, Tensor::from_vector<int64_t>({2, -3, -1, 0}, {2, 2})};
  Tensor y = run_op(run)[0];
  EXPECT_EQ(y.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(values_of(y), (std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11, 0, 1, 2, 3}));
  run.attributes.set("axis", int_attr(-1));
  run.inputs = {x, Tensor::from_vector<int32_t>({-1, 1}, {2})};
  y = run_op(run)[0];
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(values_of(y), (std::vector<float>{3, 1, 7, 5, 11, 9}));
  run.inputs = {x, Tensor::scalar<int64_t>(2)};  // scalar index drops the axis
  y = run_op(run)[0];
  EXPECT_EQ(y.shape(), (Shape{3}));
  EXPECT_EQ(values_of(y), (std::vector<float>{2, 6, 10}));
  run.inputs = {x, Tensor::from_vector<float>({0}, {1})};
  EXPECT_THROW(run_op(run), Error);
}

// Indices are data: out-of-range ones throw at run time (they are not constants here).
TEST(DataMovement, GatherIndexOutOfRangeThrowsAtRunTime) {
  OpRun run;
  run.op_type = "Gather";
  run.inputs = {iota({3, 4}), Tensor::from_vector<int64_t>({0, 3}, {2})};
  run.inputs_are_constants = false;
  try {
    run_op(run);
    ADD_FAILURE() << "expected a kiln::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("index 3"), std::string::npos) << error.what();
  }
  run.inputs[1] = Tensor::from_vector<int32_t>({-4}, {1});
  EXPECT_THROW(run_op(run), Error);
}

TEST(DataMovement, GatherElementsBothAxes) {
  const Tensor x = iota({2, 3});
  OpRun run;
  run.op_type = "GatherElements";
  run.inputs = {x, Tensor::from_vector<int64_t>({1, 0, 1, 0, 1, 0}, {2, 3})};
  EXPECT_EQ(values_of(run_op(run)[0]), (std::vector<float>{3, 1, 5, 0, 4, 2}));
  run.attributes.set("axis", int_attr(1));
  run.inputs = {x, Tensor::from_vector<int32_t>({2, -3, 1, 1}, {2, 2})};
  EXPECT_EQ(values_of(run_op(run)[0]), (std::vector<float>{2, 0, 4, 4}));
  run.inputs = {x, Tensor::from_vector<int64_t>({3}, {1, 1})};
  run.inputs_are_constants = false;
  EXPECT_THROW(run_op(run), Error);
  run.inputs = {x, Tensor::from_vector<int64_t>({0, 0, 0, 0}, {4, 1})};  // dim 0 exceeds data
  EXPECT_THROW(run_op(run), Error);
}

// ---- Tile --------------------------------------------------------------------------------------

TEST(DataMovement, TileRepeats) {
  OpRun run;
  run.op_type = "Tile";
  run.inputs = {Tensor::from_vector<int32_t>({1, 2, 3, 4}, {2, 2}), i64s({2, 3})};
  const Tensor y = run_op(run)[0];
  EXPECT_EQ(y.shape(), (Shape{4, 6}));
  EXPECT_EQ(values_of<int32_t>(y), (std::vector<int32_t>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4,  //
                                                         1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
  run.inputs[1] = i64s({0, 1});
  EXPECT_EQ(run_op(run)[0].shape(), (Shape{0, 2}));
  run.inputs[1] = i64s({2});
  EXPECT_THROW(run_op(run), Error);
  run.inputs[1] = i64s({2, -1});
  EXPECT_THROW(run_op(run), Error);
}

// ---- Pad ---------------------------------------------------------------------------------------

OpRun pad(Tensor x, std::vector<int64_t> pads, std::string mode) {
  OpRun run;
  run.op_type = "Pad";
  run.inputs = {std::move(x), i64s(std::move(pads))};
  run.attributes.set("mode", string_attr(std::move(mode)));
  return run;
}

TEST(DataMovement, PadConstantEdgeReflect) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  OpRun run = pad(x, {0, 2, 1, 1}, "constant");
  run.inputs.push_back(Tensor::scalar<float>(9));
  Tensor y = run_op(run)[0];
  EXPECT_EQ(y.shape(), (Shape{3, 6}));
  EXPECT_EQ(values_of(y), (std::vector<float>{9, 9, 1, 2, 3, 9, 9, 9, 4, 5, 6, 9, 9, 9, 9, 9, 9, 9}));
  y = run_op(pad(x, {1, 2, 0, 1}, "edge"))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{1, 1, 1, 2, 3, 3, 1, 1, 1, 2, 3, 3, 4, 4, 4, 5, 6, 6}));
  y = run_op(pad(x, {1, 2, 0, 1}, "reflect"))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{6, 5, 4, 5, 6, 5, 3, 2, 1, 2, 3, 2, 6, 5, 4, 5, 6, 5}));
  // Negative pads crop.
  y = run_op(pad(x, {0, -1, 0, 1}, "constant"))[0];
  EXPECT_EQ(values_of(y), (std::vector<float>{2, 3, 0, 5, 6, 0}));
  EXPECT_THROW(run_op(pad(x, {0, 3, 0, 0}, "reflect")), Error);  // pad not smaller than dim
  EXPECT_THROW(run_op(pad(x, {0, 1}, "constant")), Error);
  EXPECT_THROW(run_op(pad(x, {0, 0, 0, 0}, "mirror")), Error);
}

TEST(DataMovement, PadAttributesBeforeOpset11AndAxesFrom18) {
  OpRun old;
  old.op_type = "Pad";
  old.opset = 2;
  old.inputs = {Tensor::from_vector<int32_t>({1, 2}, {2})};
  old.attributes.set("pads", ints_attr({1, 2}));
  Attribute value;
  value.type = Attribute::Type::f;
  value.f = 7;
  old.attributes.set("value", value);
  EXPECT_EQ(values_of<int32_t>(run_op(old)[0]), (std::vector<int32_t>{7, 1, 2, 7, 7}));

  OpRun axes = pad(iota({2, 2}), {1, 0}, "wrap");
  axes.opset = 19;
  axes.inputs.push_back(Tensor{});
  axes.inputs.push_back(i64s({-1}));  // pad only the last dim, wrapping around
  const Tensor y = run_op(axes)[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values_of(y), (std::vector<float>{1, 0, 1, 3, 2, 3}));
}

// A 3-D pad on every side against a loop reference, for each mode.
TEST(DataMovement, PadMatchesReference) {
  const Shape shape{3, 4, 5};
  const Tensor x = iota(shape);
  const std::vector<int64_t> pads{1, 2, 3, 2, -1, 4};
  for (const std::string mode : {"constant", "edge", "reflect"}) {
    const Tensor y = run_op(pad(x, pads, mode))[0];
    ASSERT_EQ(y.shape(), (Shape{6, 5, 12})) << mode;
    for (int64_t i = 0; i < y.numel(); ++i) {
      const std::vector<int64_t> index = unravel(i, y.shape());
      std::vector<int64_t> source(3);
      bool outside = false;
      for (size_t d = 0; d < 3; ++d) {
        int64_t c = index[d] - pads[d];
        const int64_t dim = shape[d];
        if (c < 0 || c >= dim) {
          outside = true;
          if (mode == "edge") c = c < 0 ? 0 : dim - 1;
          if (mode == "reflect") c = c < 0 ? -c : 2 * (dim - 1) - c;
        }
        source[d] = c;
      }
      const float expected = outside && mode == "constant" ? 0.0f : x.data<float>()[ravel(source, shape)];
      ASSERT_EQ(y.data<float>()[i], expected) << mode << " element " << i;
    }
  }
}

// ---- DepthToSpace / SpaceToDepth ----------------------------------------------------------------

TEST(DataMovement, DepthToSpaceModesAndInverse) {
  const Tensor x = iota({1, 8, 1, 2});
  OpRun run;
  run.op_type = "DepthToSpace";
  run.inputs = {x};
  run.attributes.set("blocksize", int_attr(2));
  Tensor y = run_op(run)[0];
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2, 4}));
  // DCR: output (c, h*2+i, w*2+j) = input (i*2*2 + j*2 + c, h, w) with C' = 2.
  EXPECT_EQ(values_of(y), (std::vector<float>{0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15}));
  run.attributes.set("mode", string_attr("CRD"));
  y = run_op(run)[0];
  // CRD: output (c, h*2+i, w*2+j) = input (c*4 + i*2 + j, h, w).
  EXPECT_EQ(values_of(y), (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15}));
  run.attributes.set("mode", string_attr("XYZ"));
  EXPECT_THROW(run_op(run), Error);

  // SpaceToDepth inverts DCR DepthToSpace.
  const Tensor big = iota({2, 12, 3, 5});
  OpRun down;
  down.op_type = "DepthToSpace";
  down.inputs = {big};
  down.attributes.set("blocksize", int_attr(2));
  const Tensor space = run_op(down)[0];
  EXPECT_EQ(space.shape(), (Shape{2, 3, 6, 10}));
  OpRun up;
  up.op_type = "SpaceToDepth";
  up.inputs = {space};
  up.attributes.set("blocksize", int_attr(2));
  const Tensor back = run_op(up)[0];
  EXPECT_EQ(back.shape(), big.shape());
  EXPECT_EQ(values_of(back), values_of(big));
  up.inputs = {iota({1, 1, 3, 4})};
  EXPECT_THROW(run_op(up), Error);
}

}  // namespace
}  // namespace kiln
