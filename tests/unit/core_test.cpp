#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace kiln {
namespace {

TEST(CoreTensor, EmptyIsContiguousAndAligned) {
  Tensor tensor = Tensor::empty(DType::f32, {2, 3, 4});
  EXPECT_EQ(tensor.numel(), 24);
  EXPECT_EQ(tensor.nbytes(), 96u);
  EXPECT_EQ(tensor.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_TRUE(tensor.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tensor.raw_data()) % kDefaultAlignment, 0u);
}

// An empty tensor's other dims may multiply past int64: its strides saturate, and is_contiguous
// saturates alike (the model-loading fuzzer found it overflowing).
TEST(CoreTensor, EmptyTensorWithHugeDimsIsContiguous) {
  const int64_t huge = int64_t{1} << 62;
  Tensor tensor = Tensor::empty(DType::f32, {0, huge, 5});
  EXPECT_EQ(tensor.numel(), 0);
  EXPECT_TRUE(tensor.is_contiguous());
  EXPECT_EQ(tensor.strides()[0], std::numeric_limits<int64_t>::max());
}

TEST(CoreTensor, ReshapeSharesStorageAndChecksCount) {
  Tensor tensor = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor view = tensor.reshaped({3, 2});
  EXPECT_EQ(view.raw_data(), tensor.raw_data());
  EXPECT_EQ(view.shape(), (Shape{3, 2}));
  EXPECT_THROW(tensor.reshaped({4, 2}), Error);
}

TEST(CoreTensor, CloneCopiesBytes) {
  Tensor tensor = Tensor::from_vector<int64_t>({7, 8, 9}, {3});
  Tensor copy = tensor.clone();
  copy.data<int64_t>()[0] = 1;
  EXPECT_EQ(tensor.data<int64_t>()[0], 7);
  EXPECT_EQ(copy.to_int64_vector(), (std::vector<int64_t>{1, 8, 9}));
}

TEST(CoreTensor, RejectsNegativeAndOverflowingShapes) {
  EXPECT_THROW(Tensor::empty(DType::f32, {2, -1}), Error);
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_THROW(Tensor::empty(DType::f32, {huge, 4}), Error);
  try {
    checked_numel(Shape{3, -2});
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("[3, -2]"), std::string::npos);
  }
}

TEST(CoreTensor, FloatsReadAsIntegersMustFitInt64) {
  EXPECT_EQ(Tensor::scalar(-3.75f).int_at(0), -3);
  EXPECT_EQ(Tensor::scalar(9.0e18).int_at(0), int64_t{9000000000000000000});
  for (double value : {1.8e28, -1.0e19, std::nan("")}) {
    try {
      Tensor::scalar(value).int_at(0);
      ADD_FAILURE() << value << " converted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("does not fit an int64"), std::string::npos) << error.what();
    }
  }
}

TEST(CoreTensor, SequencesShareElementsAndCloneDeeply) {
  const Tensor element = Tensor::from_vector<float>({1, 2}, {2});
  const Tensor sequence = Tensor::sequence(DType::f32, {element, element});
  ASSERT_TRUE(sequence.is_sequence());
  EXPECT_EQ(sequence.elements().size(), 2u);
  EXPECT_EQ(sequence.elements()[0].raw_data(), element.raw_data());
  const Tensor copy = sequence.clone();
  EXPECT_NE(copy.elements()[1].raw_data(), element.raw_data());
  EXPECT_EQ(copy.elements()[1].data<float>()[1], 2.0f);
  EXPECT_THROW(Tensor::sequence(DType::i64, {element}), Error);  // elements share the sequence's dtype
  EXPECT_EQ(Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}).leading(1).numel(), 2);
}

TEST(CoreTensor, ScalarAndZeroSizedTensors) {
  Tensor scalar = Tensor::scalar<float>(2.5f);
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.double_at(0), 2.5);
  Tensor empty = Tensor::zeros(DType::i32, {0, 5});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.nbytes(), 0u);
}

TEST(CoreDType, Float16RoundTripsAndRounds) {
  const float exact[] = {0.0f, 1.0f, -2.0f, 0.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f};
  for (float value : exact) EXPECT_EQ(float16_to_float(float_to_float16(value)), value) << value;
  EXPECT_TRUE(std::isinf(float16_to_float(float_to_float16(1e6f))));
  EXPECT_TRUE(std::isnan(float16_to_float(float_to_float16(std::nanf("")))));
  // 1 + 2^-11 lies halfway between 1 and the next half (1 + 2^-10): ties go to even (1).
  EXPECT_EQ(float16_to_float(float_to_float16(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(float16_to_float(float_to_float16(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
}

TEST(CoreDType, BFloat16RoundTripsAndRounds) {
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(1.5f)), 1.5f);
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(-3.0f)), -3.0f);
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);  // tie to even
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(std::nanf("")))));
}

TEST(CoreDType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::boolean), 1u);
  EXPECT_EQ(dtype_name(DType::i64), "int64");
  EXPECT_TRUE(is_floating(DType::f16));
  EXPECT_FALSE(is_integer(DType::boolean));
}

TEST(CoreError, ContextIsPrependedOutermostFirst) {
  Error error(ErrorKind::invalid_model, "bad dim");
  error.add_context("input 'x'");
  error.add_context("node 'conv1' (Conv)");
  EXPECT_STREQ(error.what(), "node 'conv1' (Conv): input 'x': bad dim");
  EXPECT_EQ(error.message(), "bad dim");
}

TEST(CoreAllocator, RegistryFindsByNameAndNamesKnownOnes) {
  EXPECT_EQ(&find_allocator("default"), &default_allocator());
  try {
    find_allocator("gpu");
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("default"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln
