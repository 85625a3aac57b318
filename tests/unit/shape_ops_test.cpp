// Shape ops: values of Shape/Size/Constant, view ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity,
// Dropout), Expand, ConstantOfShape, Range, EyeLike, and the errors for invalid nodes.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "op_test_util.h"
#include "ops/op_spec.h"

namespace kiln {
namespace {

using testing::float_attr;
using testing::int_attr;
using testing::ints_attr;
using testing::OpRun;
using testing::run_op;

Tensor i64s(std::vector<int64_t> values) {
  const int64_t count = static_cast<int64_t>(values.size());
  return Tensor::from_vector(values, {count});
}

// 0, 1, 2, ... as float32 in `shape`.
Tensor iota(Shape shape) {
  Tensor tensor = Tensor::empty(DType::f32, std::move(shape));
  for (int64_t i = 0; i < tensor.numel(); ++i) tensor.data<float>()[i] = static_cast<float>(i);
  return tensor;
}

template <typename T>
std::vector<T> values_of(const Tensor& tensor) {
  const auto span = tensor.values<T>();
  return {span.begin(), span.end()};
}

using testing::error_of;

OpRun unary(std::string op, Tensor input, int64_t opset = 17) {
  OpRun run;
  run.op_type = std::move(op);
  run.inputs = {std::move(input)};
  run.opset = opset;
  return run;
}

TEST(ShapeOps, ShapeWithStartAndEnd) {
  const Tensor x = Tensor::zeros(DType::f32, {2, 3, 4, 5});
  EXPECT_EQ(values_of<int64_t>(run_op(unary("Shape", x))[0]), (std::vector<int64_t>{2, 3, 4, 5}));
  OpRun sliced = unary("Shape", x, 15);
  sliced.attributes.set("start", int_attr(1));
  sliced.attributes.set("end", int_attr(-1));
  EXPECT_EQ(values_of<int64_t>(run_op(sliced)[0]), (std::vector<int64_t>{3, 4}));
  // Out-of-range start/end clamp rather than fail.
  sliced.attributes.set("start", int_attr(-10));
  sliced.attributes.set("end", int_attr(10));
  EXPECT_EQ(values_of<int64_t>(run_op(sliced)[0]), (std::vector<int64_t>{2, 3, 4, 5}));
  // Before opset 15 start/end do not exist.
  sliced.opset = 13;
  EXPECT_EQ(values_of<int64_t>(run_op(sliced)[0]), (std::vector<int64_t>{2, 3, 4, 5}));
}

TEST(ShapeOps, SizeOfTensor) {
  const Tensor size = run_op(unary("Size", Tensor::zeros(DType::i8, {3, 0, 2})))[0];
  EXPECT_EQ(size.rank(), 0);
  EXPECT_EQ(size.data<int64_t>()[0], 0);
  EXPECT_EQ(run_op(unary("Size", Tensor::zeros(DType::f32, {3, 7})))[0].data<int64_t>()[0], 21);
}

TEST(ShapeOps, ReshapeCopiesZeroAndInfersMinusOne) {
  const Tensor x = iota({2, 3, 4});
  OpRun run;
  run.op_type = "Reshape";
  run.inputs = {x, i64s({0, -1})};
  const Tensor y = run_op(run)[0];
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_EQ(values_of<float>(y), values_of<float>(x));
  EXPECT_EQ(y.raw_data(), x.raw_data()) << "Reshape must be a view";

  run.inputs = {x, i64s({4, 0, -1})};  // 0 copies dim 1 (3), -1 becomes 2
  EXPECT_EQ(run_op(run)[0].shape(), (Shape{4, 3, 2}));
}

TEST(ShapeOps, ReshapeAllowZeroKeepsZeroDims) {
  OpRun run;
  run.op_type = "Reshape";
  run.inputs = {Tensor::zeros(DType::f32, {0, 3}), i64s({3, 0})};
  run.attributes.set("allowzero", int_attr(1));
  EXPECT_EQ(run_op(run)[0].shape(), (Shape{3, 0}));
  // Without allowzero the 0 copies input dim 1 (3): [3, 3] cannot hold 0 elements.
  run.attributes = {};
  EXPECT_NE(error_of([&] { run_op(run); }).find("cannot reshape"), std::string::npos);
}

TEST(ShapeOps, ReshapeErrorsNameBothShapes) {
  OpRun run;
  run.op_type = "Reshape";
  run.inputs = {iota({2, 3}), i64s({4, 2})};
  const std::string message = error_of([&] { run_op(run); });
  EXPECT_NE(message.find("[2, 3]"), std::string::npos) << message;
  EXPECT_NE(message.find("[4, 2]"), std::string::npos) << message;

  run.inputs = {iota({2, 3}), i64s({-1, -1})};
  EXPECT_NE(error_of([&] { run_op(run); }).find("more than one -1"), std::string::npos);
  run.inputs = {iota({2, 3}), i64s({4, -1})};
  EXPECT_NE(error_of([&] { run_op(run); }).find("cannot reshape"), std::string::npos);
  run.inputs = {iota({2, 3}), i64s({-2, 3})};
  EXPECT_NE(error_of([&] { run_op(run); }).find("negative"), std::string::npos);
  // The fuzzer's case: the known dims' product overflows before -1 is inferred.
  run.inputs = {iota({2, 3}), i64s({1688849860263940, 274877906952, -1})};
  EXPECT_NE(error_of([&] { run_op(run); }).find("more elements than an int64 counts"), std::string::npos);
}

TEST(ShapeOps, ReshapeNeedsConstantShape) {
  OpRun run;
  run.op_type = "Reshape";
  run.inputs = {iota({2, 3}), i64s({3, 2})};
  run.inputs_are_constants = false;
  EXPECT_THROW(run_op(run), MissingConstantInput);
}

TEST(ShapeOps, FlattenAxes) {
  const Tensor x = iota({2, 3, 4, 5});
  OpRun run = unary("Flatten", x);
  EXPECT_EQ(run_op(run)[0].shape(), (Shape{2, 60}));
  run.attributes.set("axis", int_attr(0));
  EXPECT_EQ(run_op(run)[0].shape(), (Shape{1, 120}));
  run.attributes.set("axis", int_attr(4));
  EXPECT_EQ(run_op(run)[0].shape(), (Shape{120, 1}));
  run.attributes.set("axis", int_attr(-1));
  const Tensor y = run_op(run)[0];
  EXPECT_EQ(y.shape(), (Shape{24, 5}));
  EXPECT_EQ(values_of<float>(y), values_of<float>(x));
  run.attributes.set("axis", int_attr(5));
  EXPECT_THROW(run_op(run), Error);
  // A zero dim before the axis still leaves the inner size intact.
  EXPECT_EQ(run_op(unary("Flatten", Tensor::zeros(DType::f32, {0, 3, 4})))[0].shape(), (Shape{0, 12}));
}

TEST(ShapeOps, SqueezeAxesAttributeAndInput) {
  const Tensor x = iota({1, 3, 1, 2});
  EXPECT_EQ(run_op(unary("Squeeze", x))[0].shape(), (Shape{3, 2}));  // all size-1 dims
  OpRun old = unary("Squeeze", x, 11);
  old.attributes.set("axes", ints_attr({-2}));
  EXPECT_EQ(run_op(old)[0].shape(), (Shape{1, 3, 2}));
  OpRun current = unary("Squeeze", x, 13);
  current.inputs.push_back(i64s({0}));
  const Tensor y = run_op(current)[0];
  EXPECT_EQ(y.shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(values_of<float>(y), values_of<float>(x));
  current.inputs[1] = i64s({1});  // dim 1 has size 3
  EXPECT_THROW(run_op(current), Error);
}

TEST(ShapeOps, UnsqueezeAxesAttributeAndInput) {
  const Tensor x = iota({3, 2});
  OpRun old = unary("Unsqueeze", x, 11);
  old.attributes.set("axes", ints_attr({0, -1}));
  EXPECT_EQ(run_op(old)[0].shape(), (Shape{1, 3, 2, 1}));
  OpRun current = unary("Unsqueeze", x, 13);
  current.inputs.push_back(i64s({1, 3}));
  EXPECT_EQ(run_op(current)[0].shape(), (Shape{3, 1, 2, 1}));
  current.inputs[1] = i64s({1, 1});
  EXPECT_THROW(run_op(current), Error);
  current.inputs[1] = i64s({4});
  EXPECT_THROW(run_op(current), Error);
}

TEST(ShapeOps, IdentityIsAView) {
  const Tensor x = Tensor::from_vector<int32_t>({1, 2, 3}, {3});
  const Tensor y = run_op(unary("Identity", x))[0];
  EXPECT_EQ(y.raw_data(), x.raw_data());
  EXPECT_EQ(values_of<int32_t>(y), (std::vector<int32_t>{1, 2, 3}));
}

TEST(ShapeOps, DropoutInferenceAndMask) {
  const Tensor x = iota({2, 3});
  OpRun run = unary("Dropout", x, 13);
  run.num_outputs = 2;
  run.inputs = {x, Tensor::scalar<float>(0.3f), Tensor::scalar<bool>(false)};
  const std::vector<Tensor> outputs = run_op(run);
  EXPECT_EQ(values_of<float>(outputs[0]), values_of<float>(x));
  ASSERT_EQ(outputs[1].dtype(), DType::boolean);
  EXPECT_EQ(outputs[1].shape(), (Shape{2, 3}));
  for (bool kept : values_of<bool>(outputs[1])) EXPECT_TRUE(kept);
  // Training with ratio 0 keeps everything; any other ratio would need randomness.
  run.inputs = {x, Tensor::scalar<float>(0.0f), Tensor::scalar<bool>(true)};
  EXPECT_EQ(values_of<float>(run_op(run)[0]), values_of<float>(x));
  run.inputs = {x, Tensor::scalar<float>(0.5f), Tensor::scalar<bool>(true)};
  try {
    run_op(run);
    ADD_FAILURE() << "training mode must be rejected";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::not_implemented);
  }
  // Opset 7's mask has the data's type.
  OpRun old = unary("Dropout", x, 7);
  old.num_outputs = 2;
  const std::vector<Tensor> old_outputs = run_op(old);
  ASSERT_EQ(old_outputs[1].dtype(), DType::f32);
  for (float kept : values_of<float>(old_outputs[1])) EXPECT_EQ(kept, 1.0f);
}

TEST(ShapeOps, ExpandBroadcastsBothWays) {
  OpRun run;
  run.op_type = "Expand";
  run.inputs = {Tensor::from_vector<float>({1, 2, 3}, {3, 1}), i64s({2, 1, 2})};
  const Tensor y = run_op(run)[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  // A 1 in the target keeps the input's dim (bidirectional broadcast).
  run.inputs = {Tensor::from_vector<int64_t>({4, 5}, {1, 2}), i64s({3, 1})};
  const Tensor z = run_op(run)[0];
  EXPECT_EQ(z.shape(), (Shape{3, 2}));
  EXPECT_EQ(values_of<int64_t>(z), (std::vector<int64_t>{4, 5, 4, 5, 4, 5}));
  run.inputs = {Tensor::from_vector<float>({1, 2, 3}, {3}), i64s({2})};
  EXPECT_THROW(run_op(run), Error);
}

TEST(ShapeOps, ConstantOfShapeDefaultAndValue) {
  OpRun run;
  run.op_type = "ConstantOfShape";
  run.inputs = {i64s({2, 3})};
  const Tensor zeros = run_op(run)[0];
  EXPECT_EQ(zeros.dtype(), DType::f32);
  EXPECT_EQ(values_of<float>(zeros), std::vector<float>(6, 0.0f));
  Attribute value;
  value.type = Attribute::Type::t;
  value.t = Tensor::from_vector<int32_t>({7}, {1});
  run.attributes.set("value", value);
  run.inputs = {i64s({100, 1000})};  // large enough to fill on several threads
  const Tensor sevens = run_op(run)[0];
  EXPECT_EQ(sevens.dtype(), DType::i32);
  EXPECT_EQ(sevens.shape(), (Shape{100, 1000}));
  EXPECT_EQ(values_of<int32_t>(sevens), std::vector<int32_t>(100000, 7));
  run.inputs = {i64s({})};
  EXPECT_EQ(run_op(run)[0].rank(), 0);
  EXPECT_EQ(run_op(run)[0].data<int32_t>()[0], 7);
  run.inputs = {i64s({2, -1})};
  EXPECT_THROW(run_op(run), Error);
}

TEST(ShapeOps, ConstantAttributes) {
  OpRun run;
  run.op_type = "Constant";
  run.attributes.set("value_ints", ints_attr({3, 1, 4}));
  EXPECT_EQ(values_of<int64_t>(run_op(run)[0]), (std::vector<int64_t>{3, 1, 4}));
  run.attributes = {};
  run.attributes.set("value_float", float_attr(2.5f));
  const Tensor scalar = run_op(run)[0];
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.data<float>()[0], 2.5f);
  run.attributes = {};
  run.attributes.set("value_int", int_attr(-4));
  EXPECT_EQ(run_op(run)[0].data<int64_t>()[0], -4);
  run.attributes = {};
  Attribute floats;
  floats.type = Attribute::Type::floats;
  floats.floats = {1.5f, -2.0f};
  run.attributes.set("value_floats", floats);
  EXPECT_EQ(values_of<float>(run_op(run)[0]), (std::vector<float>{1.5f, -2.0f}));
  run.attributes = {};
  Attribute tensor;
  tensor.type = Attribute::Type::t;
  tensor.t = Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2});
  run.attributes.set("value", tensor);
  const Tensor matrix = run_op(run)[0];
  EXPECT_EQ(matrix.shape(), (Shape{2, 2}));
  EXPECT_EQ(values_of<double>(matrix), (std::vector<double>{1, 2, 3, 4}));
  run.attributes.set("value_int", int_attr(1));  // two values
  EXPECT_THROW(run_op(run), Error);
}

