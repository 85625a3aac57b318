// Native kernels with vector loops are compiled three times (GCC target attributes: AVX-512, AVX2 +
// FMA, baseline x86-64), so one portable binary runs the widest variant a machine allows. Which one
// runs follows the ISA tier in effect (runtime/cpu_info.h: the CPU's best, capped by KILN_ISA or
// set_max_isa), so a capped AVX-512 machine tests the AVX2 and baseline variants too.
#pragma once

#include "runtime/cpu_info.h"

namespace kiln::native {

template <typename Fn>
struct IsaVariant {
  const char* isa;  // "avx512", "avx2" or "baseline": kernels put it in their names
  Fn fn;
};

// The variant for the tier in effect. The avx512 variant may use F, VL, BW, DQ and FMA (the avx512
// tier guarantees all of them); the avx2 variant AVX2 and FMA.
template <typename Fn>
IsaVariant<Fn> pick_isa_variant(Fn avx512, Fn avx2, Fn baseline) {
  const Isa isa = isa_in_effect();
  if (isa >= Isa::avx512) return {"avx512", avx512};
  if (isa >= Isa::avx2) return {"avx2", avx2};
  return {"baseline", baseline};
}

}  // namespace kiln::native
