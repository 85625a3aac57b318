// Resize (opsets 10-19) and Upsample (7, 9) against a plain loop reference written from the ONNX
// spec: per output element, each dim's coordinate maps back to x_original, which nearest rounds,
// linear reads with 2 taps and cubic with 4 (Keys kernel, coefficient a), clamped at the edges;
// exclude_outside drops taps outside the input and renormalises; antialias stretches the filter by
// 1 / scale when shrinking and normalises; tf_crop_and_resize extrapolates outside the crop.
// Plus a few ONNX backend-test outputs, nearest on integer dtypes, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::float_attr;
using testing::int_attr;
using testing::ints_attr;
using testing::max_abs_diff;
using testing::OpRun;
using testing::run_op;
using testing::sample_tensor;
using testing::string_attr;

Tensor i64s(std::vector<int64_t> values) {
  const auto count = static_cast<int64_t>(values.size());
  return Tensor::from_vector(values, {count});
}

Tensor f32s(std::vector<float> values) {
  const auto count = static_cast<int64_t>(values.size());
  return Tensor::from_vector(values, {count});
}

// The kind of the kiln::Error `fn` throws (fails the test when it throws nothing).
ErrorKind error_kind_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.kind();
  }
  ADD_FAILURE() << "expected a kiln::Error";
  return ErrorKind::runtime;
}

// One Resize as a test describes it.
struct ResizeCase {
  std::vector<float> scales;   // per dim, or per entry of axes
  std::vector<int64_t> sizes;  // instead of scales
  std::vector<int64_t> axes;   // opset 18+; empty: every dim
  std::string mode = "nearest";
  std::string transform = "half_pixel";
  std::string nearest_mode = "round_prefer_floor";
  std::string policy = "stretch";  // keep_aspect_ratio_policy (opset 18+)
  float cubic_a = -0.75f;
  bool exclude_outside = false;
  bool antialias = false;
  std::vector<float> roi;  // tf_crop_and_resize: starts then ends (per dim, or per entry of axes)
  float extrapolation = 0.0f;
  int64_t opset = 19;

  std::string describe() const {
    std::ostringstream out;
    out << "opset " << opset << " mode " << mode << " " << transform;
    if (mode == "nearest") out << " " << nearest_mode;
    if (mode == "cubic") out << " a=" << cubic_a;
    if (exclude_outside) out << " exclude_outside";
    if (antialias) out << " antialias";
    if (!scales.empty()) {
      out << " scales";
      for (float s : scales) out << " " << s;
    }
    if (!sizes.empty()) out << " sizes " << shape_to_string(sizes);
    if (!axes.empty()) out << " axes " << shape_to_string(axes);
    if (policy != "stretch") out << " " << policy;
    if (!roi.empty()) {
      out << " roi";
      for (float r : roi) out << " " << r;
    }
    return out.str();
  }
};

OpRun resize_run(const Tensor& x, const ResizeCase& c) {
  OpRun run;
  run.op_type = "Resize";
  run.opset = c.opset;
  run.attributes.set("mode", string_attr(c.mode));
  run.attributes.set("coordinate_transformation_mode", string_attr(c.transform));
  run.attributes.set("nearest_mode", string_attr(c.nearest_mode));
  run.attributes.set("cubic_coeff_a", float_attr(c.cubic_a));
  run.attributes.set("exclude_outside", int_attr(c.exclude_outside ? 1 : 0));
  run.attributes.set("extrapolation_value", float_attr(c.extrapolation));
  if (c.opset >= 18) {
    run.attributes.set("antialias", int_attr(c.antialias ? 1 : 0));
    run.attributes.set("keep_aspect_ratio_policy", string_attr(c.policy));
    if (!c.axes.empty()) run.attributes.set("axes", ints_attr(c.axes));
  }
  run.inputs = {x, c.roi.empty() ? Tensor{} : f32s(c.roi), c.scales.empty() ? Tensor{} : f32s(c.scales)};
  if (!c.sizes.empty()) run.inputs.push_back(i64s(c.sizes));
  return run;
}

// ---- The reference -------------------------------------------------------------------------------

// Per dim, the scale the coordinate transforms divide by and the output length.
struct ResizeTarget {
  std::vector<double> scales;       // exact (sizes / input for sizes)
  std::vector<float> float_scales;  // the same held in float32
  Shape out;
};

