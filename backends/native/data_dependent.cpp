// Native NonZero, Compress, Unique and NonMaxSuppression. Their output sizes depend on the input
// values, so each kernel finds the size first and allocates its outputs (Kernel::sizes_outputs);
// with a plan-time constant deciding the size, Compress runs as an ordinary kernel.
#include "ops/data_dependent.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/element_visit.h"
#include "backends/native/native_backend.h"

namespace kiln::native {
namespace {

template <typename T>
bool is_nonzero(T value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value;
  } else {
    return to_compute(value) != compute_t<T>(0);
  }
}

KernelOrReason make_non_zero(const OpSpec& spec, std::span<const TensorInfo>) {
  const Shape x = spec.input(0).shape;
  return visit_dtype(spec.input(0).dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    return make_sizing_kernel("native:non_zero", [x](std::span<const Tensor> inputs, std::span<Tensor> dst) {
      const T* src = inputs[0].data<T>();
      const int64_t count = inputs[0].numel();
      int64_t found = 0;
      for (int64_t i = 0; i < count; ++i) found += is_nonzero(src[i]) ? 1 : 0;
      // A scalar reads as one element of a 1-D tensor, as numpy.nonzero does.
      const int64_t rank = std::max<int64_t>(1, static_cast<int64_t>(x.size()));
      dst[0] = Tensor::empty(DType::i64, {rank, found});
      int64_t* out = dst[0].data<int64_t>();
      int64_t column = 0;
      for (int64_t i = 0; i < count; ++i) {
        if (!is_nonzero(src[i])) continue;
        int64_t rest = i;
        for (int64_t d = rank; d-- > 0;) {
          const int64_t dim = x.empty() ? 1 : x[static_cast<size_t>(d)];
          out[d * found + column] = rest % dim;
          rest /= dim;
        }
        ++column;
      }
    });
  });
}

KernelOrReason make_compress(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const Shape x = spec.input(0).shape;
  const std::optional<int64_t> axis = compress_axis(spec);
  // Slices are [outer, length, inner] around the axis (length: every element when flattened).
  const auto a = static_cast<size_t>(axis.value_or(0));
  const int64_t outer = axis ? product(x, 0, a) : 1;
  const int64_t length = axis ? x[a] : product(x, 0, x.size());
  const int64_t inner = axis ? product(x, a + 1, x.size()) : 1;
  const DType dtype = spec.input(0).dtype;
  const auto element_size = static_cast<int64_t>(dtype_size(dtype));
  const Shape planned = outputs[0].shape;
  auto select = [=](std::span<const Tensor> inputs, Tensor& out) {
    const bool* condition = inputs[1].data<bool>();
    const int64_t given = inputs[1].numel();
    KILN_CHECK(given <= length, invalid_argument, "Compress condition has ", given, " entries for ", length,
               " slices");
    const auto slice_bytes = static_cast<size_t>(inner * element_size);
    const char* src = static_cast<const char*>(inputs[0].raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < given; ++j) {
        if (!condition[j]) continue;
        std::memcpy(dst, src + static_cast<size_t>((o * length + j) * inner * element_size), slice_bytes);
        dst += slice_bytes;
      }
    }
  };
  if (spec.input(1).is_constant()) {
    return make_kernel("native:compress", [select](std::span<const Tensor> inputs, std::span<Tensor> dst) {
      select(inputs, dst[0]);
    });
  }
  return make_sizing_kernel("native:compress", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    int64_t selected = 0;
    for (int64_t j = 0; j < std::min(length, inputs[1].numel()); ++j)
      selected += inputs[1].data<bool>()[j] ? 1 : 0;
    Shape shape = planned;
    shape[axis ? a : 0] = selected;
    dst[0] = Tensor::empty(dtype, shape);
    select(inputs, dst[0]);
  });
}

