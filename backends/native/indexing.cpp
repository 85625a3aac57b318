// Native GatherND, ScatterND, ScatterElements, Scatter, OneHot, TopK, CumSum, Trilu, ReverseSequence.
// Indices are data: each is checked when it is read, and one out of range is an error naming it.
#include "ops/indexing.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/element_visit.h"
#include "backends/native/native_backend.h"
#include "backends/native/strided_copy.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

int64_t index_at(const Tensor& indices, int64_t i) {
  return indices.dtype() == DType::i64 ? indices.data<int64_t>()[i] : indices.data<int32_t>()[i];
}

// Negative indices count from the end of the dim.
int64_t resolve_index(int64_t index, int64_t dim, const char* op) {
  KILN_CHECK(index >= -dim && index < dim, invalid_argument, op, " index ", index,
             " is out of range for a dim of size ", dim);
  return index < 0 ? index + dim : index;
}

std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

// A tensor seen as lines along one axis: `outer` blocks of `dim` x `inner` elements, line (o, i)
// reading elements (o * dim + j) * inner + i for j < dim.
struct AxisLines {
  int64_t outer = 1;
  int64_t dim = 1;
  int64_t inner = 1;
};

AxisLines lines_along(const Shape& shape, size_t axis) {
  return {product(shape, 0, axis), shape[axis], product(shape, axis + 1, shape.size())};
}

// Ordering for TopK: NaN counts as larger than every number (as torch.topk has it), so the order
// stays strict with NaNs present.
template <typename C>
bool greater_with_nan(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a)) return !std::isnan(b);
    if (std::isnan(b)) return false;
  }
  return a > b;
}

KernelOrReason unsupported_width(const OpSpec& spec) {
  return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                  "native " + spec.op_type + " moves 1, 2, 4 or 8-byte elements");
}

// ---- GatherND ------------------------------------------------------------------------------------

KernelOrReason make_gather_nd(const OpSpec& spec, std::span<const TensorInfo>) {
  const GatherNdParams params = gather_nd_params(spec);
  const Shape data = spec.input(0).shape;
  const Shape indices = spec.input(1).shape;
  const auto b = static_cast<size_t>(params.batch_dims);
  const auto depth = static_cast<size_t>(params.index_depth);
  const int64_t batches = product(data, 0, b);
  const int64_t batch_stride = product(data, b, data.size());
  const int64_t tuples = product(indices, b, indices.size() - 1);  // per batch
  const int64_t slice = product(data, b + depth, data.size());
  const std::vector<int64_t> strides = strides_of(data);
  const size_t element_size = dtype_size(spec.input(0).dtype);
  return make_kernel("native:gather_nd", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    const char* src = static_cast<const char*>(inputs[0].raw_data());
    char* out = static_cast<char*>(dst[0].raw_data());
    const auto slice_bytes = static_cast<size_t>(slice) * element_size;
    for (int64_t i = 0; i < batches * tuples; ++i) {
      int64_t offset = (i / tuples) * batch_stride;
      for (size_t k = 0; k < depth; ++k) {
        const size_t d = b + k;
        offset += resolve_index(
                      inputs[1].data<int64_t>()[i * static_cast<int64_t>(depth) + static_cast<int64_t>(k)],
                      data[d], "GatherND") *
                  strides[d];
      }
      std::memcpy(out + static_cast<size_t>(i) * slice_bytes,
                  src + static_cast<size_t>(offset) * element_size, slice_bytes);
    }
  });
}

// ---- ScatterND, ScatterElements, Scatter ---------------------------------------------------------

template <typename T>
void combine(T& target, T update, ScatterReduction reduction) {
  using C = compute_t<T>;
  const C a = to_compute(target);
  const C u = to_compute(update);
  switch (reduction) {
    case ScatterReduction::none:
      target = update;
      return;
    case ScatterReduction::add:
      target = from_compute<T>(a + u);
      return;
    case ScatterReduction::mul:
      target = from_compute<T>(a * u);
      return;
    case ScatterReduction::max:
      target = from_compute<T>(std::max(a, u));
      return;
    case ScatterReduction::min:
      target = from_compute<T>(std::min(a, u));
      return;
  }
}