TEST(ShapeOps, RangeFloatAndInt) {
  OpRun run;
  run.op_type = "Range";
  run.inputs = {Tensor::scalar<float>(1.0f), Tensor::scalar<float>(2.0f), Tensor::scalar<float>(0.25f)};
  EXPECT_EQ(values_of<float>(run_op(run)[0]), (std::vector<float>{1.0f, 1.25f, 1.5f, 1.75f}));
  run.inputs = {Tensor::scalar<int32_t>(10), Tensor::scalar<int32_t>(3), Tensor::scalar<int32_t>(-3)};
  EXPECT_EQ(values_of<int32_t>(run_op(run)[0]), (std::vector<int32_t>{10, 7, 4}));
  run.inputs = {Tensor::scalar<int64_t>(5), Tensor::scalar<int64_t>(1), Tensor::scalar<int64_t>(1)};
  EXPECT_EQ(run_op(run)[0].shape(), (Shape{0}));
  run.inputs = {Tensor::scalar<int64_t>(0), Tensor::scalar<int64_t>(3), Tensor::scalar<int64_t>(0)};
  EXPECT_THROW(run_op(run), Error);
  run.inputs = {Tensor::scalar<int64_t>(0), Tensor::scalar<int32_t>(3), Tensor::scalar<int64_t>(1)};
  EXPECT_THROW(run_op(run), Error);
}

TEST(ShapeOps, EyeLikeDiagonalsAndDtype) {
  OpRun run = unary("EyeLike", Tensor::zeros(DType::i32, {3, 4}));
  EXPECT_EQ(values_of<int32_t>(run_op(run)[0]), (std::vector<int32_t>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}));
  run.attributes.set("k", int_attr(2));
  EXPECT_EQ(values_of<int32_t>(run_op(run)[0]), (std::vector<int32_t>{0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0}));
  run.attributes.set("k", int_attr(-1));
  run.attributes.set("dtype", int_attr(1));  // ONNX FLOAT
  const Tensor below = run_op(run)[0];
  EXPECT_EQ(below.dtype(), DType::f32);
  EXPECT_EQ(values_of<float>(below), (std::vector<float>{0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0}));
  run.attributes.set("k", int_attr(10));
  EXPECT_EQ(values_of<float>(run_op(run)[0]), std::vector<float>(12, 0.0f));
  EXPECT_THROW(run_op(unary("EyeLike", Tensor::zeros(DType::f32, {3}))), Error);
}

}  // namespace
}  // namespace kiln