ResizeTarget target_of(const Shape& in, const ResizeCase& c) {
  const auto rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes = c.axes;
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  for (int64_t& axis : axes) {
    if (axis < 0) axis += rank;
  }
  ResizeTarget t;
  t.scales.assign(in.size(), 1.0);
  t.float_scales.assign(in.size(), 1.0f);
  t.out = in;
  if (!c.scales.empty()) {
    // output = floor(input * scale)
    for (size_t i = 0; i < axes.size(); ++i) {
      const auto d = static_cast<size_t>(axes[i]);
      t.float_scales[d] = c.scales[i];
      t.scales[d] = static_cast<double>(c.scales[i]);
      t.out[d] = static_cast<int64_t>(std::floor(static_cast<double>(in[d]) * t.scales[d]));
    }
    return t;
  }
  if (c.policy == "stretch") {
    for (size_t i = 0; i < axes.size(); ++i) {
      const auto d = static_cast<size_t>(axes[i]);
      t.scales[d] = static_cast<double>(c.sizes[i]) / static_cast<double>(in[d]);
      t.float_scales[d] = static_cast<float>(t.scales[d]);
      t.out[d] = c.sizes[i];
    }
    return t;
  }
  // keep_aspect_ratio_policy: one scale for every listed dim (the smallest ratio for not_larger, the
  // largest for not_smaller); output = round_half_up(scale * input).
  double scale = c.policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0.0;
  for (size_t i = 0; i < axes.size(); ++i) {
    const double ratio =
        static_cast<double>(c.sizes[i]) / static_cast<double>(in[static_cast<size_t>(axes[i])]);
    scale = c.policy == "not_larger" ? std::min(scale, ratio) : std::max(scale, ratio);
  }
  for (int64_t axis : axes) {
    const auto d = static_cast<size_t>(axis);
    t.scales[d] = scale;
    t.float_scales[d] = static_cast<float>(scale);
    t.out[d] = static_cast<int64_t>(std::floor(scale * static_cast<double>(in[d]) + 0.5));
  }
  return t;
}

// The spec's coordinate_transformation_mode formulas, evaluated in T. As in ONNX's reference, the
// resized length is input * scale (before rounding); `out` is the integer output length.
template <typename T>
T original_x(const std::string& transform, int64_t x, T scale, int64_t in, int64_t out, T roi_start,
             T roi_end) {
  const auto xr = static_cast<T>(x);
  const auto length = static_cast<T>(in);
  const T resized = length * scale;
  const T half = static_cast<T>(0.5);
  const T one = static_cast<T>(1);
  if (transform == "half_pixel") return (xr + half) / scale - half;
  if (transform == "half_pixel_symmetric") {
    const T adjustment = static_cast<T>(out) / resized;
    const T center = length / 2;
    const T offset = center * (one - adjustment);
    return offset + (xr + half) / scale - half;
  }
  if (transform == "pytorch_half_pixel") return resized > one ? (xr + half) / scale - half : T(0);
  if (transform == "align_corners") return resized == one ? T(0) : xr * (length - one) / (resized - one);
  if (transform == "asymmetric") return xr / scale;
  if (transform == "tf_half_pixel_for_nn") return (xr + half) / scale;
  if (transform == "tf_crop_and_resize") {
    return resized > one
               ? roi_start * (length - one) + xr * (roi_end - roi_start) * (length - one) / (resized - one)
               : half * (roi_start + roi_end) * (length - one);
  }
  ADD_FAILURE() << "unknown transform " << transform;
  return T(0);
}

// nearest_mode; "simple" is Upsample's and Resize-10's: floor when enlarging, ceil when shrinking.
int64_t round_nearest(double x, const std::string& mode, bool shrinking) {
  const double lower = std::floor(x);
  const double fraction = x - lower;
  double picked = lower;
  if (mode == "round_prefer_floor") {
    picked = fraction <= 0.5 ? lower : lower + 1;
  } else if (mode == "round_prefer_ceil") {
    picked = fraction < 0.5 ? lower : lower + 1;
  } else if (mode == "floor") {
    picked = lower;
  } else if (mode == "ceil") {
    picked = std::ceil(x);
  } else {
    picked = shrinking ? std::ceil(x) : lower;
  }
  return static_cast<int64_t>(picked);
}

// Keys' cubic convolution kernel with coefficient a, at distance t.
double keys(double t, double a) {
  t = std::fabs(t);
  if (t <= 1) return (a + 2) * t * t * t - (a + 3) * t * t + 1;
  if (t < 2) return a * t * t * t - 5 * a * t * t + 8 * a * t - 4 * a;
  return 0;
}

// Nearest rounding and the crop's inside/outside test jump where x_original crosses a half or whole
// integer. Within rounding error of one (3 / 0.6f is 4.9999998 in double but 5 in float32, and
// 2 / (4 / 7.0) is 3.5 in double but 3.4999998 with the scale in float32), float32 implementations
// legitimately land on either side; there the reference decides with the spec's formula evaluated
// in float32. Exact ties (scales like 2 or 1.5) are exact in float32 too, so the rules for ties stay
// tested.
bool near_boundary(double x) {
  return std::fabs(x - std::round(2 * x) / 2) < 1e-4;
}

// One output coordinate of one dim: the input indices it reads (clamped) with their weights.
struct ReferenceTaps {
  bool outside = false;  // tf_crop_and_resize: outside the input, the output is extrapolation_value
  std::vector<std::pair<int64_t, double>> taps;
};

