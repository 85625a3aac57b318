#include <gtest/gtest.h>

#include "core/error.h"
#include "op_test_util.h"
#include "ops/op_spec.h"

namespace kiln {
namespace {

TEST(OpSpec, NormalizeAxisRejectsAnyAxisOfAScalar) {
  EXPECT_EQ(normalize_axis(-1, 3), 2);
  EXPECT_EQ(normalize_axis(2, 3), 2);
  EXPECT_THROW(normalize_axis(3, 3), Error);
  EXPECT_THROW(normalize_axis(0, 0), Error);
}

// Found by the model-loading fuzzer: a reduction over axis 0 of a scalar read past an empty vector.
TEST(OpSpec, ReductionOverAScalarAxisIsAnError) {
  testing::OpRun run;
  run.op_type = "ReduceMean";
  run.opset = 13;
  run.attributes.set("axes", testing::ints_attr({0}));
  run.inputs = {Tensor::scalar<float>(1.0f)};
  EXPECT_THROW(testing::run_op(run), Error);
}

}  // namespace
}  // namespace kiln
