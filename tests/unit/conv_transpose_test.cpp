// ConvTranspose (1-D, 2-D and 3-D, groups, strides, dilations, pads, output_padding, output_shape,
// auto_pad) against a plain-loop reference written from the ONNX spec: every input pixel scatters
// its kernel patch, out[n, g*Mg+m, i*s + k*d - pad_begin] += x[n, g*Cg+c, i] * w[g*Cg+c, m, k],
// onto the bias; the output's size and begin pads are written out per case from the spec's formulas
// (full = s*(in-1) + output_padding + (k-1)*d + 1, cropped by pads, or padded/cropped to
// output_shape). Col2Im (opset 18) against the same scatter over the patches its input holds.
// The oneDNN deconvolution against the native kernel is in onednn_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::int_attr;
using testing::ints_attr;
using testing::OpRun;
using testing::run_op;
using testing::sample_tensor;
using testing::string_attr;
using testing::unravel;

Tensor i64s(std::vector<int64_t> values) {
  const auto count = static_cast<int64_t>(values.size());
  return Tensor::from_vector(values, {count});
}

void expect_close(const Tensor& actual, const Shape& shape, const std::vector<double>& expected,
                  const std::string& what, double tolerance = 1e-5) {
  ASSERT_EQ(actual.dtype(), DType::f32) << what;
  ASSERT_EQ(actual.shape(), shape) << what;
  ASSERT_EQ(static_cast<size_t>(actual.numel()), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual.data<float>()[i], expected[i], tolerance * std::max(1.0, std::fabs(expected[i])))
        << what << " [" << i << "]";
  }
}

void expect_error(const OpRun& run, ErrorKind kind, const std::string& mentions) {
  try {
    run_op(run);
    FAIL() << run.op_type << " accepted a bad node (expected an error mentioning '" << mentions << "')";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), kind) << error.what();
    EXPECT_NE(std::string(error.what()).find(mentions), std::string::npos) << error.what();
  }
}

// ---- ConvTranspose -------------------------------------------------------------------------------

struct ConvTransposeCase {
  Shape x;                      // N, C, spatial...
  int64_t out_per_group;        // W's dim 1
  std::vector<int64_t> kernel;  // W's spatial dims
  int64_t group = 1;
  // Attributes; empty ones are left out (the defaults).
  std::vector<int64_t> strides, dilations, pads, output_padding, output_shape;
  std::string auto_pad;
  // What the spec's formulas give: the output's spatial dims and the pads cropped at the begin
  // (negative: the output extends before the first patch, where only the bias reaches).
  std::vector<int64_t> out_spatial;
  std::vector<int64_t> pads_begin;
  bool bias = true;

  std::string describe() const {
    std::ostringstream out;
    out << "x " << shape_to_string(x) << " kernel " << shape_to_string(kernel) << " group " << group;
    if (!strides.empty()) out << " strides " << shape_to_string(strides);
    if (!dilations.empty()) out << " dilations " << shape_to_string(dilations);
    if (!pads.empty()) out << " pads " << shape_to_string(pads);
    if (!output_padding.empty()) out << " output_padding " << shape_to_string(output_padding);
    if (!output_shape.empty()) out << " output_shape " << shape_to_string(output_shape);
    if (!auto_pad.empty()) out << " " << auto_pad;
    if (!bias) out << " no bias";
    return out.str();
  }
};

OpRun conv_transpose_run(const ConvTransposeCase& c) {
  OpRun run;
  run.op_type = "ConvTranspose";
  run.opset = 11;
  Shape w = {c.x[1], c.out_per_group};
  w.insert(w.end(), c.kernel.begin(), c.kernel.end());
  run.inputs = {sample_tensor(c.x, -2, 2, 1), sample_tensor(w, -1, 1, 2)};
  if (c.bias) run.inputs.push_back(sample_tensor({c.out_per_group * c.group}, -1, 1, 3));
  run.attributes.set("group", int_attr(c.group));
  const std::pair<const char*, const std::vector<int64_t>*> lists[] = {{"strides", &c.strides},
                                                                       {"dilations", &c.dilations},
                                                                       {"pads", &c.pads},
                                                                       {"output_padding", &c.output_padding},
                                                                       {"output_shape", &c.output_shape}};
  for (const auto& [name, values] : lists) {
    if (!values->empty()) run.attributes.set(name, ints_attr(*values));
  }
  if (!c.auto_pad.empty()) run.attributes.set("auto_pad", string_attr(c.auto_pad));
  return run;
}

