#include "runtime/cpu_info.h"

#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kiln {
namespace {

CpuCapability detect() {
  CpuCapability cpu;
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    char vendor[13] = {};
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    cpu.vendor = vendor;
  }
  const unsigned max_leaf = eax;
  bool os_saves_avx = false;
  bool os_saves_avx512 = false;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
    cpu.fma = (ecx >> 12) & 1;
    const bool osxsave = (ecx >> 27) & 1;
    if (osxsave) {
      unsigned xcr0_lo = 0, xcr0_hi = 0;
      __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
      os_saves_avx = (xcr0_lo & 0x6) == 0x6;
      os_saves_avx512 = (xcr0_lo & 0xe6) == 0xe6;
    }
  }
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    cpu.avx2 = os_saves_avx && ((ebx >> 5) & 1);
    cpu.avx512f = os_saves_avx512 && ((ebx >> 16) & 1);
    cpu.avx512_vnni = cpu.avx512f && ((ecx >> 11) & 1);
    cpu.amx_bf16 = (edx >> 22) & 1;
    cpu.amx_tile = (edx >> 24) & 1;
    cpu.amx_int8 = (edx >> 25) & 1;
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    cpu.avx512_bf16 = cpu.avx512f && ((eax >> 5) & 1);
  }
  char brand[49] = {};
  if (__get_cpuid(0x80000000, &eax, &ebx, &ecx, &edx) && eax >= 0x80000004) {
    for (unsigned leaf = 0; leaf < 3; ++leaf) {
      __get_cpuid(0x80000002 + leaf, &eax, &ebx, &ecx, &edx);
      std::memcpy(brand + leaf * 16, &eax, 4);
      std::memcpy(brand + leaf * 16 + 4, &ebx, 4);
      std::memcpy(brand + leaf * 16 + 8, &ecx, 4);
      std::memcpy(brand + leaf * 16 + 12, &edx, 4);
    }
    cpu.brand = brand;
    while (!cpu.brand.empty() && cpu.brand.back() == ' ') cpu.brand.pop_back();
  }
#endif
  return cpu;
}

}  // namespace

std::string CpuCapability::best_isa() const {
  if (amx_bf16) return "AMX_BF16";
  if (avx512_bf16) return "AVX512_BF16";
  if (avx512f) return "AVX512";
  if (avx2) return "AVX2";
  return "DEFAULT";
}

std::vector<std::string> CpuCapability::extensions() const {
  std::vector<std::string> names;
  const std::pair<bool, const char*> flags[] = {
      {avx2, "AVX2"},   {fma, "FMA"},           {avx512f, "AVX512"},    {avx512_vnni, "AVX512_VNNI"},
      {avx512_bf16, "AVX512_BF16"}, {amx_tile, "AMX_TILE"}, {amx_bf16, "AMX_BF16"}, {amx_int8, "AMX_INT8"},
  };
  for (const auto& [present, name] : flags) {
    if (present) names.emplace_back(name);
  }
  return names;
}

const CpuCapability& cpu_capability() {
  static const CpuCapability capability = detect();
  return capability;
}

}  // namespace kiln