// A strict order with NaN after every number and equal to itself, so NaNs form one group (as
// numpy.unique gives them) instead of breaking the sort.
template <typename V>
bool value_less(V a, V b) {
  if constexpr (std::is_floating_point_v<V>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

// Unique over items: the elements of the flattened input, or its slices along an axis. Items are
// compared value by value; sorted output orders them ascending (slices lexicographically),
// otherwise by first occurrence.
template <typename T>
void unique_items(const Tensor& x, std::span<Tensor> dst, const Shape& shape, std::optional<int64_t> axis,
                  bool sorted) {
  const auto a = static_cast<size_t>(axis.value_or(0));
  const int64_t outer = axis ? product(shape, 0, a) : 1;
  const int64_t items = axis ? shape[a] : x.numel();
  const int64_t inner = axis ? product(shape, a + 1, shape.size()) : 1;
  const T* src = x.data<T>();
  // Item i's k-th value (k over outer x inner).
  auto value = [&](int64_t i, int64_t k) { return src[((k / inner) * items + i) * inner + k % inner]; };
  const int64_t width = outer * inner;
  auto less = [&](int64_t i, int64_t j) {
    for (int64_t k = 0; k < width; ++k) {
      const auto vi = value(i, k);
      const auto vj = value(j, k);
      if (value_less(vi, vj)) return true;
      if (value_less(vj, vi)) return false;
    }
    return false;
  };
  std::vector<int64_t> order(static_cast<size_t>(items));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), less);
  // Groups of equal items, each led by its first occurrence (stable sort keeps it first).
  std::vector<int64_t> first;
  std::vector<int64_t> counts;
  std::vector<int64_t> group_of(static_cast<size_t>(items));
  for (size_t r = 0; r < order.size(); ++r) {
    if (r == 0 || less(order[r - 1], order[r])) {
      first.push_back(order[r]);
      counts.push_back(0);
    }
    ++counts.back();
    group_of[static_cast<size_t>(order[r])] = static_cast<int64_t>(first.size()) - 1;
  }
  std::vector<int64_t> rank(first.size());  // output position of each group
  std::iota(rank.begin(), rank.end(), int64_t{0});
  if (!sorted) {
    std::vector<int64_t> by_occurrence(first.size());
    std::iota(by_occurrence.begin(), by_occurrence.end(), int64_t{0});
    std::sort(by_occurrence.begin(), by_occurrence.end(), [&](int64_t g, int64_t h) {
      return first[static_cast<size_t>(g)] < first[static_cast<size_t>(h)];
    });
    for (size_t p = 0; p < by_occurrence.size(); ++p)
      rank[static_cast<size_t>(by_occurrence[p])] = static_cast<int64_t>(p);
  }
  const auto unique = static_cast<int64_t>(first.size());
  Shape y_shape = axis ? shape : Shape{unique};
  if (axis) y_shape[a] = unique;
  dst[0] = Tensor::empty(x.dtype(), y_shape);
  T* y = dst[0].data<T>();
  const bool want_indices = dst.size() > 1;
  const bool want_inverse = dst.size() > 2;
  const bool want_counts = dst.size() > 3;
  if (want_indices) dst[1] = Tensor::empty(DType::i64, {unique});
  if (want_inverse) dst[2] = Tensor::empty(DType::i64, {items});
  if (want_counts) dst[3] = Tensor::empty(DType::i64, {unique});
  for (int64_t g = 0; g < unique; ++g) {
    const int64_t p = rank[static_cast<size_t>(g)];
    const int64_t item = first[static_cast<size_t>(g)];
    for (int64_t k = 0; k < width; ++k) y[((k / inner) * unique + p) * inner + k % inner] = value(item, k);
    if (want_indices) dst[1].data<int64_t>()[p] = item;
    if (want_counts) dst[3].data<int64_t>()[p] = counts[static_cast<size_t>(g)];
  }
  if (want_inverse) {
    for (int64_t i = 0; i < items; ++i)
      dst[2].data<int64_t>()[i] = rank[static_cast<size_t>(group_of[static_cast<size_t>(i)])];
  }
}

KernelOrReason make_unique(const OpSpec& spec, std::span<const TensorInfo>) {
  const Shape shape = spec.input(0).shape;
  const std::optional<int64_t> axis = unique_axis(spec);
  const bool sorted = spec.attrs().get_int("sorted", 1) != 0;
  return visit_dtype(spec.input(0).dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    if constexpr (is_half_v<T>) {
      return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                      "native Unique compares 16-bit floats only after a Cast to float32");
    } else {
      return make_sizing_kernel("native:unique", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
        unique_items<T>(inputs[0], dst, shape, axis, sorted);
      });
    }
  });
}

