// Native Einsum: the contraction path (ops/einsum_path.h) run as pairwise products on the GEMM.
// Each pair A, B is brought to [batch, M, K] and [batch, K, N] (labels both keep, labels only one
// keeps, labels summed between them), with the labels only one of them has and nothing later needs
// summed away while copying, and multiplied per batch entry: the native sgemm for float32, plain
// loops for float64 and integers. A repeated label within an operand (a diagonal) is one dim whose
// stride is the sum of its dims' strides; a size-1 dim broadcast against a larger one has stride 0.
// Operands already in the order a product reads are not copied, and the last product writes the
// output directly when its labels are the output's. Everything is planned from the shapes at plan
// time; intermediates live in the calling thread's scratch.
#include "ops/einsum.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <type_traits>

#include "backends/base/function_kernel.h"
#include "backends/native/gemm.h"
#include "backends/native/native_backend.h"
#include "backends/native/thread_scratch.h"
#include "core/error.h"
#include "ops/einsum_path.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

// Where an operand's elements are: a node input, a scratch area, or the output.
struct Place {
  enum Kind : uint8_t { input, scratch, output } kind = input;
  int64_t index = 0;  // the input's position, or the element offset into scratch
};

// An operand as the products see it: one dim per distinct label.
struct Operand {
  Place place;
  std::vector<int> labels;
  std::vector<int64_t> sizes;    // its own (1 where it broadcasts)
  std::vector<int64_t> strides;  // in elements
};

// dst (contiguous over the first `kept` dims) = the sum of src over the remaining dims.
struct StridedSum {
  Place from;
  Place to;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // src's, per dim
  size_t kept = 0;
};

// C[b] = A[b] x B[b] for every batch entry b, all contiguous.
struct Product {
  Place a, b, c;
  int64_t batch = 1, m = 1, n = 1, k = 1;
};

// One run: the sums and products in order.
struct Program {
  struct Step {
    bool is_product = false;
    StridedSum sum;
    Product product;
  };
  std::vector<Step> steps;
  int64_t scratch_elements = 0;
};

bool has(const std::vector<int>& labels, int label) {
  return std::find(labels.begin(), labels.end(), label) != labels.end();
}

class Planner {
 public:
  Planner(const EinsumEquation& equation, const std::vector<Shape>& shapes) : equation_(equation) {
    for (size_t i = 0; i < shapes.size(); ++i) operands_.push_back(input_operand(i, shapes[i]));
  }

  Program plan(const EinsumPath& path) {
    for (size_t s = 0; s < path.steps.size(); ++s) {
      const std::vector<int>& positions = path.steps[s].positions;
      const bool last = s + 1 == path.steps.size();
      // Taken out from the highest position down, as numpy does; the result goes at the end.
      std::vector<int> descending = positions;
      std::sort(descending.rbegin(), descending.rend());
      std::vector<Operand> group;
      for (int position : descending) {
        group.push_back(operands_[static_cast<size_t>(position)]);
        operands_.erase(operands_.begin() + position);
      }
      std::reverse(group.begin(), group.end());
      Operand result = group.front();
      if (group.size() == 1)
        result = sum_to(result, last ? equation_.output : kept_after({}, labels_of(result)), last);
      // A step of more than two operands (nothing fitted numpy's memory bound) runs left to right.
      for (size_t g = 1; g < group.size(); ++g) {
        const std::vector<Operand> later(group.begin() + static_cast<std::ptrdiff_t>(g) + 1, group.end());
        const std::vector<int> kept = kept_after(later, labels_of(result) | labels_of(group[g]));
        result = multiply(result, group[g], kept, last && g + 1 == group.size());
      }
      operands_.push_back(result);
    }
    // The output: the one operand left, in the output's order.
    if (operands_.back().place.kind != Place::output) sum_to(operands_.back(), equation_.output, true);
    return std::move(program_);
  }