ReferenceTaps reference_taps(const ResizeCase& c, int64_t x, int64_t in, int64_t out, double scale,
                             float float_scale, float roi_start, float roi_end,
                             const std::string& nearest_mode) {
  ReferenceTaps result;
  const double xo = original_x<double>(c.transform, x, scale, in, out, roi_start, roi_end);
  double decide = xo;
  if (near_boundary(xo)) {
    decide = static_cast<double>(original_x<float>(c.transform, x, float_scale, in, out, roi_start, roi_end));
  }
  if (c.transform == "tf_crop_and_resize" && (decide < 0 || decide > static_cast<double>(in - 1))) {
    result.outside = true;
    return result;
  }
  if (c.mode == "nearest") {
    const int64_t index = round_nearest(decide, nearest_mode, scale < 1);
    result.taps.emplace_back(std::clamp<int64_t>(index, 0, in - 1), 1.0);
    return result;
  }
  // The taps left of x_original come first: ratio is in (0, 1], an integer x_original counting as
  // the right end of the interval to its left.
  const bool cubic = c.mode == "cubic";
  const double lower = std::floor(xo);
  const double ratio = xo == lower ? 1.0 : xo - lower;
  const auto left = static_cast<int64_t>(xo == lower ? lower - 1 : lower);
  // Antialiasing when shrinking: the kernel stretched by 1 / scale, over as many taps as it covers.
  const double filter = c.antialias && scale < 1 ? scale : 1.0;
  const double support = cubic ? 2.0 : 1.0;
  const int64_t first = static_cast<int64_t>(std::floor(-support / filter)) + 1;
  const int64_t end = 2 - first;
  double sum = 0;
  for (int64_t i = first; i < end; ++i) {
    const double t = (static_cast<double>(i) - ratio) * filter;
    double weight = cubic ? keys(t, static_cast<double>(c.cubic_a)) : std::max(0.0, 1.0 - std::fabs(t));
    const int64_t j = left + i;
    if (c.exclude_outside && (j < 0 || j >= in)) weight = 0;
    sum += weight;
    result.taps.emplace_back(std::clamp<int64_t>(j, 0, in - 1), weight);
  }
  if (c.antialias || c.exclude_outside) {
    for (auto& tap : result.taps) tap.second /= sum;
  }
  return result;
}

// The resized tensor the slow way; `out` gets its shape. `nearest_mode` overrides c.nearest_mode
// (Upsample, which only enlarges, floors).
std::vector<double> reference_resize(const std::vector<double>& x, const Shape& in, const ResizeCase& c,
                                     Shape& out, const std::string& nearest_mode = "") {
  const ResizeTarget target = target_of(in, c);
  out = target.out;
  const size_t rank = in.size();
  // The roi per dim (a roi for axes only covers those; the other dims keep [0, 1]).
  std::vector<float> roi_start(rank, 0.0f), roi_end(rank, 1.0f);
  if (!c.roi.empty()) {
    std::vector<int64_t> axes = c.axes;
    if (axes.empty()) {
      for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
    }
    for (size_t i = 0; i < axes.size(); ++i) {
      const auto d = static_cast<size_t>(axes[i] < 0 ? axes[i] + static_cast<int64_t>(rank) : axes[i]);
      roi_start[d] = c.roi[i];
      roi_end[d] = c.roi[axes.size() + i];
    }
  }
  const std::string& rounding = nearest_mode.empty() ? c.nearest_mode : nearest_mode;
  std::vector<std::vector<ReferenceTaps>> per_dim(rank);
  for (size_t d = 0; d < rank; ++d) {
    for (int64_t o = 0; o < out[d]; ++o) {
      per_dim[d].push_back(reference_taps(c, o, in[d], out[d], target.scales[d], target.float_scales[d],
                                          roi_start[d], roi_end[d], rounding));
    }
  }
  std::vector<int64_t> strides(rank, 1);
  for (size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * in[d];
  int64_t total = 1;
  for (int64_t dim : out) total *= dim;
  std::vector<double> values;
  values.reserve(static_cast<size_t>(total));
  std::vector<size_t> index(rank);
  std::vector<size_t> tap(rank);
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat;
    bool outside = false;
    for (size_t d = rank; d-- > 0;) {
      index[d] = static_cast<size_t>(rest % out[d]);
      rest /= out[d];
      outside = outside || per_dim[d][index[d]].outside;
    }
    if (outside) {
      values.push_back(static_cast<double>(c.extrapolation));
      continue;
    }
    // Sum over the product of every dim's taps.
    double sum = 0;
    std::fill(tap.begin(), tap.end(), size_t{0});
    bool more = true;
    while (more) {
      double weight = 1;
      int64_t offset = 0;
      for (size_t d = 0; d < rank; ++d) {
        const auto& [source, w] = per_dim[d][index[d]].taps[tap[d]];
        weight *= w;
        offset += source * strides[d];
      }
      sum += weight * x[static_cast<size_t>(offset)];
      more = false;
      for (size_t d = rank; d-- > 0;) {
        if (++tap[d] < per_dim[d][index[d]].taps.size()) {
          more = true;
          break;
        }
        tap[d] = 0;
      }
    }
    values.push_back(sum);
  }
  return values;
}