// ---- NonMaxSuppression ---------------------------------------------------------------------------

struct Box {
  float y1, x1, y2, x2;  // corners, ordered
};

Box read_box(const float* b, bool center_point_box) {
  if (center_point_box) {  // [x_center, y_center, width, height]
    return {b[1] - b[3] / 2, b[0] - b[2] / 2, b[1] + b[3] / 2, b[0] + b[2] / 2};
  }
  // [y1, x1, y2, x2], either diagonal
  return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

bool overlaps_more_than(const Box& a, const Box& b, float iou_threshold) {
  const float intersection_h = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
  const float intersection_w = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  if (intersection_h <= 0 || intersection_w <= 0) return false;
  const float intersection = intersection_h * intersection_w;
  const float area_a = (a.y2 - a.y1) * (a.x2 - a.x1);
  const float area_b = (b.y2 - b.y1) * (b.x2 - b.x1);
  const float union_area = area_a + area_b - intersection;
  if (area_a <= 0 || area_b <= 0 || union_area <= 0) return false;
  return intersection / union_area > iou_threshold;
}

KernelOrReason make_non_max_suppression(const OpSpec& spec, std::span<const TensorInfo>) {
  const bool center_point_box = spec.attrs().get_int("center_point_box", 0) != 0;
  const int64_t batches = spec.input(0).shape[0];
  const int64_t count = spec.input(0).shape[1];
  const int64_t classes = spec.input(1).shape[1];
  return make_sizing_kernel(
      "native:non_max_suppression", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
        auto present = [&](size_t i) { return inputs.size() > i && inputs[i].defined(); };
        const int64_t per_class = present(2) ? std::clamp<int64_t>(inputs[2].int_at(0), 0, count) : 0;
        const float iou_threshold = present(3) ? inputs[3].data<float>()[0] : 0.0f;
        const bool has_score_threshold = present(4);
        const float score_threshold = has_score_threshold ? inputs[4].data<float>()[0] : 0.0f;
        KILN_CHECK(iou_threshold >= 0 && iou_threshold <= 1, invalid_argument,
                   "NonMaxSuppression iou_threshold must be in [0, 1], got ", iou_threshold);
        const float* boxes = inputs[0].data<float>();
        const float* scores = inputs[1].data<float>();
        std::vector<int64_t> selected;  // (batch, class, box) triples
        std::vector<int64_t> candidates;
        std::vector<Box> kept;
        for (int64_t b = 0; b < batches; ++b) {
          for (int64_t c = 0; c < classes; ++c) {
            const float* class_scores = scores + (b * classes + c) * count;
            candidates.clear();
            for (int64_t i = 0; i < count; ++i) {
              if (!has_score_threshold || class_scores[i] > score_threshold) candidates.push_back(i);
            }
            // Highest score first; equal scores keep the lower index first.
            std::stable_sort(candidates.begin(), candidates.end(),
                             [&](int64_t i, int64_t j) { return class_scores[i] > class_scores[j]; });
            kept.clear();
            for (int64_t i : candidates) {
              if (static_cast<int64_t>(kept.size()) >= per_class) break;
              const Box box = read_box(boxes + (b * count + i) * 4, center_point_box);
              const bool suppressed = std::any_of(kept.begin(), kept.end(), [&](const Box& other) {
                return overlaps_more_than(box, other, iou_threshold);
              });
              if (suppressed) continue;
              kept.push_back(box);
              selected.insert(selected.end(), {b, c, i});
            }
          }
        }
        dst[0] = Tensor::empty(DType::i64, {static_cast<int64_t>(selected.size() / 3), 3});
        std::copy(selected.begin(), selected.end(), dst[0].data<int64_t>());
      });
}

constexpr KernelEntry kKernels[] = {
    {"NonZero", make_non_zero},
    {"Compress", make_compress},
    {"Unique", make_unique},
    {"NonMaxSuppression", make_non_max_suppression},
};

}  // namespace

std::span<const KernelEntry> data_dependent_kernels() {
  return kKernels;
}

}  // namespace kiln::native