 private:
  Operand input_operand(size_t index, const Shape& shape) const {
    Operand operand;
    operand.place = {Place::input, static_cast<int64_t>(index)};
    const std::vector<int>& labels = equation_.operands[index];
    const std::vector<int64_t> strides = contiguous_strides(shape);
    for (size_t d = 0; d < labels.size(); ++d) {
      const auto at = std::find(operand.labels.begin(), operand.labels.end(), labels[d]);
      if (at != operand.labels.end()) {
        operand.strides[static_cast<size_t>(at - operand.labels.begin())] += strides[d];  // a diagonal
        continue;
      }
      operand.labels.push_back(labels[d]);
      operand.sizes.push_back(shape[d]);
      operand.strides.push_back(strides[d]);
    }
    return operand;
  }

  static LabelSet labels_of(const Operand& operand) {
    LabelSet set = 0;
    for (int label : operand.labels) set |= LabelSet{1} << label;
    return set;
  }

  // The labels a product of operands with `labels` keeps, in label order: those the operands still
  // left, the `later` members of its step and the output use.
  std::vector<int> kept_after(const std::vector<Operand>& later, LabelSet labels) const {
    LabelSet needed = equation_.output_labels();
    for (const Operand& operand : operands_) {
      for (int label : operand.labels) needed |= LabelSet{1} << label;
    }
    for (const Operand& operand : later) {
      for (int label : operand.labels) needed |= LabelSet{1} << label;
    }
    std::vector<int> kept;
    for (LabelSet set = labels & needed; set != 0; set &= set - 1) kept.push_back(std::countr_zero(set));
    return kept;
  }

  int64_t full_size(int label) const { return equation_.sizes[static_cast<size_t>(label)]; }

  // Elements of a contiguous tensor over `labels` at their full sizes; a kiln::Error where the count
  // does not fit (labels of empty operands may multiply to anything).
  int64_t elements_of(const std::vector<int>& labels) const {
    Shape shape;
    for (int label : labels) shape.push_back(full_size(label));
    try {
      return checked_numel(shape);
    } catch (const Error&) {
      fail(ErrorKind::invalid_model, "Einsum: an intermediate over labels '", equation_.term(labels),
           "' of sizes ", shape_to_string(shape), " has too many elements");
    }
  }

  Place new_scratch(int64_t elements) {
    const Place place{Place::scratch, program_.scratch_elements};
    // 64-byte aligned for any element type; the total stays countable in bytes of 8-byte elements.
    constexpr int64_t kMaxScratchElements = std::numeric_limits<int64_t>::max() / 16;
    KILN_CHECK(elements <= kMaxScratchElements - program_.scratch_elements - 16, invalid_model,
               "Einsum: its intermediates need more memory than kiln addresses");
    program_.scratch_elements += (elements + 15) / 16 * 16;
    return place;
  }

  // `operand` as a contiguous tensor over `order` (each label at its full size; `operand`'s other
  // labels summed), copied unless it already is one. `to_output` writes the node's output.
  Operand sum_to(const Operand& operand, const std::vector<int>& order, bool to_output) {
    StridedSum sum;
    sum.from = operand.place;
    bool in_place = !to_output;
    std::vector<int64_t> order_sizes;
    for (int label : order) order_sizes.push_back(full_size(label));
    const std::vector<int64_t> expected_strides = contiguous_strides(order_sizes);
    for (size_t d = 0; d < order.size(); ++d) {
      const auto at = std::find(operand.labels.begin(), operand.labels.end(), order[d]);
      KILN_CHECK(at != operand.labels.end() || full_size(order[d]) == 1, runtime, "Einsum plan lost label '",
                 equation_.label_name(order[d]), "'");
      const size_t dim = static_cast<size_t>(at - operand.labels.begin());
      const bool present = at != operand.labels.end();
      const int64_t size = order_sizes[d];
      const int64_t stride = present && operand.sizes[dim] == size ? operand.strides[dim] : 0;
      in_place = in_place && (size == 1 || stride == expected_strides[d]);
    }
    for (int label : order) {
      const auto at = std::find(operand.labels.begin(), operand.labels.end(), label);
      const bool present = at != operand.labels.end();
      const size_t dim = static_cast<size_t>(at - operand.labels.begin());
      sum.sizes.push_back(full_size(label));
      sum.strides.push_back(present && operand.sizes[dim] == full_size(label) ? operand.strides[dim] : 0);
    }
    sum.kept = order.size();
    for (size_t d = 0; d < operand.labels.size(); ++d) {
      if (has(order, operand.labels[d])) continue;
      in_place = false;
      sum.sizes.push_back(operand.sizes[d]);
      sum.strides.push_back(operand.strides[d]);
    }
    const int64_t elements = elements_of(order);
    if (in_place) return contiguous(operand.place, order);
    sum.to = to_output ? Place{Place::output, 0} : new_scratch(elements);
    const Place written = sum.to;
    program_.steps.push_back({false, std::move(sum), {}});
    return contiguous(written, order);
  }