// The scatter the spec defines, in double; `out` gets the output's shape.
std::vector<double> reference_conv_transpose(const OpRun& run, const ConvTransposeCase& c, Shape& out) {
  const Tensor& x = run.inputs[0];
  const Tensor& w = run.inputs[1];
  const size_t rank = c.kernel.size();
  const int64_t batch = c.x[0];
  const int64_t in_per_group = c.x[1] / c.group;
  const int64_t out_channels = c.out_per_group * c.group;
  const std::vector<int64_t> strides = c.strides.empty() ? std::vector<int64_t>(rank, 1) : c.strides;
  const std::vector<int64_t> dilations = c.dilations.empty() ? std::vector<int64_t>(rank, 1) : c.dilations;
  const Shape in_spatial(c.x.begin() + 2, c.x.end());
  out = {batch, out_channels};
  out.insert(out.end(), c.out_spatial.begin(), c.out_spatial.end());
  const int64_t plane = checked_numel(c.out_spatial);
  const int64_t pixels = checked_numel(in_spatial);
  const int64_t taps = checked_numel(c.kernel);
  std::vector<double> y(static_cast<size_t>(checked_numel(out)), 0.0);
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t oc = 0; oc < out_channels; ++oc) {
      const double b = c.bias ? run.inputs[2].double_at(oc) : 0.0;
      for (int64_t o = 0; o < plane; ++o) y[static_cast<size_t>((n * out_channels + oc) * plane + o)] = b;
    }
    for (int64_t g = 0; g < c.group; ++g) {
      for (int64_t ci = 0; ci < in_per_group; ++ci) {
        const int64_t channel = g * in_per_group + ci;
        for (int64_t m = 0; m < c.out_per_group; ++m) {
          const int64_t oc = g * c.out_per_group + m;
          for (int64_t p = 0; p < pixels; ++p) {
            const std::vector<int64_t> i = unravel(p, in_spatial);
            const double value = x.double_at((n * c.x[1] + channel) * pixels + p);
            for (int64_t t = 0; t < taps; ++t) {
              const std::vector<int64_t> k = unravel(t, c.kernel);
              int64_t flat = 0;
              bool inside = true;
              for (size_t d = 0; d < rank; ++d) {
                const int64_t o = i[d] * strides[d] + k[d] * dilations[d] - c.pads_begin[d];
                inside = inside && o >= 0 && o < c.out_spatial[d];
                flat = flat * c.out_spatial[d] + o;
              }
              if (!inside) continue;
              const double weight = w.double_at((channel * c.out_per_group + m) * taps + t);
              y[static_cast<size_t>((n * out_channels + oc) * plane + flat)] += value * weight;
            }
          }
        }
      }
    }
  }
  return y;
}

void expect_matches_reference(const ConvTransposeCase& c) {
  const OpRun run = conv_transpose_run(c);
  Shape out;
  const std::vector<double> expected = reference_conv_transpose(run, c, out);
  expect_close(run_op(run).at(0), out, expected, c.describe());
}

TEST(ConvTransposeOps, OneDimensional) {
  // full = 2 * 4 + 3 = 11, cropped 1 at the begin.
  expect_matches_reference({{2, 2, 5}, 3, {3}, 1, {2}, {}, {1, 0}, {}, {}, "", {10}, {1}});
  // A dilated kernel with output_padding: 3 * 3 + 2 + (2 - 1) * 2 + 1 = 14 (2 < stride 3).
  expect_matches_reference({{1, 2, 4}, 2, {2}, 1, {3}, {2}, {}, {2}, {}, "", {14}, {0}});
  // output_padding and output_shape together: the full output 2 * 2 + 1 + 3 = 8 is output_shape.
  expect_matches_reference({{2, 1, 3}, 2, {3}, 1, {2}, {}, {}, {1}, {8}, "", {8}, {0}});
}

