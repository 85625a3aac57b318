// Data movement on channels-last values: the ChannelShuffle kernel (plain and nhwc), Slice and
// Concat of nhwc values, against plain loops over the logical [N, C, H, W] indexes.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backends/backends.h"
#include "backends/native/native_backend.h"
#include "backends/settings.h"
#include "graph/session.h"
#include "graph_builder.h"
#include "op_test_util.h"
#include "ops/channel_shuffle.h"

namespace kiln {
namespace {

// Flat offset of logical (n, c, h, w) in a [N, C, H, W] value stored in `layout`.
int64_t offset(const Shape& s, Layout layout, int64_t n, int64_t c, int64_t h, int64_t w) {
  if (layout == Layout::nhwc) return ((n * s[2] + h) * s[3] + w) * s[1] + c;
  return ((n * s[1] + c) * s[2] + h) * s[3] + w;
}

// Logical element (n, c, h, w) = n * 1000000 + c * 1000 + h * 30 + w, stored in `layout`.
Tensor labelled(const Shape& s, Layout layout) {
  Tensor t = Tensor::empty(DType::f32, stored_shape(s, layout));
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t w = 0; w < s[3]; ++w)
          t.data<float>()[offset(s, layout, n, c, h, w)] =
              static_cast<float>(n * 1000000 + c * 1000 + h * 30 + w);
  return t;
}

float label(int64_t n, int64_t c, int64_t h, int64_t w) {
  return static_cast<float>(n * 1000000 + c * 1000 + h * 30 + w);
}

std::unique_ptr<Kernel> native_kernel(const KernelRequest& request, const TensorInfo& output) {
  KernelOrReason offer = native_backend().create_kernel(request, std::span(&output, 1));
  EXPECT_NE(offer.kernel, nullptr) << offer.refusal.detail;
  return std::move(offer.kernel);
}

KernelRequest shuffle_request(const Shape& shape, int64_t groups, Layout layout, Attributes& attributes) {
  attributes.set_int("groups", groups);
  KernelRequest request;
  request.op.op_type = std::string(kChannelShuffleOp);
  request.op.opset = 1;
  request.op.attributes = &attributes;
  request.op.inputs = {TensorInfo{DType::f32, shape, {}}};
  request.input_layouts = {layout};
  return request;
}

TEST(ChannelShuffle, EveryChannelLandsWhereTheExportedReshapeTransposeReshapePutsIt) {
  const Shape shapes[] = {{1, 116, 28, 28}, {2, 6, 3, 5}, {3, 12, 1, 1}, {1, 24, 7, 7}};
  for (const Shape& shape : shapes) {
    for (int64_t groups : {1, 2, 3, 4, 6}) {
      if (shape[1] % groups != 0) continue;
      for (Layout layout : {Layout::plain, Layout::nhwc}) {
        for (int threads : {1, 2}) {
          SCOPED_TRACE(::testing::Message() << shape_to_string(shape) << " groups " << groups << " "
                                            << layout_name(layout) << " threads " << threads);
          Attributes attributes;
          const auto kernel = native_kernel(shuffle_request(shape, groups, layout, attributes),
                                            TensorInfo{DType::f32, shape, {}});
          ASSERT_NE(kernel, nullptr);
          EXPECT_EQ(kernel->input_layout(0), layout);
          EXPECT_EQ(kernel->output_layout(0), layout);
          const Tensor x = labelled(shape, layout);
          Tensor y = Tensor::empty(DType::f32, stored_shape(shape, layout));
          {
            const ScopedThreads scoped(threads);
            kernel->run(std::span(&x, 1), std::span(&y, 1));
          }
          // [N, g, C/g, H, W] transposed to [N, C/g, g, H, W]: output channel a * g + b is input b * C/g + a.
          const int64_t per_group = shape[1] / groups;
          int64_t wrong = 0;
          for (int64_t n = 0; n < shape[0]; ++n)
            for (int64_t a = 0; a < per_group; ++a)
              for (int64_t b = 0; b < groups; ++b)
                for (int64_t h = 0; h < shape[2]; ++h)
                  for (int64_t w = 0; w < shape[3]; ++w)
                    wrong += y.data<float>()[offset(shape, layout, n, a * groups + b, h, w)] !=
                             label(n, b * per_group + a, h, w);
          EXPECT_EQ(wrong, 0);
        }
      }
    }
  }
}

// A Reshape -> Transpose -> Reshape whose first target's dims multiply past int64 (a malformed file the
// fuzzer wrote): the fusion declines it without overflowing, and planning names the bad Reshape.
TEST(ChannelShuffle, AReshapeTargetPastInt64IsNotFusedAndIsNamed) {
  testing::GraphBuilder g{{1, 4, 2, 2}};
  const std::string split = g.add(
      "Reshape",
      {"x", g.constant(Tensor::from_vector(std::vector<int64_t>{1, 103079215101, 536870911, 2, 2}, {5}))});
  Attributes perm;
  perm.set("perm", testing::ints_attr({0, 2, 1, 3, 4}));
  const std::string swapped = g.add("Transpose", {split}, perm);
  const std::string joined =
      g.add("Reshape", {swapped, g.constant(Tensor::from_vector(std::vector<int64_t>{1, 4, 2, 2}, {4}))});
  const Model model = g.finish({joined});
  const std::string message = testing::error_of([&] {
    Session(model).run({{"x", Tensor::zeros(DType::f32, {1, 4, 2, 2})}});
  });
  EXPECT_NE(message.find("Reshape"), std::string::npos) << message;
}

TEST(ChannelShuffle, RefusesGroupsThatDoNotDivideTheChannels) {
  Attributes attributes;
  const Shape shape{1, 10, 2, 2};
  const TensorInfo out{DType::f32, shape, {}};
  KernelOrReason offer =
      native_backend().create_kernel(shuffle_request(shape, 4, Layout::nhwc, attributes), std::span(&out, 1));
  EXPECT_EQ(offer.kernel, nullptr);
  EXPECT_EQ(offer.refusal.detail, "ChannelShuffle's groups (4) must divide the channels (10)");
}

TEST(ChannelsLastSlice, MatchesTheLogicalSliceOnEveryAxis) {
  const Shape shape{2, 10, 5, 6};
  const Tensor x = labelled(shape, Layout::nhwc);
  struct Case {
    int64_t axis, start, end, step;
  };
  const Case cases[] = {{1, 0, 5, 1}, {1, 5, 10, 1},   {1, 1, 9, 3},
                        {2, 1, 4, 1}, {3, -1, -7, -2}, {0, 1, 2, 1}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "axis " << c.axis << " " << c.start << ":" << c.end << ":" << c.step);
    Attributes attributes;
    KernelRequest request;
    request.op.op_type = "Slice";
    request.op.opset = 13;
    request.op.attributes = &attributes;
    const auto i64 = [](int64_t v) { return Tensor::from_vector(std::vector<int64_t>{v}, {1}); };
    for (const Tensor& value : {i64(c.start), i64(c.end), i64(c.axis), i64(c.step)})
      request.op.inputs.push_back(TensorInfo{DType::i64, {1}, value});
    request.op.inputs.insert(request.op.inputs.begin(), TensorInfo{DType::f32, shape, {}});
    request.input_layouts = {Layout::nhwc};
    // Indexes along the sliced axis, as numpy would take them.
    std::vector<int64_t> taken;
    const int64_t dim = shape[static_cast<size_t>(c.axis)];
    const int64_t first = c.start < 0 ? c.start + dim : c.start, last = c.end < 0 ? c.end + dim : c.end;
    for (int64_t i = first; c.step > 0 ? i < last : i > last; i += c.step) taken.push_back(i);
    Shape out_shape = shape;
    out_shape[static_cast<size_t>(c.axis)] = static_cast<int64_t>(taken.size());
    const auto kernel = native_kernel(request, TensorInfo{DType::f32, out_shape, {}});
    ASSERT_NE(kernel, nullptr);
    EXPECT_EQ(kernel->name(), "native:slice_nhwc");
    EXPECT_EQ(kernel->output_layout(0), Layout::nhwc);
    Tensor y = Tensor::empty(DType::f32, stored_shape(out_shape, Layout::nhwc));
    std::vector<Tensor> inputs = {x, i64(c.start), i64(c.end), i64(c.axis), i64(c.step)};
    kernel->run(inputs, std::span(&y, 1));
    int64_t wrong = 0;
    for (int64_t n = 0; n < out_shape[0]; ++n)
      for (int64_t ch = 0; ch < out_shape[1]; ++ch)
        for (int64_t h = 0; h < out_shape[2]; ++h)
          for (int64_t w = 0; w < out_shape[3]; ++w) {
            int64_t index[4] = {n, ch, h, w};
            index[c.axis] = taken[static_cast<size_t>(index[c.axis])];
            wrong += y.data<float>()[offset(out_shape, Layout::nhwc, n, ch, h, w)] !=
                     label(index[0], index[1], index[2], index[3]);
          }
    EXPECT_EQ(wrong, 0);
  }
}