// Visits the dtype the scatter computes in: any width without a reduction, numeric types with one.
template <typename Fn>
KernelOrReason visit_scatter_dtype(const OpSpec& spec, ScatterReduction reduction, Fn&& fn) {
  const DType dtype = spec.input(0).dtype;
  if (reduction == ScatterReduction::none) {
    if (!is_visitable_element_size(dtype_size(dtype))) return unsupported_width(spec);
    KernelOrReason result;
    visit_element_size(
        dtype_size(dtype), [&](auto tag) { result = fn(tag); }, [] {});
    return result;
  }
  if (dtype == DType::boolean)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                    "native " + spec.op_type + " reduces numeric values, not bool");
  return visit_dtype(dtype, [&](auto tag) -> KernelOrReason {
    if constexpr (std::is_same_v<decltype(tag), bool>) {
      return unsupported_width(spec);
    } else {
      return fn(tag);
    }
  });
}

KernelOrReason make_scatter_nd(const OpSpec& spec, std::span<const TensorInfo>) {
  const ScatterReduction reduction = scatter_reduction(spec);
  const Shape data = spec.input(0).shape;
  const Shape indices = spec.input(1).shape;
  const auto depth = static_cast<size_t>(indices.back());
  const int64_t count = product(indices, 0, indices.size() - 1);
  const int64_t slice = product(data, depth, data.size());
  const std::vector<int64_t> strides = strides_of(data);
  return visit_scatter_dtype(spec, reduction, [&](auto tag) {
    using T = decltype(tag);
    return make_kernel("native:scatter_nd", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
      T* out = dst[0].data<T>();
      if (out != inputs[0].data<T>()) std::memcpy(out, inputs[0].raw_data(), inputs[0].nbytes());
      const T* updates = inputs[2].data<T>();
      const int64_t* index = inputs[1].data<int64_t>();
      for (int64_t i = 0; i < count; ++i) {
        int64_t offset = 0;
        for (size_t k = 0; k < depth; ++k)
          offset += resolve_index(index[i * static_cast<int64_t>(depth) + static_cast<int64_t>(k)], data[k],
                                  "ScatterND") *
                    strides[k];
        for (int64_t j = 0; j < slice; ++j) combine(out[offset + j], updates[i * slice + j], reduction);
      }
    });
  });
}

KernelOrReason make_scatter_elements(const OpSpec& spec, std::span<const TensorInfo>) {
  const ScatterReduction reduction = scatter_reduction(spec);
  const Shape data = spec.input(0).shape;
  const Shape indices = spec.input(1).shape;
  const auto axis = static_cast<size_t>(indexing_axis(spec));
  const std::vector<int64_t> data_strides = strides_of(data);
  // The updates as [outer, length, inner] around the axis. Update (o, a, j) goes to (o, index, j):
  // different (o, j) never meet, so they run in parallel, each over a in order (as a serial loop
  // would combine duplicates).
  const int64_t outer = product(indices, 0, axis);
  const int64_t length = indices[axis];
  const int64_t inner = product(indices, axis + 1, indices.size());
  // Where inner position j lands in the data: j itself when the inner dims are the data's.
  const bool inner_dense = std::equal(indices.begin() + static_cast<std::ptrdiff_t>(axis) + 1, indices.end(),
                                      data.begin() + static_cast<std::ptrdiff_t>(axis) + 1);
  const auto place = [=](int64_t position, size_t first, size_t last) {
    int64_t offset = 0;
    for (size_t d = last; d-- > first;) {
      offset += (position % indices[d]) * data_strides[d];
      position /= indices[d];
    }
    return offset;
  };
  const std::string name = spec.op_type == "Scatter" ? "native:scatter" : "native:scatter_elements";
  const std::string op = spec.op_type;
  return visit_scatter_dtype(spec, reduction, [&](auto tag) {
    using T = decltype(tag);
    return make_kernel(name, [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
      T* out = dst[0].data<T>();
      if (out != inputs[0].data<T>()) std::memcpy(out, inputs[0].raw_data(), inputs[0].nbytes());
      const T* updates = inputs[2].data<T>();
      const Tensor& index = inputs[1];
      parallel_for(0, outer * inner, length, [&](int64_t begin, int64_t end) {
        for (int64_t pair = begin; pair < end; ++pair) {
          const int64_t o = pair / inner;
          const int64_t j = pair % inner;
          const int64_t base = place(o, 0, axis) + (inner_dense ? j : place(j, axis + 1, indices.size()));
          for (int64_t a = 0; a < length; ++a) {
            const int64_t i = (o * length + a) * inner + j;
            const int64_t target = resolve_index(index_at(index, i), data[axis], op.c_str());
            combine(out[base + target * data_strides[axis]], updates[i], reduction);
          }
        }
      });
    });
  });
}