std::vector<double> as_doubles(const Tensor& x) {
  std::vector<double> values;
  for (int64_t i = 0; i < x.numel(); ++i) values.push_back(x.double_at(i));
  return values;
}

Tensor as_float_tensor(const std::vector<double>& values, const Shape& shape) {
  std::vector<float> narrowed;
  for (double v : values) narrowed.push_back(static_cast<float>(v));
  return Tensor::from_vector(narrowed, shape);
}

// Runs Resize `c` on float32 `x` and compares with the reference.
void expect_matches_reference(const Tensor& x, const ResizeCase& c) {
  SCOPED_TRACE(c.describe() + ", input " + shape_to_string(x.shape()));
  Shape out;
  const std::vector<double> expected = reference_resize(as_doubles(x), x.shape(), c, out);
  const Tensor y = run_op(resize_run(x, c)).at(0);
  ASSERT_EQ(y.shape(), out);
  EXPECT_LT(max_abs_diff(y, as_float_tensor(expected, out)), 1e-5);
}

const char* const kTransforms[] = {"half_pixel", "pytorch_half_pixel",   "align_corners",
                                   "asymmetric", "tf_half_pixel_for_nn", "half_pixel_symmetric"};
const char* const kNearestModes[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};

// Every interpolation the grid tries: nearest with each rounding, linear (also with
// exclude_outside), cubic, and cubic with another coefficient and exclude_outside.
std::vector<ResizeCase> interpolations() {
  std::vector<ResizeCase> cases;
  for (const char* rounding : kNearestModes) {
    ResizeCase c;
    c.mode = "nearest";
    c.nearest_mode = rounding;
    cases.push_back(c);
  }
  ResizeCase linear;
  linear.mode = "linear";
  cases.push_back(linear);
  linear.exclude_outside = true;
  cases.push_back(linear);
  ResizeCase cubic;
  cubic.mode = "cubic";
  cases.push_back(cubic);
  cubic.cubic_a = -0.5f;
  cubic.exclude_outside = true;
  cases.push_back(cubic);
  return cases;
}

// Every interpolation with every coordinate transform, at `base`'s size, axes and opset.
void expect_grid_matches(const Tensor& x, const ResizeCase& base) {
  for (const char* transform : kTransforms) {
    for (ResizeCase c : interpolations()) {
      c.scales = base.scales;
      c.sizes = base.sizes;
      c.axes = base.axes;
      c.policy = base.policy;
      c.opset = base.opset;
      c.transform = transform;
      expect_matches_reference(x, c);
    }
  }
}

ResizeCase with_scales(std::vector<float> scales) {
  ResizeCase c;
  c.scales = std::move(scales);
  return c;
}

ResizeCase with_sizes(std::vector<int64_t> sizes) {
  ResizeCase c;
  c.sizes = std::move(sizes);
  return c;
}

// ---- Against the reference -------------------------------------------------------------------

// 1x2x5x7, up in one dim and down in the other, by scales and by sizes.
TEST(ResizeOps, GridMatchesReference4D) {
  const Tensor x = sample_tensor({1, 2, 5, 7}, -3, 3, 1);
  expect_grid_matches(x, with_scales({1, 1, 1.6f, 0.6f}));  // 5 -> 8, 7 -> 4 (4.2)
  expect_grid_matches(x, with_scales({1, 1, 0.4f, 0.5f}));  // 5 -> 2, 7 -> 3 (3.5: rounded output)
  expect_grid_matches(x, with_scales({1, 1, 2.0f, 1.5f}));  // exact ties for the nearest modes
  expect_grid_matches(x, with_sizes({1, 2, 8, 4}));         // scales 1.6 and 4/7
  expect_grid_matches(x, with_sizes({1, 2, 3, 11}));        // scales 0.6 and 11/7
}

// The grid's first sizes at the other opsets that name coordinate transforms (half_pixel_symmetric
// is opset 19's).
TEST(ResizeOps, EarlierOpsetsMatchReference) {
  const Tensor x = sample_tensor({1, 2, 5, 7}, -3, 3, 2);
  for (int64_t opset : {11, 13, 18}) {
    for (const char* transform : kTransforms) {
      if (std::string(transform) == "half_pixel_symmetric") continue;
      for (ResizeCase c : interpolations()) {
        c.scales = {1, 1, 1.6f, 0.6f};
        c.opset = opset;
        c.transform = transform;
        expect_matches_reference(x, c);
      }
    }
  }
}

TEST(ResizeOps, ThreeAndFiveDims) {
  const Tensor x3 = sample_tensor({2, 3, 9}, -3, 3, 3);
  expect_grid_matches(x3, with_scales({1, 1, 1.7f}));  // last dim only: 9 -> 15
  expect_grid_matches(x3, with_sizes({2, 3, 4}));
  const Tensor x5 = sample_tensor({1, 2, 3, 4, 5}, -3, 3, 4);
  expect_grid_matches(x5, with_scales({1, 1, 1.5f, 0.75f, 1.4f}));  // 3 -> 4, 4 -> 3, 5 -> 6 (1.4f * 5 < 7)
}

