// What the CPU can do (read with cpuid and the OS-enabled state in XCR0), and the one place that
// decides which instruction-set tier kiln's kernels dispatch on.
//
// The tier in effect is the CPU's best, lowered by the KILN_ISA environment variable or by
// set_max_isa() (never raised above what the CPU has). It is fixed the first time anything reads
// it: native kernels keep the variant they picked, and oneDNN accepts a cap only before its first
// primitive. Capping lets an AVX-512 machine test the AVX2 and baseline code paths too.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// Instruction-set tiers, lowest first; each includes everything below it.
enum class Isa {
  baseline,     // x86-64 (SSE2): what the binary itself targets
  avx2,         // AVX2 and FMA
  avx512,       // AVX-512 F, VL, BW and DQ (oneDNN's avx512_core)
  avx512_bf16,  // and AVX512_VNNI, AVX512_BF16: bf16 dot products
  amx,          // and AMX tiles for bf16 and int8
};

// "baseline", "avx2", "avx512", "avx512_bf16", "amx": the names KILN_ISA accepts.
std::string_view isa_name(Isa isa);
// Parses one of those names; `what` names the setting for the error message.
Isa parse_isa(std::string_view text, std::string_view what);

struct CpuCapability {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD"
  std::string brand;   // "Intel(R) Xeon(R) Platinum 8480+", "AMD EPYC"
  int family = 0;
  int model = 0;
  // Each flag is set only when the OS also saves the registers it needs (XCR0).
  bool fma = false;
  bool avx2 = false;
  bool avx512f = false;
  bool avx512vl = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;

  // The highest tier all of whose extensions this CPU has.
  Isa best_isa() const;
  // Every extension present, e.g. {"AVX2", "FMA", "AVX512", "AVX512_VNNI", "AVX512_BF16", "AMX_BF16"}.
  std::vector<std::string> extensions() const;
  // "AMD EPYC (AuthenticAMD family 25 model 17)": names the machine in reports.
  std::string description() const;
};

const CpuCapability& cpu_capability();

// The tier kernels use and why.
struct IsaChoice {
  Isa isa = Isa::baseline;        // in effect: min(requested, the CPU's best)
  Isa requested = Isa::baseline;  // what the source asked for (the CPU's best when source is "cpu")
  std::string source;             // "cpu", "KILN_ISA" or "api"
};

// Decides the tier on the first call (KILN_ISA is read then) and returns the same afterwards.
// Throws a kiln::Error naming KILN_ISA when its value is not a tier name.
const IsaChoice& isa_choice();
inline Isa isa_in_effect() {
  return isa_choice().isa;
}

// Caps the tier from the API (above KILN_ISA). Only before the tier is fixed: afterwards a
// kiln::Error says so, since kernels already chose their variants.
void set_max_isa(Isa isa);

}  // namespace kiln