  // A tensor at `place` holding `labels` at their full sizes, contiguous in that order.
  Operand contiguous(Place place, std::vector<int> labels) const {
    Operand operand;
    operand.place = place;
    operand.labels = std::move(labels);
    for (int label : operand.labels) operand.sizes.push_back(full_size(label));
    operand.strides = contiguous_strides(operand.sizes);
    return operand;
  }

  Operand multiply(const Operand& a, const Operand& b, const std::vector<int>& kept, bool to_output) {
    std::vector<int> batch, m, n, k;
    for (int label : a.labels) {
      const bool in_b = has(b.labels, label);
      const bool keep = has(kept, label);
      if (in_b && keep) batch.push_back(label);
      if (in_b && !keep) k.push_back(label);
      if (!in_b && keep) m.push_back(label);
    }
    for (int label : b.labels) {
      if (!has(a.labels, label) && has(kept, label)) n.push_back(label);
    }
    const auto concat = [](std::initializer_list<const std::vector<int>*> parts) {
      std::vector<int> joined;
      for (const std::vector<int>* part : parts) joined.insert(joined.end(), part->begin(), part->end());
      return joined;
    };
    const auto product_of = [&](const std::vector<int>& labels) { return elements_of(labels); };
    Product product;
    product.a = sum_to(a, concat({&batch, &m, &k}), false).place;
    product.b = sum_to(b, concat({&batch, &k, &n}), false).place;
    product.batch = product_of(batch);
    product.m = product_of(m);
    product.n = product_of(n);
    product.k = product_of(k);
    std::vector<int> c_labels = concat({&batch, &m, &n});
    elements_of(c_labels);  // checks batch * m * n
    // Written straight into the output when that is its order.
    const bool output_order = to_output && c_labels == equation_.output;
    product.c = output_order ? Place{Place::output, 0} : new_scratch(product.batch * product.m * product.n);
    program_.steps.push_back({true, {}, product});
    return contiguous(product.c, std::move(c_labels));
  }

  const EinsumEquation& equation_;
  std::vector<Operand> operands_;
  Program program_;
};

// Floating types accumulate in double, integers in 64-bit unsigned arithmetic (wrapping, as numpy's
// integer sums do, where signed overflow would be undefined).
template <typename T>
using Accumulator = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;

template <typename T>
void run_sum(const StridedSum& sum, const T* src, T* dst) {
  const size_t dims = sum.sizes.size();
  int64_t outputs = 1, reduced = 1;
  for (size_t d = 0; d < dims; ++d) (d < sum.kept ? outputs : reduced) *= sum.sizes[d];
  for (int64_t o = 0; o < outputs; ++o) {
    int64_t rest = o, base = 0;
    for (size_t d = sum.kept; d-- > 0;) {
      base += (rest % sum.sizes[d]) * sum.strides[d];
      rest /= sum.sizes[d];
    }
    Accumulator<T> total = 0;
    for (int64_t r = 0; r < reduced; ++r) {
      int64_t offset = base;
      int64_t left = r;
      for (size_t d = dims; d-- > sum.kept;) {
        offset += (left % sum.sizes[d]) * sum.strides[d];
        left /= sum.sizes[d];
      }
      total += static_cast<Accumulator<T>>(src[offset]);
    }
    dst[o] = static_cast<T>(total);
  }
}

// Integers multiply and add in their unsigned type: the same bits, wrapping instead of undefined.
template <typename T, bool = std::is_integral_v<T>>
struct WrappingMath {
  using type = T;
};
template <typename T>
struct WrappingMath<T, true> {
  using type = std::make_unsigned_t<T>;
};