// Opset 18's axes: scales or sizes for the listed dims only, in the order listed.
TEST(ResizeOps, AxesMatchReference) {
  const Tensor x = sample_tensor({1, 2, 5, 7}, -3, 3, 5);
  ResizeCase c = with_scales({0.6f, 1.6f});
  c.axes = {3, 2};
  expect_grid_matches(x, c);
  c = with_sizes({11});
  c.axes = {-1};
  expect_grid_matches(x, c);
  // The same as scales for every dim.
  ResizeCase axes = with_scales({0.6f, 1.6f});
  axes.axes = {3, 2};
  axes.mode = "cubic";
  ResizeCase all = with_scales({1, 1, 1.6f, 0.6f});
  all.mode = "cubic";
  const Tensor by_axes = run_op(resize_run(x, axes)).at(0);
  const Tensor by_all = run_op(resize_run(x, all)).at(0);
  ASSERT_EQ(by_axes.shape(), (Shape{1, 2, 8, 4}));
  EXPECT_EQ(max_abs_diff(by_axes, by_all), 0.0);
}

// keep_aspect_ratio_policy: one scale, min (not_larger) or max (not_smaller) of sizes / input over
// the axes; output = floor(scale * input + 0.5), and the coordinates use that scale.
TEST(ResizeOps, KeepAspectRatioMatchesReference) {
  const Tensor x = sample_tensor({1, 2, 5, 7}, -3, 3, 6);
  struct PolicyCase {
    std::vector<int64_t> axes;
    std::vector<int64_t> sizes;
    const char* policy;
    Shape expected;
  };
  const PolicyCase policies[] = {
      {{2, 3}, {8, 8}, "not_larger", {1, 2, 6, 8}},    // scale 8/7: 5 -> 5.71 -> 6
      {{2, 3}, {8, 8}, "not_smaller", {1, 2, 8, 11}},  // scale 1.6: 7 -> 11.2 -> 11
      {{2, 3}, {3, 3}, "not_larger", {1, 2, 2, 3}},    // scale 3/7: 5 -> 2.14 -> 2
      {{3, 2}, {3, 3}, "not_smaller", {1, 2, 3, 4}},   // scale 0.6: 7 -> 4.2 -> 4
  };
  for (const PolicyCase& p : policies) {
    ResizeCase c = with_sizes(p.sizes);
    c.axes = p.axes;
    c.policy = p.policy;
    Shape out;
    reference_resize(as_doubles(x), x.shape(), c, out);
    EXPECT_EQ(out, p.expected) << p.policy;
    expect_grid_matches(x, c);
  }
}

TEST(ResizeOps, AntialiasMatchesReference) {
  const Tensor x = sample_tensor({1, 2, 5, 7}, -3, 3, 7);
  const ResizeCase sizes[] = {with_scales({1, 1, 0.6f, 0.4f}), with_scales({1, 1, 0.4f, 1.6f}),
                              with_sizes({1, 2, 2, 3}), with_scales({1, 1, 0.25f, 0.3f})};
  for (const ResizeCase& size : sizes) {
    for (const char* transform : {"half_pixel", "align_corners", "pytorch_half_pixel", "asymmetric"}) {
      for (int variant = 0; variant < 4; ++variant) {
        ResizeCase c = size;
        c.opset = 18;
        c.antialias = true;
        c.transform = transform;
        c.mode = variant == 0 ? "linear" : "cubic";
        c.exclude_outside = variant == 2;
        if (variant == 3) c.cubic_a = -0.5f;
        expect_matches_reference(x, c);
      }
    }
  }
  // Antialiasing changes a downscale (and only a downscale).
  ResizeCase plain = with_scales({1, 1, 0.4f, 1.6f});
  plain.mode = "linear";
  ResizeCase smooth = plain;
  smooth.antialias = true;
  const Tensor a = run_op(resize_run(x, plain)).at(0);
  const Tensor b = run_op(resize_run(x, smooth)).at(0);
  EXPECT_GT(max_abs_diff(a, b), 1e-3);
  plain.scales = {1, 1, 1.6f, 1.4f};
  smooth.scales = plain.scales;
  EXPECT_LT(max_abs_diff(run_op(resize_run(x, plain)).at(0), run_op(resize_run(x, smooth)).at(0)), 1e-6);
}

