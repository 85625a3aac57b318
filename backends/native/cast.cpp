// Native Cast and CastLike: one conversion loop per (source, destination) dtype pair.
#include <cmath>
#include <limits>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/elementwise.h"
#include "runtime/parallel.h"

namespace kiln::native::elementwise {
namespace {

// One element from Src to Dst storage. 16-bit floats go through float (rounding to nearest even);
// floats become integers by truncation, saturating out of range and mapping NaN to 0, where C++
// leaves the conversion undefined; anything non-zero (NaN included) becomes true.
template <typename Src, typename Dst>
Dst convert_element(Src value) {
  if constexpr (std::is_same_v<Src, Dst>) {
    return value;
  } else if constexpr (std::is_same_v<Dst, bool>) {
    return to_compute(value) != 0;
  } else if constexpr (is_half_v<Dst>) {
    return from_compute<Dst>(static_cast<float>(to_compute(value)));
  } else if constexpr (std::is_integral_v<Dst> && !std::is_integral_v<compute_t<Src>>) {
    return saturate_cast<Dst>(static_cast<double>(to_compute(value)));
  } else {
    return static_cast<Dst>(to_compute(value));
  }
}

KernelOrReason cast_kernel(DType from, DType to) {
  return visit_dtype(from, [&](auto src_tag) -> KernelOrReason {
    using Src = decltype(src_tag);
    return visit_dtype(to, [&](auto dst_tag) -> KernelOrReason {
      using Dst = decltype(dst_tag);
      return make_kernel(str_cat("native:cast_", dtype_name(from), "_to_", dtype_name(to)),
                         [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
                           const Src* src = inputs[0].data<Src>();
                           Dst* dst = outputs[0].data<Dst>();
                           parallel_for(0, inputs[0].numel(), kCheapCost, [&](int64_t begin, int64_t end) {
                             for (int64_t i = begin; i < end; ++i) dst[i] = convert_element<Src, Dst>(src[i]);
                           });
                         });
    });
  });
}

}  // namespace

KernelOrReason make_cast(const OpSpec& spec, Outputs outputs) {
  const DType from = spec.input(0).dtype;
  const DType to = outputs[0].dtype;
  if (from == DType::undefined || to == DType::undefined) return unsupported_dtype(spec, DType::undefined);
  return cast_kernel(from, to);
}

}  // namespace kiln::native::elementwise
