// What the CPU can do, read with cpuid: the instruction-set extensions kernels may dispatch on.
#pragma once

#include <string>
#include <vector>

namespace kiln {

struct CpuCapability {
  std::string vendor;
  std::string brand;
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;

  // Highest tier first: "AMX_BF16", "AVX512_BF16", "AVX512", "AVX2", "SSE" style name.
  std::string best_isa() const;
  // Every extension present, e.g. {"AVX2", "FMA", "AVX512", "AVX512_BF16", "AMX_BF16"}.
  std::vector<std::string> extensions() const;
};

const CpuCapability& cpu_capability();

}  // namespace kiln