template <typename T>
void run_product(const Product& p, const T* a, const T* b, T* c) {
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t i = 0; i < p.batch; ++i) {
      sgemm(false, false, {p.m, p.n, p.k}, 1.0f, a + i * p.m * p.k, p.k, b + i * p.k * p.n, p.n, 0.0f,
            c + i * p.m * p.n, p.n);
    }
  } else {
    // float64 and integers sum in their own type, as numpy's einsum does; integers wrap (in
    // unsigned arithmetic, where signed overflow would be undefined).
    using Math = typename WrappingMath<T>::type;
    parallel_for(0, p.batch * p.m, 2 * p.n * p.k, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* a_row = a + r * p.k;
        const T* b_matrix = b + (r / p.m) * p.k * p.n;
        T* c_row = c + r * p.n;
        std::fill(c_row, c_row + p.n, T(0));
        for (int64_t q = 0; q < p.k; ++q) {
          const Math scale = static_cast<Math>(a_row[q]);
          for (int64_t j = 0; j < p.n; ++j)
            c_row[j] = static_cast<T>(static_cast<Math>(c_row[j]) +
                                      scale * static_cast<Math>(b_matrix[q * p.n + j]));
        }
      }
    });
  }
}

struct EinsumScratch {};

template <typename T>
KernelOrReason make_einsum(std::string name, Program program) {
  return make_kernel(std::move(name), [program = std::move(program)](std::span<const Tensor> inputs,
                                                                     std::span<Tensor> outputs) {
    static_assert(sizeof(T) % sizeof(float) == 0 || sizeof(T) == sizeof(float));
    T* scratch = reinterpret_cast<T*>(thread_scratch_floats<EinsumScratch>(
        static_cast<size_t>(program.scratch_elements) * sizeof(T) / sizeof(float) + 1));
    const auto at = [&](const Place& place) -> T* {
      switch (place.kind) {
        case Place::input:
          return const_cast<T*>(inputs[static_cast<size_t>(place.index)].template data<T>());
        case Place::scratch:
          return scratch + place.index;
        case Place::output:
          return outputs[0].template data<T>();
      }
      return nullptr;
    };
    for (const Program::Step& step : program.steps) {
      if (step.is_product) {
        run_product<T>(step.product, at(step.product.a), at(step.product.b), at(step.product.c));
      } else {
        run_sum<T>(step.sum, at(step.sum.from), at(step.sum.to));
      }
    }
  });
}

}  // namespace

KernelOrReason create_einsum_kernel(const KernelRequest& request, std::span<const TensorInfo>) {
  const OpSpec& spec = request.op;
  const EinsumEquation equation = einsum_equation(spec);
  const NativeOptions& options = options_of<NativeOptions>(request);
  const EinsumPath path = einsum_path(equation, options.einsum_strategy, options.einsum_optimize);
  std::vector<Shape> shapes;
  for (int i = 0; i < spec.num_inputs(); ++i) shapes.push_back(spec.input(i).shape);
  Program program = Planner(equation, shapes).plan(path);
  const std::string name = spec.input(0).dtype == DType::f32
                               ? str_cat("native:einsum_sgemm:", gemm_kernel_info().isa)
                               : std::string("native:einsum");
  KernelOrReason offer;
  switch (spec.input(0).dtype) {
    case DType::f32:
      offer = make_einsum<float>(name, std::move(program));
      break;
    case DType::f64:
      offer = make_einsum<double>(name, std::move(program));
      break;
    case DType::i32:
      offer = make_einsum<int32_t>(name, std::move(program));
      break;
    case DType::i64:
      offer = make_einsum<int64_t>(name, std::move(program));
      break;
    default:
      return KernelOrReason::rejected(
          RefusalKind::unsupported_dtype,
          str_cat("Einsum runs float32, float64, int32 and int64, not ", dtype_name(spec.input(0).dtype)));
  }
  offer.note = str_cat("contraction path ", path.describe());
  return offer;
}

}  // namespace kiln::native
