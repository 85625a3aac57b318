// The vector types native kernels compute in: GCC vector extensions one register wide, for the three
// ISA variants each vector loop is compiled for (isa_variant.h picks the one that runs).
#pragma once

#include <cstdint>
#include <cstring>

// Helpers over these types take and return vectors wider than the baseline ABI's, but they are
// always inlined into functions compiled for a matching target, so no call ever passes one. (This
// holds for every file that includes this header; the warning stays off for it.)
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kiln::native {

// F: one register of floats; U: the same bits as integers; H: half of F; D: H widened to double.
template <int kWidth>
struct Simd;
template <>
struct Simd<4> {  // SSE2, baseline x86-64: one xmm
  using F = float __attribute__((vector_size(16)));
  using U = uint32_t __attribute__((vector_size(16)));
  using H = float __attribute__((vector_size(8)));
  using D = double __attribute__((vector_size(16)));
};
template <>
struct Simd<8> {  // AVX2: one ymm
  using F = float __attribute__((vector_size(32)));
  using U = uint32_t __attribute__((vector_size(32)));
  using H = float __attribute__((vector_size(16)));
  using D = double __attribute__((vector_size(32)));
};
template <>
struct Simd<16> {  // AVX-512: one zmm
  using F = float __attribute__((vector_size(64)));
  using U = uint32_t __attribute__((vector_size(64)));
  using H = float __attribute__((vector_size(32)));
  using D = double __attribute__((vector_size(64)));
};

// Unaligned loads and stores of one register.
template <typename S>
[[gnu::always_inline]] inline typename S::F load(const float* src) {
  typename S::F v;
  std::memcpy(&v, src, sizeof(v));
  return v;
}

template <typename S>
[[gnu::always_inline]] inline void store(float* dst, typename S::F v) {
  std::memcpy(dst, &v, sizeof(v));
}

}  // namespace kiln::native