TEST(ResizeOps, CropAndResizeMatchesReference) {
  const Tensor x = sample_tensor({1, 2, 5, 7}, -3, 3, 8);
  for (ResizeCase size :
       {with_scales({1, 1, 1.6f, 0.6f}), with_scales({1, 1, 0.4f, 0.5f}), with_sizes({1, 2, 3, 11})}) {
    for (ResizeCase c : interpolations()) {
      c.scales = size.scales;
      c.sizes = size.sizes;
      c.transform = "tf_crop_and_resize";
      c.roi = {0, 0, 0.2f, 0.1f, 1, 1, 0.9f, 1.3f};  // the last dim's crop ends outside the input
      c.extrapolation = -7.0f;
      expect_matches_reference(x, c);
    }
  }
  // A roi for the axes only.
  for (ResizeCase c : interpolations()) {
    c.scales = {0.6f, 1.6f};
    c.axes = {3, 2};
    c.transform = "tf_crop_and_resize";
    c.roi = {0.1f, 0.2f, 1.3f, 0.9f};
    c.extrapolation = -7.0f;
    c.opset = 18;
    expect_matches_reference(x, c);
  }
}

// Nearest copies elements of any dtype.
template <typename T>
void expect_nearest_copies(T offset) {
  const Shape shape{1, 2, 5, 7};
  std::vector<T> values;
  for (int64_t i = 0; i < 70; ++i) values.push_back(static_cast<T>((i * 37) % 101 + offset));
  const Tensor x = Tensor::from_vector(values, shape);
  for (ResizeCase size : {with_scales({1, 1, 1.6f, 0.6f}), with_sizes({1, 2, 3, 11})}) {
    for (const char* transform : kTransforms) {
      for (const char* rounding : kNearestModes) {
        ResizeCase c = size;
        c.transform = transform;
        c.nearest_mode = rounding;
        SCOPED_TRACE(c.describe());
        Shape out;
        const std::vector<double> expected = reference_resize(as_doubles(x), shape, c, out);
        const Tensor y = run_op(resize_run(x, c)).at(0);
        ASSERT_EQ(y.dtype(), dtype_of<T>());
        ASSERT_EQ(y.shape(), out);
        for (int64_t i = 0; i < y.numel(); ++i) {
          ASSERT_EQ(static_cast<double>(y.data<T>()[i]), expected[static_cast<size_t>(i)]) << "element " << i;
        }
      }
    }
  }
}

TEST(ResizeOps, NearestCopiesInt64AndUint8) {
  expect_nearest_copies<int64_t>(-4000000000LL);
  expect_nearest_copies<uint8_t>(uint8_t{100});
}

// ---- ONNX backend-test outputs ------------------------------------------------------------------

Tensor iota_from_one(Shape shape) {
  Tensor tensor = Tensor::empty(DType::f32, std::move(shape));
  for (int64_t i = 0; i < tensor.numel(); ++i) tensor.data<float>()[i] = static_cast<float>(i + 1);
  return tensor;
}

void expect_values_near(const Tensor& y, const std::vector<float>& expected, const std::string& what) {
  ASSERT_EQ(y.numel(), static_cast<int64_t>(expected.size())) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(y.data<float>()[i], expected[i], 1e-5) << what << " [" << i << "]";
  }
}

TEST(ResizeOps, MatchesOnnxBackendOutputs) {
  const Tensor x24 = iota_from_one({1, 1, 2, 4});
  const Tensor x44 = iota_from_one({1, 1, 4, 4});
  ResizeCase c = with_scales({1, 1, 0.6f, 0.6f});
  c.mode = "linear";
  expect_values_near(run_op(resize_run(x24, c)).at(0), {2.6666665f, 4.3333331f}, "downsample linear");
  c.mode = "nearest";
  expect_values_near(run_op(resize_run(x24, c)).at(0), {1, 3}, "downsample nearest");
  c = with_scales({1, 1, 0.8f, 0.8f});
  c.mode = "cubic";
  expect_values_near(run_op(resize_run(x44, c)).at(0),
                     {1.47119141f, 2.78125f, 4.08251953f, 6.71142578f, 8.02148438f, 9.32275391f, 11.91650391f,
                      13.2265625f, 14.52783203f},
                     "downsample cubic");
  c.cubic_a = -0.5f;
  c.exclude_outside = true;
  expect_values_near(run_op(resize_run(x44, c)).at(0),
                     {1.36812675f, 2.6695014f, 4.0133367f, 6.57362535f, 7.875f, 9.2188353f, 11.94896657f,
                      13.25034023f, 14.59417456f},
                     "downsample cubic A -0.5 exclude_outside");
  c = with_scales({1, 1, 0.6f, 0.6f});
  c.antialias = true;
  c.mode = "linear";
  expect_values_near(run_op(resize_run(x44, c)).at(0), {2.875f, 4.5f, 9.375f, 11.0f}, "linear antialias");
  c.mode = "cubic";
  expect_values_near(run_op(resize_run(x44, c)).at(0), {2.5180721f, 4.2858863f, 9.589329f, 11.357142f},
                     "cubic antialias");
  c = with_scales({1, 1, 2, 2});
  c.mode = "linear";
  c.transform = "align_corners";
  expect_values_near(run_op(resize_run(iota_from_one({1, 1, 2, 2}), c)).at(0),
                     {1, 4.0f / 3, 5.0f / 3, 2, 5.0f / 3, 2, 7.0f / 3, 8.0f / 3, 7.0f / 3, 8.0f / 3, 3,
                      10.0f / 3, 3, 10.0f / 3, 11.0f / 3, 4},
                     "upsample linear align_corners");
  c = with_scales({1, 1, 1, 0.6f});
  c.mode = "linear";
  c.transform = "half_pixel_symmetric";
  expect_values_near(run_op(resize_run(iota_from_one({1, 1, 1, 4}), c)).at(0), {1.6666666f, 3.3333333f},
                     "downsample half_pixel_symmetric");
  c.scales = {1, 1, 2.3f, 2.94f};
  expect_values_near(
      run_op(resize_run(iota_from_one({1, 1, 2, 2}), c)).at(0),
      {1.0f,        1.15986395f, 1.5f,        1.84013605f, 2.0f,        1.56521738f, 1.72508133f,
       2.06521738f, 2.40535343f, 2.56521738f, 2.43478262f, 2.59464657f, 2.93478262f, 3.27491867f,
       3.43478262f, 3.0f,        3.15986395f, 3.5f,        3.84013605f, 4.0f},
      "upsample half_pixel_symmetric");
  c = with_sizes({1, 1, 3, 3});
  c.mode = "linear";
  c.transform = "tf_crop_and_resize";
  c.roi = {0, 0, 0.4f, 0.6f, 1, 1, 0.6f, 0.8f};
  expect_values_near(run_op(resize_run(x44, c)).at(0),
                     {7.6f, 7.9f, 8.2f, 8.8f, 9.1f, 9.4f, 10.0f, 10.3f, 10.6f}, "tf_crop_and_resize");
  c.roi = {0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 1.7f};
  c.extrapolation = 10.0f;
  expect_values_near(run_op(resize_run(x44, c)).at(0), {7.6f, 10, 10, 12.4f, 10, 10, 10, 10, 10},
                     "tf_crop_and_resize extrapolation");
}

