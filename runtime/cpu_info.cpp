#include "runtime/cpu_info.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kiln {
namespace {

constexpr std::array<std::string_view, 5> kIsaNames = {"baseline", "avx2", "avx512", "avx512_bf16", "amx"};

// XCR0 bits: the register state the OS saves on a context switch. An extension is usable only when
// the CPU has it *and* the OS saves its registers.
constexpr unsigned kXcr0Avx = 0x6;      // SSE and AVX (ymm) state
constexpr unsigned kXcr0Avx512 = 0xe6;  // and opmask, zmm0-15 upper halves, zmm16-31
constexpr unsigned kXcr0Amx = 0x60000;  // XTILECFG (bit 17) and XTILEDATA (bit 18)

bool bit(unsigned value, int index) {
  return (value >> index) & 1;
}

CpuCapability detect() {
  CpuCapability cpu;
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return cpu;
  const unsigned max_leaf = eax;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  cpu.vendor = vendor;

  unsigned xcr0 = 0;
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  // Family and model as the vendors define them: the extended fields count only for family 15
  // (and, for the model, family 6 on Intel).
  const int base_family = static_cast<int>((eax >> 8) & 0xf);
  const int base_model = static_cast<int>((eax >> 4) & 0xf);
  cpu.family = base_family == 0xf ? base_family + static_cast<int>((eax >> 20) & 0xff) : base_family;
  cpu.model = base_family == 0xf || base_family == 0x6
                  ? base_model + (static_cast<int>((eax >> 16) & 0xf) << 4)
                  : base_model;
  const bool has_fma = bit(ecx, 12);
  if (bit(ecx, 27)) {  // OSXSAVE: xgetbv may be executed
    unsigned xcr0_high = 0;
    __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_high) : "c"(0));
  }
  const bool os_avx = (xcr0 & kXcr0Avx) == kXcr0Avx;
  const bool os_avx512 = (xcr0 & kXcr0Avx512) == kXcr0Avx512;
  const bool os_amx = (xcr0 & kXcr0Amx) == kXcr0Amx;
  cpu.fma = os_avx && has_fma;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    cpu.avx2 = os_avx && bit(ebx, 5);
    cpu.avx512f = os_avx512 && bit(ebx, 16);
    cpu.avx512dq = cpu.avx512f && bit(ebx, 17);
    cpu.avx512bw = cpu.avx512f && bit(ebx, 30);
    cpu.avx512vl = cpu.avx512f && bit(ebx, 31);
    cpu.avx512_vnni = cpu.avx512f && bit(ecx, 11);
    cpu.amx_bf16 = os_amx && bit(edx, 22);
    cpu.amx_tile = os_amx && bit(edx, 24);
    cpu.amx_int8 = os_amx && bit(edx, 25);
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    cpu.avx512_bf16 = cpu.avx512f && bit(eax, 5);
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

// The tier decision and the API's request, both guarded by one mutex: the decision is read at
// plan time (kernel creation), never per run.
struct IsaState {
  std::mutex mutex;
  std::optional<Isa> api_request;
  std::optional<IsaChoice> fixed;
};

IsaState& isa_state() {
  static IsaState state;
  return state;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  return kIsaNames[static_cast<size_t>(isa)];
}

Isa parse_isa(std::string_view text, std::string_view what) {
  for (size_t i = 0; i < kIsaNames.size(); ++i) {
    if (text == kIsaNames[i]) return static_cast<Isa>(i);
  }
  fail(ErrorKind::invalid_argument, what, " must be one of baseline, avx2, avx512, avx512_bf16, amx; got '",
       text, "'");
}

Isa CpuCapability::best_isa() const {
  const bool avx512 = avx512f && avx512vl && avx512bw && avx512dq;
  const bool avx512_bf16_tier = avx512 && avx512_vnni && avx512_bf16;
  if (avx512_bf16_tier && amx_tile && amx_bf16 && amx_int8) return Isa::amx;
  if (avx512_bf16_tier) return Isa::avx512_bf16;
  if (avx512) return Isa::avx512;
  if (avx2 && fma) return Isa::avx2;
  return Isa::baseline;
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

std::string CpuCapability::description() const {
  const std::string& name = brand.empty() ? vendor : brand;
  return str_cat(name.empty() ? "unknown CPU" : name, " (", vendor, " family ", family, " model ", model,
                 ")");
}

const CpuCapability& cpu_capability() {
  static const CpuCapability capability = detect();
  return capability;
}

const IsaChoice& isa_choice() {
  IsaState& state = isa_state();
  std::lock_guard lock(state.mutex);
  if (!state.fixed) {
    const Isa cpu_best = cpu_capability().best_isa();
    IsaChoice choice{cpu_best, cpu_best, "cpu"};
    if (state.api_request) {
      choice.requested = *state.api_request;
      choice.source = "api";
    } else if (const char* env = std::getenv("KILN_ISA"); env != nullptr && *env != '\0') {
      choice.requested = parse_isa(env, "KILN_ISA");
      choice.source = "KILN_ISA";
    }
    choice.isa = std::min(choice.requested, cpu_best);
    state.fixed = choice;
  }
  return *state.fixed;
}

void set_max_isa(Isa isa) {
  IsaState& state = isa_state();
  std::lock_guard lock(state.mutex);
  if (state.fixed) {
    fail(ErrorKind::invalid_argument, "set_max_isa(", isa_name(isa), "): the ISA is already fixed at ",
         isa_name(state.fixed->isa), " (from ", state.fixed->source,
         ") because kernels were chosen; call it before loading a model, or set KILN_ISA");
  }
  state.api_request = isa;
}

}  // namespace kiln