TEST(ChannelsLastConcat, JoinsAlongEveryAxisAsTheLogicalConcatWould) {
  const Shape a{2, 3, 4, 5};
  for (int64_t axis = 0; axis < 4; ++axis) {
    SCOPED_TRACE(::testing::Message() << "axis " << axis);
    Shape b = a;
    b[static_cast<size_t>(axis)] = 2;
    Shape out = a;
    out[static_cast<size_t>(axis)] += 2;
    Attributes attributes;
    attributes.set_int("axis", axis);
    KernelRequest request;
    request.op.op_type = "Concat";
    request.op.opset = 13;
    request.op.attributes = &attributes;
    request.op.inputs = {TensorInfo{DType::f32, a, {}}, TensorInfo{DType::f32, b, {}}};
    request.input_layouts = {Layout::nhwc, Layout::nhwc};
    const auto kernel = native_kernel(request, TensorInfo{DType::f32, out, {}});
    ASSERT_NE(kernel, nullptr);
    EXPECT_EQ(kernel->name(), "native:concat_nhwc");
    EXPECT_EQ(kernel->input_layout(1), Layout::nhwc);
    // Part b's elements are labelled like a's plus 500000, so every element says where it came from.
    Tensor part_b = labelled(b, Layout::nhwc);
    for (float& value : std::span(part_b.data<float>(), static_cast<size_t>(part_b.numel()))) value += 500000;
    const std::vector<Tensor> inputs = {labelled(a, Layout::nhwc), part_b};
    Tensor y = Tensor::empty(DType::f32, stored_shape(out, Layout::nhwc));
    kernel->run(inputs, std::span(&y, 1));
    int64_t wrong = 0;
    for (int64_t n = 0; n < out[0]; ++n)
      for (int64_t c = 0; c < out[1]; ++c)
        for (int64_t h = 0; h < out[2]; ++h)
          for (int64_t w = 0; w < out[3]; ++w) {
            int64_t index[4] = {n, c, h, w};
            const bool from_b = index[axis] >= a[static_cast<size_t>(axis)];
            if (from_b) index[axis] -= a[static_cast<size_t>(axis)];
            const float expected =
                label(index[0], index[1], index[2], index[3]) + (from_b ? 500000.0f : 0.0f);
            wrong += y.data<float>()[offset(out, Layout::nhwc, n, c, h, w)] != expected;
          }
    EXPECT_EQ(wrong, 0);
  }
}

}  // namespace
}  // namespace kiln