// pytorch_half_pixel maps an output of length 1 to coordinate 0; half_pixel to the centre.
TEST(ResizeOps, PytorchHalfPixelLengthOne) {
  const Tensor x = iota_from_one({1, 1, 4, 4});
  ResizeCase c = with_sizes({1, 1, 1, 1});
  c.mode = "linear";
  c.transform = "pytorch_half_pixel";
  expect_values_near(run_op(resize_run(x, c)).at(0), {1}, "pytorch_half_pixel");
  c.transform = "half_pixel";
  expect_values_near(run_op(resize_run(x, c)).at(0), {8.5f}, "half_pixel");
}

// ---- Resize-10 and Upsample: asymmetric, nearest floors when enlarging --------------------------

TEST(ResizeOps, Resize10IsAsymmetric) {
  OpRun run;
  run.op_type = "Resize";
  run.opset = 10;
  run.inputs = {iota_from_one({1, 1, 2, 4}), f32s({1, 1, 0.6f, 0.6f})};
  run.attributes.set("mode", string_attr("nearest"));
  // Shrinking rounds up (as onnxruntime does and the ONNX backend test expects).
  expect_values_near(run_op(run).at(0), {1, 3}, "Resize-10 nearest");
  run.attributes.set("mode", string_attr("linear"));
  expect_values_near(run_op(run).at(0), {1, 2.6666667f}, "Resize-10 linear");
  run.attributes.set("mode", string_attr("cubic"));
  EXPECT_NE(error_of([&] { run_op(run); }).find("mode 'cubic'"), std::string::npos);
}

OpRun upsample_run(const Tensor& x, const std::vector<float>& scales, const std::string& mode,
                   int64_t opset) {
  OpRun run;
  run.op_type = "Upsample";
  run.opset = opset;
  run.attributes.set("mode", string_attr(mode));
  run.inputs = {x};
  if (opset < 9) {
    Attribute attribute;
    attribute.type = Attribute::Type::floats;
    attribute.floats = scales;
    run.attributes.set("scales", attribute);
  } else {
    run.inputs.push_back(f32s(scales));
  }
  return run;
}