// ---- OneHot --------------------------------------------------------------------------------------

KernelOrReason make_one_hot(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const int64_t depth = one_hot_depth(spec);
  const Shape indices = spec.input(0).shape;
  const auto axis = static_cast<size_t>(indexing_axis(spec));
  const int64_t outer = product(indices, 0, axis);
  const int64_t inner = product(indices, axis, indices.size());
  const size_t element_size = dtype_size(outputs[0].dtype);
  if (!is_visitable_element_size(element_size)) return unsupported_width(spec);
  return make_kernel("native:one_hot", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    const Tensor& index = inputs[0];
    visit_element_size(
        element_size,
        [&](auto tag) {
          using U = decltype(tag);
          U off;
          U on;
          std::memcpy(&off, inputs[2].raw_data(), sizeof(U));
          std::memcpy(&on, static_cast<const char*>(inputs[2].raw_data()) + sizeof(U), sizeof(U));
          U* out = dst[0].data<U>();
          std::fill(out, out + dst[0].numel(), off);
          for (int64_t o = 0; o < outer; ++o) {
            for (int64_t i = 0; i < inner; ++i) {
              // Indices may be any numeric type; outside [-depth, depth) they select nothing.
              auto value = static_cast<int64_t>(index.double_at(o * inner + i));
              if (value < 0) value += depth;
              if (value >= 0 && value < depth) out[(o * depth + value) * inner + i] = on;
            }
          }
        },
        [] {});
  });
}

// ---- TopK ----------------------------------------------------------------------------------------

KernelOrReason make_topk(const OpSpec& spec, std::span<const TensorInfo>) {
  const Shape x = spec.input(0).shape;
  const auto axis = static_cast<size_t>(indexing_axis(spec));
  const int64_t k = topk_k(spec);
  const bool largest = spec.opset < 11 || spec.attrs().get_int("largest", 1) != 0;
  const AxisLines lines = lines_along(x, axis);
  return visit_dtype(spec.input(0).dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "native TopK orders numbers, not bool");
    } else {
      return make_kernel("native:topk", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
        const T* src = inputs[0].data<T>();
        T* values = dst[0].data<T>();
        int64_t* indices = dst[1].data<int64_t>();
        parallel_for(0, lines.outer * lines.inner, lines.dim * 4, [&](int64_t begin, int64_t end) {
          std::vector<int64_t> order(static_cast<size_t>(lines.dim));
          for (int64_t line = begin; line < end; ++line) {
            const int64_t o = line / lines.inner;
            const int64_t i = line % lines.inner;
            const T* in = src + o * lines.dim * lines.inner + i;
            auto at = [&](int64_t j) { return to_compute(in[j * lines.inner]); };
            std::iota(order.begin(), order.end(), int64_t{0});
            // Equal values keep their order: the lower index first, as ONNX specifies.
            auto before = [&](int64_t a, int64_t b) {
              const auto va = at(a);
              const auto vb = at(b);
              if (largest ? greater_with_nan(va, vb) : greater_with_nan(vb, va)) return true;
              if (largest ? greater_with_nan(vb, va) : greater_with_nan(va, vb)) return false;
              return a < b;
            };
            std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
            for (int64_t j = 0; j < k; ++j) {
              const int64_t out = (o * k + j) * lines.inner + i;
              values[out] = in[order[static_cast<size_t>(j)] * lines.inner];
              indices[out] = order[static_cast<size_t>(j)];
            }
          }
        });
      });
    }
  });
}

// ---- CumSum --------------------------------------------------------------------------------------

KernelOrReason make_cumsum(const OpSpec& spec, std::span<const TensorInfo>) {
  const Shape x = spec.input(0).shape;
  const auto axis = static_cast<size_t>(indexing_axis(spec));
  const bool exclusive = spec.attrs().get_int("exclusive", 0) != 0;
  const bool reverse = spec.attrs().get_int("reverse", 0) != 0;
  const AxisLines lines = lines_along(x, axis);
  return visit_dtype(spec.input(0).dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return KernelOrReason::rejected(RefusalKind::unsupported_dtype, "native CumSum adds numbers, not bool");
    } else {
      // Integers wrap around on overflow, as in numpy and ONNX Runtime: summed unsigned, where
      // wrapping is defined (a signed overflow would be undefined behaviour).
      using Sum = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                              std::type_identity<compute_t<T>>>::type;
      return make_kernel("native:cumsum", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
        const T* src = inputs[0].data<T>();
        T* out = dst[0].data<T>();
        parallel_for(0, lines.outer * lines.inner, lines.dim, [&](int64_t begin, int64_t end) {
          for (int64_t line = begin; line < end; ++line) {
            const int64_t base = (line / lines.inner) * lines.dim * lines.inner + line % lines.inner;
            Sum sum{};
            for (int64_t step = 0; step < lines.dim; ++step) {
              const int64_t j = reverse ? lines.dim - 1 - step : step;
              const int64_t at = base + j * lines.inner;
              const Sum value = static_cast<Sum>(to_compute(src[at]));  // read first: out may alias src
              if (!exclusive) sum += value;
              out[at] = from_compute<T>(static_cast<compute_t<T>>(sum));
              if (exclusive) sum += value;
            }
          }
        });
      });
    }
  });
}

