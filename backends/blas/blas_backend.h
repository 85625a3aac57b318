// The BLAS backend: MatMul and Gemm on OpenBLAS (Debian's OpenMP build, which shares the OpenMP
// runtime with oneDNN instead of starting a second thread pool). It is the first candidate for
// products too small for oneDNN's per-call set-up to pay off, and refuses the others (the rule and
// its measurement are in backends/blas/blas_backend.cpp; the size is the blas_threshold setting).
#pragma once

#include <cstdint>
#include <string>

#include "backends/base/backend.h"

namespace kiln {

const Backend& blas_backend();

// Its options (the blas_threshold setting): products of at most this many multiply-adds count as
// small, and it takes only those.
struct BlasOptions final : BackendOptions {
  int64_t small_product_limit = kDefaultSmallProductLimit;
};

// The BLAS library and how it was built, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX ...".
std::string blas_library();
// How the library runs threads and how kiln uses them: "OpenMP; kiln calls it on 1 thread".
std::string blas_threading();

}  // namespace kiln