TEST(ResizeOps, UpsampleMatchesReference) {
  const Tensor x = sample_tensor({1, 2, 5, 7}, -3, 3, 9);
  const std::vector<std::vector<float>> all_scales = {{1, 1, 2, 3}, {1, 1, 1.6f, 2.5f}, {1, 2, 1.5f, 1}};
  for (int64_t opset : {7, 9}) {
    for (const std::vector<float>& scales : all_scales) {
      for (const char* mode : {"nearest", "linear"}) {
        ResizeCase c = with_scales(scales);
        c.mode = mode;
        c.transform = "asymmetric";
        SCOPED_TRACE("Upsample-" + std::to_string(opset) + " " + c.describe());
        Shape out;
        const std::vector<double> expected = reference_resize(as_doubles(x), x.shape(), c, out, "floor");
        const Tensor y = run_op(upsample_run(x, scales, mode, opset)).at(0);
        ASSERT_EQ(y.shape(), out);
        EXPECT_LT(max_abs_diff(y, as_float_tensor(expected, out)), 1e-5);
      }
    }
  }
  // The ONNX backend tests' values.
  const Tensor x22 = iota_from_one({1, 1, 2, 2});
  expect_values_near(run_op(upsample_run(x22, {1, 1, 2, 3}, "nearest", 9)).at(0),
                     {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4},
                     "Upsample nearest");
  expect_values_near(run_op(upsample_run(x22, {1, 1, 2, 2}, "linear", 7)).at(0),
                     {1, 1.5f, 2, 2, 2, 2.5f, 3, 3, 3, 3.5f, 4, 4, 3, 3.5f, 4, 4}, "Upsample linear");
  // Upsample copies any dtype too.
  const Tensor ints = Tensor::from_vector<int64_t>({7, -8}, {1, 2});
  const Tensor y = run_op(upsample_run(ints, {2, 2}, "nearest", 9)).at(0);
  ASSERT_EQ(y.shape(), (Shape{2, 4}));
  EXPECT_EQ(std::vector<int64_t>(y.data<int64_t>(), y.data<int64_t>() + 8),
            (std::vector<int64_t>{7, 7, -8, -8, 7, 7, -8, -8}));
}

// ---- Errors --------------------------------------------------------------------------------------

TEST(ResizeOps, RejectsBadScalesAndSizes) {
  const Tensor x = sample_tensor({1, 2, 5, 7});
  ResizeCase c = with_scales({1, 1, 0, 1});
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("must be a positive finite number"), std::string::npos);
  c.scales = {1, 1, -2, 1};
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("must be a positive finite number"), std::string::npos);
  c.scales = {1, 1, 1e30f, 1e30f};  // an output no int64 can count is an error, not an allocation
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("too large"), std::string::npos);
  c = with_sizes({1, 2, 0, 7});
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("must be positive"), std::string::npos);
  c = with_scales({1, 1, 2, 2});
  c.sizes = {1, 2, 10, 14};
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("not both"), std::string::npos);
  c = ResizeCase{};
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("needs either scales or sizes"),
            std::string::npos);
  OpRun bare;
  bare.op_type = "Resize";
  bare.opset = 13;
  bare.inputs = {x};
  EXPECT_NE(error_of([&] { run_op(bare); }).find("needs either scales or sizes"), std::string::npos);
  c = with_scales({2, 2});
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("has 2 entries, expected 4"), std::string::npos);
  c = with_sizes({1, 2, 3});
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("has 3 entries, expected 4"), std::string::npos);
  c = with_scales({2, 2, 2});
  c.axes = {2, 3};
  c.opset = 18;
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("expected 2"), std::string::npos);
  c = with_sizes({3, 3});
  c.axes = {2, 3};
  c.policy = "fit";
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("keep_aspect_ratio_policy 'fit'"),
            std::string::npos);
  // Upsample-7 needs its scales attribute.
  OpRun upsample;
  upsample.op_type = "Upsample";
  upsample.opset = 7;
  upsample.inputs = {x};
  EXPECT_NE(error_of([&] { run_op(upsample); }).find("scales"), std::string::npos);
}

TEST(ResizeOps, RejectsUnknownModesAndIntegerInterpolation) {
  const Tensor x = sample_tensor({1, 2, 5, 7});
  ResizeCase c = with_scales({1, 1, 2, 2});
  c.mode = "bicubic";
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("mode 'bicubic' is not one of"),
            std::string::npos);
  c = with_scales({1, 1, 2, 2});
  c.transform = "centered";
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("coordinate_transformation_mode 'centered'"),
            std::string::npos);
  c.transform = "half_pixel_symmetric";  // opset 19's
  c.opset = 18;
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("coordinate_transformation_mode"),
            std::string::npos);
  c = with_scales({1, 1, 2, 2});
  c.nearest_mode = "round_half_even";
  EXPECT_NE(error_of([&] { run_op(resize_run(x, c)); }).find("nearest_mode 'round_half_even'"),
            std::string::npos);
  // Linear and cubic interpolate floats; nearest copies integers.
  std::vector<int32_t> values(70, 3);
  const Tensor ints = Tensor::from_vector(values, {1, 2, 5, 7});
  c = with_scales({1, 1, 2, 2});
  c.mode = "linear";
  EXPECT_EQ(error_kind_of([&] { run_op(resize_run(ints, c)); }), ErrorKind::type_mismatch);
  EXPECT_NE(error_of([&] { run_op(resize_run(ints, c)); }).find("floating-point"), std::string::npos);
  c.mode = "cubic";
  EXPECT_EQ(error_kind_of([&] { run_op(resize_run(ints, c)); }), ErrorKind::type_mismatch);
  c.mode = "nearest";
  EXPECT_EQ(run_op(resize_run(ints, c)).at(0).shape(), (Shape{1, 2, 10, 14}));
}

}  // namespace
}  // namespace kiln
