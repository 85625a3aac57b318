// Native reductions: every output element walks its reduced sub-space, innermost reduced dim in a
// plain strided loop (contiguous for the common last-axis case). Accumulation is in double.
#include <cmath>
#include <limits>

#include "backends/native/element_math.h"
#include "backends/native/kernel_util.h"
#include "backends/native/native_backend.h"
#include "ops/reduce.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

enum class Reduction { mean, sum, max, min, prod, l1, l2, log_sum, log_sum_exp, sum_square, arg_max, arg_min };

struct ReduceGeometry {
  Shape kept_shape;
  std::vector<int64_t> kept_strides;
  Shape reduced_shape;  // at least one dim (size 1 when nothing is reduced)
  std::vector<int64_t> reduced_strides;
  int64_t reduced_count = 1;
};

ReduceGeometry reduce_geometry(const Shape& input, const std::vector<bool>& reduced) {
  ReduceGeometry g;
  const std::vector<int64_t> strides = contiguous_strides(input);
  for (size_t d = 0; d < input.size(); ++d) {
    if (reduced[d]) {
      g.reduced_shape.push_back(input[d]);
      g.reduced_strides.push_back(strides[d]);
      g.reduced_count *= input[d];
    } else {
      g.kept_shape.push_back(input[d]);
      g.kept_strides.push_back(strides[d]);
    }
  }
  if (g.reduced_shape.empty()) {
    g.reduced_shape.push_back(1);
    g.reduced_strides.push_back(0);
  }
  return g;
}

template <typename T, Reduction kKind>
void reduce(const Tensor& src_tensor, Tensor& dst_tensor, const ReduceGeometry& g, bool select_last) {
  const T* src = src_tensor.data<T>();
  const int64_t outputs = dst_tensor.numel();
  const size_t outer_rank = g.reduced_shape.size() - 1;
  const int64_t inner = g.reduced_shape.back();
  const int64_t inner_stride = g.reduced_strides.back();
  parallel_for(0, outputs, g.reduced_count * 2, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      int64_t base = 0;
      for (int64_t d = static_cast<int64_t>(g.kept_shape.size()) - 1, rest = o; d >= 0; --d) {
        base += (rest % g.kept_shape[d]) * g.kept_strides[d];
        rest /= g.kept_shape[d];
      }
      // Two passes only for LogSumExp (its maximum keeps exp() in range).
      double shift = 0;
      if constexpr (kKind == Reduction::log_sum_exp) shift = -std::numeric_limits<double>::infinity();
      double acc = kKind == Reduction::prod ? 1.0
                   : (kKind == Reduction::max || kKind == Reduction::arg_max) ? -std::numeric_limits<double>::infinity()
                   : (kKind == Reduction::min || kKind == Reduction::arg_min) ? std::numeric_limits<double>::infinity()
                                                                                : 0.0;
      int64_t best = 0;
      for (int pass = kKind == Reduction::log_sum_exp ? 0 : 1; pass < 2; ++pass) {
        int64_t position = 0;
        const int64_t outer_count = g.reduced_count / std::max<int64_t>(inner, 1);
        for (int64_t r = 0; r < outer_count; ++r) {
          int64_t offset = base;
          for (int64_t d = static_cast<int64_t>(outer_rank) - 1, rest = r; d >= 0; --d) {
            offset += (rest % g.reduced_shape[d]) * g.reduced_strides[d];
            rest /= g.reduced_shape[d];
          }
          for (int64_t i = 0; i < inner; ++i, ++position) {
            const double x = to_compute(src[offset + i * inner_stride]);
            if (pass == 0) {
              shift = std::max(shift, x);
              continue;
            }
            if constexpr (kKind == Reduction::mean || kKind == Reduction::sum || kKind == Reduction::log_sum) acc += x;
            else if constexpr (kKind == Reduction::max) acc = std::max(acc, x);
            else if constexpr (kKind == Reduction::min) acc = std::min(acc, x);
            else if constexpr (kKind == Reduction::prod) acc *= x;
            else if constexpr (kKind == Reduction::l1) acc += std::fabs(x);
            else if constexpr (kKind == Reduction::l2 || kKind == Reduction::sum_square) acc += x * x;
            else if constexpr (kKind == Reduction::log_sum_exp) acc += std::exp(x - shift);
            else if constexpr (kKind == Reduction::arg_max) {
              if (x > acc || (select_last && x == acc)) { acc = x; best = position; }
            } else {
              if (x < acc || (select_last && x == acc)) { acc = x; best = position; }
            }
          }
        }
      }
      if constexpr (kKind == Reduction::arg_max || kKind == Reduction::arg_min) {
        dst_tensor.data<int64_t>()[o] = best;
      } else {
        double result = acc;
        if constexpr (kKind == Reduction::mean) result = acc / static_cast<double>(g.reduced_count);
        if constexpr (kKind == Reduction::l2) result = std::sqrt(acc);
        if constexpr (kKind == Reduction::log_sum) result = std::log(acc);
        if constexpr (kKind == Reduction::log_sum_exp) result = shift + std::log(acc);
        dst_tensor.data<T>()[o] = from_compute<T>(result);
      }
    }
  });
}

template <Reduction kKind>
KernelOrReason make_reduce(const OpSpec& spec, std::span<const TensorInfo>) {
  const ReduceParams params = reduce_params(spec);
  const ReduceGeometry geometry = reduce_geometry(spec.input(0).shape, params.reduced);
  const bool select_last = spec.attrs().get_int("select_last_index", 0) != 0;
  return visit_dtype(spec.input(0).dtype, [&](auto tag) -> KernelOrReason {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return KernelOrReason::rejected("native reductions do not support bool");
    } else {
      return make_kernel("native:reduce", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
        reduce<T, kKind>(inputs[0], outputs[0], geometry, select_last);
      });
    }
  });
}

constexpr KernelEntry kKernels[] = {
    {"ReduceMean", make_reduce<Reduction::mean>},
    {"ReduceSum", make_reduce<Reduction::sum>},
    {"ReduceMax", make_reduce<Reduction::max>},
    {"ReduceMin", make_reduce<Reduction::min>},
    {"ReduceProd", make_reduce<Reduction::prod>},
    {"ReduceL1", make_reduce<Reduction::l1>},
    {"ReduceL2", make_reduce<Reduction::l2>},
    {"ReduceLogSum", make_reduce<Reduction::log_sum>},
    {"ReduceLogSumExp", make_reduce<Reduction::log_sum_exp>},
    {"ReduceSumSquare", make_reduce<Reduction::sum_square>},
    {"ArgMax", make_reduce<Reduction::arg_max>},
    {"ArgMin", make_reduce<Reduction::arg_min>},
};

}  // namespace

std::span<const KernelEntry> reduce_kernels() { return kKernels; }

}  // namespace kiln::native