// ---- Trilu ---------------------------------------------------------------------------------------

KernelOrReason make_trilu(const OpSpec& spec, std::span<const TensorInfo>) {
  const Shape x = spec.input(0).shape;
  const bool upper = spec.attrs().get_int("upper", 1) != 0;
  const int64_t rows = x[x.size() - 2];
  const int64_t cols = x.back();
  const int64_t matrices = product(x, 0, x.size() - 2);
  const size_t element_size = dtype_size(spec.input(0).dtype);
  if (!is_visitable_element_size(element_size)) return unsupported_width(spec);
  return make_kernel("native:trilu", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    // k is read when the step runs: it may be a value computed by the graph.
    const int64_t k = inputs.size() > 1 && inputs[1].defined() ? inputs[1].int_at(0) : 0;
    visit_element_size(
        element_size,
        [&](auto tag) {
          using U = decltype(tag);
          const U* src = inputs[0].data<U>();
          U* out = dst[0].data<U>();
          parallel_for(0, matrices * rows, cols, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
              const int64_t i = r % rows;
              for (int64_t j = 0; j < cols; ++j) {
                const bool keep = upper ? j - i >= k : j - i <= k;
                out[r * cols + j] = keep ? src[r * cols + j] : U{0};
              }
            }
          });
        },
        [] {});
  });
}

// ---- ReverseSequence -----------------------------------------------------------------------------

KernelOrReason make_reverse_sequence(const OpSpec& spec, std::span<const TensorInfo>) {
  const Shape x = spec.input(0).shape;
  const int64_t batch_axis = spec.attrs().get_int("batch_axis", 1);
  const int64_t batches = x[static_cast<size_t>(batch_axis)];
  const int64_t steps = x[static_cast<size_t>(1 - batch_axis)];
  const int64_t inner = product(x, 2, x.size());
  // Element offsets of (time t, batch b) rows of `inner` elements.
  const int64_t time_stride = batch_axis == 1 ? batches * inner : inner;
  const int64_t batch_stride = batch_axis == 1 ? inner : steps * inner;
  const size_t element_size = dtype_size(spec.input(0).dtype);
  return make_kernel("native:reverse_sequence", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    const char* src = static_cast<const char*>(inputs[0].raw_data());
    char* out = static_cast<char*>(dst[0].raw_data());
    const auto row_bytes = static_cast<size_t>(inner) * element_size;
    for (int64_t b = 0; b < batches; ++b) {
      const int64_t length = inputs[1].data<int64_t>()[b];
      KILN_CHECK(length >= 0 && length <= steps, invalid_argument, "ReverseSequence sequence_lens[", b,
                 "] = ", length, " is outside [0, ", steps, "]");
      for (int64_t t = 0; t < steps; ++t) {
        const int64_t from = t < length ? length - 1 - t : t;
        std::memcpy(out + static_cast<size_t>(b * batch_stride + t * time_stride) * element_size,
                    src + static_cast<size_t>(b * batch_stride + from * time_stride) * element_size,
                    row_bytes);
      }
    }
  });
}

constexpr KernelEntry kKernels[] = {
    {"GatherND", make_gather_nd},
    {"ScatterND", make_scatter_nd},
    {"ScatterElements", make_scatter_elements},
    {"Scatter", make_scatter_elements},
    {"OneHot", make_one_hot},
    {"TopK", make_topk},
    {"CumSum", make_cumsum},
    {"Trilu", make_trilu},
    {"ReverseSequence", make_reverse_sequence},
};

}  // namespace

std::span<const KernelEntry> indexing_kernels() {
  return kKernels;
}

}  // namespace kiln::native