TEST(ConvTransposeOps, TwoDimensionalWithGroupsStridesDilationsAndPads) {
  // Plain: stride 1, pads 1 keep 4x4.
  expect_matches_reference({{1, 3, 4, 4}, 2, {3, 3}, 1, {}, {}, {1, 1, 1, 1}, {}, {}, "", {4, 4}, {1, 1}});
  // Two groups, stride (2, 1), dilation (1, 2), asymmetric pads, output_padding in H:
  // H: 2 * 3 + 1 + 3 - 1 = 9; W: 2 + (2 - 1) * 2 + 1 - 1 = 4.
  expect_matches_reference(
      {{2, 4, 4, 3}, 2, {3, 2}, 2, {2, 1}, {1, 2}, {1, 0, 0, 1}, {1, 0}, {}, "", {9, 4}, {1, 0}});
  // Stride 2 with kernel 2 (patches tile the output exactly) and no bias.
  ConvTransposeCase tiled{{1, 2, 3, 2}, 3, {2, 2}, 1, {2, 2}, {}, {}, {}, {}, "", {6, 4}, {0, 0}};
  tiled.bias = false;
  expect_matches_reference(tiled);
  // Depthwise-like: as many groups as channels, one output channel each.
  // H: 2 * 2 + 1 + 3 - 1 = 7; W: 8.
  expect_matches_reference(
      {{1, 3, 3, 3}, 1, {3, 3}, 3, {2, 2}, {}, {1, 0, 0, 0}, {1, 1}, {}, "", {7, 8}, {1, 0}});
}

TEST(ConvTransposeOps, ThreeDimensional) {
  // D: 1 + 2 = 3; H: 2 * 2 + 2 - 1 = 5; W: 2 * 1 + 3 - 1 = 4.
  expect_matches_reference({{2, 2, 2, 3, 2},
                            2,
                            {2, 2, 3},
                            1,
                            {1, 2, 2},
                            {},
                            {0, 1, 0, 0, 0, 1},
                            {},
                            {},
                            "",
                            {3, 5, 4},
                            {0, 1, 0}});
  // Two groups; output_padding 1 in H is allowed by the dilation 2 there although the stride is 1.
  // D: 2 + 1 + 2 = 5; H: 1 + 1 + 3 = 5; W: 1 + 2 = 3.
  expect_matches_reference(
      {{1, 4, 2, 2, 2}, 1, {2, 2, 2}, 2, {2, 1, 1}, {1, 2, 1}, {}, {1, 1, 0}, {}, "", {5, 5, 3}, {0, 0, 0}});
}

TEST(ConvTransposeOps, OutputShapeDecidesThePads) {
  // x 3x3, kernel 3, stride 2: the full output is 7x7.
  // Smaller by 2 (H) and equal (W): one pixel cropped at each side of H.
  expect_matches_reference({{1, 2, 3, 3}, 2, {3, 3}, 1, {2, 2}, {}, {}, {}, {5, 7}, "", {5, 7}, {1, 0}});
  // Larger: by 1 in H (the extra row at the end, as in ONNX's test_convtranspose_output_shape) and
  // by 2 in W (a column before and after); where no patch reaches, the output is the bias.
  expect_matches_reference({{2, 2, 3, 3}, 1, {3, 3}, 1, {2, 2}, {}, {}, {}, {8, 9}, "", {8, 9}, {0, -1}});
  // Explicit pads that agree with output_shape are the ones applied (all 2 at the begin here).
  expect_matches_reference(
      {{1, 2, 3, 3}, 2, {3, 3}, 1, {2, 2}, {}, {2, 0, 0, 0}, {}, {5, 7}, "", {5, 7}, {2, 0}});
  // With auto_pad, an odd difference goes to the end (SAME_UPPER) or the begin (SAME_LOWER).
  expect_matches_reference(
      {{1, 2, 3, 3}, 1, {3, 3}, 1, {2, 2}, {}, {}, {}, {6, 6}, "SAME_UPPER", {6, 6}, {0, 0}});
  expect_matches_reference(
      {{1, 2, 3, 3}, 1, {3, 3}, 1, {2, 2}, {}, {}, {}, {6, 6}, "SAME_LOWER", {6, 6}, {1, 1}});
}

TEST(ConvTransposeOps, OutputShapeLargerThanTheFullOutputGetsOnlyTheBias) {
  // 1x1 input, 1x1 kernel: the full output is one pixel; output_shape 3 puts it in the middle.
  OpRun run;
  run.op_type = "ConvTranspose";
  run.opset = 11;
  run.attributes.set("output_shape", ints_attr({3, 3}));
  run.inputs = {Tensor::from_vector<float>({2}, {1, 1, 1, 1}), Tensor::from_vector<float>({3}, {1, 1, 1, 1}),
                Tensor::from_vector<float>({0.5f}, {1})};
  const Tensor y = run_op(run).at(0);
  ASSERT_EQ(y.shape(), (Shape{1, 1, 3, 3}));
  const std::vector<float> expected = {0.5f, 0.5f, 0.5f, 0.5f, 6.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_FLOAT_EQ(y.data<float>()[i], expected[i]) << i;
}

TEST(ConvTransposeOps, AutoPad) {
  // SAME: output = input * stride. x 3x3, kernel 3, stride 2: full 7, one to crop.
  expect_matches_reference(
      {{2, 2, 3, 3}, 2, {3, 3}, 1, {2, 2}, {}, {}, {}, {}, "SAME_UPPER", {6, 6}, {0, 0}});
  expect_matches_reference(
      {{2, 2, 3, 3}, 2, {3, 3}, 1, {2, 2}, {}, {}, {}, {}, "SAME_LOWER", {6, 6}, {1, 1}});
  // Stride 1, kernel 4x2: 3 to crop in H (1 before, 2 after; SAME_LOWER the other way), 1 in W.
  expect_matches_reference({{1, 2, 4, 5}, 1, {4, 2}, 1, {}, {}, {}, {}, {}, "SAME_UPPER", {4, 5}, {1, 0}});
  expect_matches_reference({{1, 2, 4, 5}, 1, {4, 2}, 1, {}, {}, {}, {}, {}, "SAME_LOWER", {4, 5}, {2, 1}});
  // Two groups under SAME_UPPER, 1-D: full 2 * 4 + 3 = 11, output 10.
  expect_matches_reference({{1, 4, 5}, 2, {3}, 2, {2}, {}, {}, {}, {}, "SAME_UPPER", {10}, {0}});
  // VALID: no pads, the full output.
  expect_matches_reference({{2, 2, 3, 3}, 2, {3, 3}, 1, {2, 2}, {}, {}, {}, {}, "VALID", {7, 7}, {0, 0}});
}

TEST(ConvTransposeOps, Errors) {
  ConvTransposeCase base{{1, 4, 3, 3}, 2, {3, 3}, 1, {2, 2}, {}, {}, {}, {}, "", {7, 7}, {0, 0}};
  {
    // Full 7; output_shape 6 needs pads summing to 1, explicit pads give 2.
    ConvTransposeCase c = base;
    c.pads = {1, 1, 1, 1};
    c.output_shape = {6, 6};
    expect_error(conv_transpose_run(c), ErrorKind::invalid_argument, "contradicts pads");
  }
  {
    ConvTransposeCase c = base;
    c.output_padding = {2, 0};  // not smaller than stride 2 (dilation 1)
    expect_error(conv_transpose_run(c), ErrorKind::invalid_model,
                 "output_padding 2 in dim 0 must be smaller than the stride or the dilation");
  }
  {
    ConvTransposeCase c = base;
    c.strides = {1, 1};
    c.dilations = {2, 2};
    c.output_padding = {0, 2};  // not smaller than dilation 2 (stride 1)
    expect_error(conv_transpose_run(c), ErrorKind::invalid_model, "output_padding 2 in dim 1");
  }
  {
    OpRun run = conv_transpose_run(base);
    run.inputs[1] = sample_tensor({3, 2, 3, 3});  // dim 0 must be X's 4 channels
    expect_error(run, ErrorKind::invalid_argument, "must have X's 4 input channels in dim 0");
  }
  {
    OpRun run = conv_transpose_run(base);
    run.attributes.set("group", int_attr(3));  // 4 channels
    expect_error(run, ErrorKind::invalid_model, "group 3 must divide input channels 4");
  }
  {
    OpRun run = conv_transpose_run(base);
    run.inputs[2] = sample_tensor({3});  // 2 output channels
    expect_error(run, ErrorKind::invalid_argument, "bias must have shape [2]");
  }
  {
    ConvTransposeCase c = base;
    c.pads = {4, 0, 3, 0};  // crops all 7 rows
    expect_error(conv_transpose_run(c), ErrorKind::invalid_argument, "crop all 7 outputs of spatial dim 0");
  }
  {
    OpRun run = conv_transpose_run(base);
    run.attributes.set("kernel_shape", ints_attr({2, 2}));
    expect_error(run, ErrorKind::invalid_model, "disagrees with weights");
  }
  {
    OpRun run = conv_transpose_run(base);
    run.attributes.set("auto_pad", string_attr("SAME"));
    expect_error(run, ErrorKind::invalid_model, "auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  }
}

// ---- Col2Im --------------------------------------------------------------------------------------

struct Col2ImCase {
  Shape input;  // N, C * prod(block), L
  std::vector<int64_t> image, block, strides, dilations, pads;
};

OpRun col2im_run(const Tensor& input, const Col2ImCase& c) {
  OpRun run;
  run.op_type = "Col2Im";
  run.opset = 18;
  run.inputs = {input, i64s(c.image), i64s(c.block)};
  if (!c.strides.empty()) run.attributes.set("strides", ints_attr(c.strides));
  if (!c.dilations.empty()) run.attributes.set("dilations", ints_attr(c.dilations));
  if (!c.pads.empty()) run.attributes.set("pads", ints_attr(c.pads));
  return run;
}

// Block position l's tap k (both row-major) lands on image pixel l * stride + k * dilation - pad.
std::vector<double> reference_col2im(const Tensor& input, const Col2ImCase& c, Shape& out) {
  const size_t rank = c.image.size();
  const std::vector<int64_t> strides = c.strides.empty() ? std::vector<int64_t>(rank, 1) : c.strides;
  const std::vector<int64_t> dilations = c.dilations.empty() ? std::vector<int64_t>(rank, 1) : c.dilations;
  const std::vector<int64_t> pads = c.pads.empty() ? std::vector<int64_t>(2 * rank, 0) : c.pads;
  Shape blocks;  // block positions per dim
  for (size_t d = 0; d < rank; ++d) {
    const int64_t extent = (c.block[d] - 1) * dilations[d] + 1;
    blocks.push_back((c.image[d] + pads[d] + pads[d + rank] - extent) / strides[d] + 1);
  }
  const int64_t taps = checked_numel(c.block);
  const int64_t positions = checked_numel(blocks);
  EXPECT_EQ(positions, c.input[2]);
  const int64_t channels = c.input[1] / taps;
  const int64_t plane = checked_numel(c.image);
  out = {c.input[0], channels};
  out.insert(out.end(), c.image.begin(), c.image.end());
  std::vector<double> y(static_cast<size_t>(checked_numel(out)), 0.0);
  for (int64_t n = 0; n < c.input[0]; ++n) {
    for (int64_t ch = 0; ch < channels; ++ch) {
      for (int64_t t = 0; t < taps; ++t) {
        const std::vector<int64_t> k = unravel(t, c.block);
        for (int64_t p = 0; p < positions; ++p) {
          const std::vector<int64_t> l = unravel(p, blocks);
          int64_t flat = 0;
          bool inside = true;
          for (size_t d = 0; d < rank; ++d) {
            const int64_t o = l[d] * strides[d] + k[d] * dilations[d] - pads[d];
            inside = inside && o >= 0 && o < c.image[d];
            flat = flat * c.image[d] + o;
          }
          if (!inside) continue;
          y[static_cast<size_t>((n * channels + ch) * plane + flat)] +=
              input.double_at(((n * c.input[1]) + ch * taps + t) * positions + p);
        }
      }
    }
  }
  return y;
}

TEST(ConvTransposeOps, Col2ImSpecExample) {
  // ONNX's test_col2im: each of the 5 rows of blocks [1, 5] holds one image row, so the image is
  // the input transposed.
  const Tensor input = Tensor::from_vector<float>(
      {1, 6, 11, 16, 21, 2, 7, 12, 17, 22, 3, 8, 13, 18, 23, 4, 9, 14, 19, 24, 5, 0, 15, 20, 25}, {1, 5, 5});
  const Tensor y = run_op(col2im_run(input, {{1, 5, 5}, {5, 5}, {1, 5}, {}, {}, {}})).at(0);
  ASSERT_EQ(y.shape(), (Shape{1, 1, 5, 5}));
  const std::vector<float> expected = {1,  2,  3,  4,  5,  6,  7,  8,  9,  0,  11, 12, 13,
                                       14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(y.data<float>()[i], expected[i]) << i;
}

TEST(ConvTransposeOps, Col2ImMatchesReference) {
  const Col2ImCase cases[] = {
      // Overlapping 2x2 blocks, stride 1: interior pixels sum four patches.
      {{2, 8, 9}, {4, 4}, {2, 2}, {}, {}, {}},
      // Strided, dilated and padded: blocks (5 + 1 - 2) / 2 + 1 = 3 by (6 + 1 - 3) + 1 = 5.
      {{2, 8, 15}, {5, 6}, {2, 2}, {2, 1}, {1, 2}, {1, 0, 0, 1}},
      // 1-D: (7 - 3) / 2 + 1 = 3 blocks.
      {{1, 6, 3}, {7}, {3}, {2}, {}, {}},
      // 3-D, padded: 2 x 2 x 3 blocks of [2, 2, 1].
      {{1, 4, 12}, {3, 3, 3}, {2, 2, 1}, {2, 2, 1}, {}, {1, 0, 0, 0, 1, 0}},
  };
  for (const Col2ImCase& c : cases) {
    const Tensor input = sample_tensor(c.input, -2, 2, 4);
    Shape out;
    const std::vector<double> expected = reference_col2im(input, c, out);
    expect_close(run_op(col2im_run(input, c)).at(0), out, expected,
                 "input " + shape_to_string(c.input) + " image " + shape_to_string(c.image) + " block " +
                     shape_to_string(c.block));
  }
}

TEST(ConvTransposeOps, Col2ImErrors) {
  const Col2ImCase good{{1, 8, 9}, {4, 4}, {2, 2}, {}, {}, {}};
  {
    OpRun run = col2im_run(sample_tensor({1, 8, 9, 1}), good);
    expect_error(run, ErrorKind::invalid_argument,
                 "Col2Im input must have shape [N, C * prod(block_shape), L]");
  }
  {
    // 9 block positions for a 4x4 image and 2x2 blocks, not 8.
    OpRun run = col2im_run(sample_tensor({1, 8, 8}), good);
    expect_error(run, ErrorKind::invalid_argument, "must be [N, C * 4, 9]");
  }
  {
    // 7 is not a multiple of the 4 taps of a block.
    OpRun run = col2im_run(sample_tensor({1, 7, 9}), good);
    expect_error(run, ErrorKind::invalid_argument, "must be [N, C * 4, 9]");
  }
  {
    Col2ImCase c = good;
    c.block = {2};
    expect_error(col2im_run(sample_tensor({1, 8, 9}), c), ErrorKind::invalid_argument,
                 "block_shape has 1 dims, image_shape 2");
  }
  {
    Col2ImCase c = good;
    c.block = {5, 2};  // taller than the image
    expect_error(col2im_run(sample_tensor({1, 10, 3}), c), ErrorKind::invalid_argument,
                 "block of extent 5 does not fit image dim 0");
  }
  {
    Col2ImCase c = good;
    c.image = {0, 4};
    expect_error(col2im_run(sample_tensor({1, 8, 9}), c), ErrorKind::invalid_argument,
                 "image_shape must be >= 1, got 0");
  }
  {
    OpRun run = col2im_run(sample_tensor({1, 8, 9}), good);
    run.inputs[1] = Tensor::from_vector<int32_t>({4, 4}, {2});
    expect_error(run, ErrorKind::invalid_model, "image_shape must be a 1-D int64 tensor");
  }
  {
    // image_shape and block_shape must be known when planning.
    OpRun run = col2im_run(sample_tensor({1, 8, 9}), good);
    run.inputs_are_constants = false;
    EXPECT_NE(testing::error_of([&] { run_op(run); }).find("must be known at plan time"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln
