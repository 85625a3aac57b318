// The ISA tier decision (runtime/cpu_info.h): tiers from extensions, the tier in effect and its
// source, native kernels and oneDNN following it, and set_max_isa once the tier is fixed. The
// isa_avx2.* and isa_baseline.* runs of these tests (tests/CMakeLists.txt) set KILN_ISA, so on a
// wider CPU they check the cap itself.
#include "runtime/cpu_info.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

#include "backend_test_util.h"
#include "backends/backends.h"
#include "backends/native/gemm.h"
#include "core/error.h"

namespace kiln {
namespace {

TEST(CpuInfo, EachTierNeedsEveryExtensionOfItsLevel) {
  CpuCapability cpu;
  EXPECT_EQ(cpu.best_isa(), Isa::baseline);
  cpu.avx2 = true;
  EXPECT_EQ(cpu.best_isa(), Isa::baseline) << "AVX2 without FMA";
  cpu.fma = true;
  EXPECT_EQ(cpu.best_isa(), Isa::avx2);
  cpu.avx512f = cpu.avx512vl = true;
  EXPECT_EQ(cpu.best_isa(), Isa::avx2) << "AVX-512 without BW and DQ";
  cpu.avx512bw = cpu.avx512dq = true;
  EXPECT_EQ(cpu.best_isa(), Isa::avx512);
  cpu.avx512_bf16 = true;
  EXPECT_EQ(cpu.best_isa(), Isa::avx512) << "BF16 without VNNI";
  cpu.avx512_vnni = true;
  EXPECT_EQ(cpu.best_isa(), Isa::avx512_bf16);
  cpu.amx_tile = cpu.amx_bf16 = true;
  EXPECT_EQ(cpu.best_isa(), Isa::avx512_bf16) << "AMX without INT8";
  cpu.amx_int8 = true;
  EXPECT_EQ(cpu.best_isa(), Isa::amx);
}

TEST(CpuInfo, TierNamesRoundTripAndUnknownNamesAreErrors) {
  for (Isa isa : {Isa::baseline, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx}) {
    EXPECT_EQ(parse_isa(isa_name(isa), "test"), isa);
  }
  try {
    parse_isa("avx512f", "KILN_ISA");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::invalid_argument);
    EXPECT_STREQ(error.what(),
                 "KILN_ISA must be one of baseline, avx2, avx512, avx512_bf16, amx; got 'avx512f'");
  }
}

TEST(CpuInfo, TierInEffectIsTheCpusBestCappedByKilnIsa) {
  const IsaChoice& choice = isa_choice();
  const Isa cpu_best = cpu_capability().best_isa();
  const char* env = std::getenv("KILN_ISA");
  if (env != nullptr && *env != '\0') {
    EXPECT_EQ(choice.source, "KILN_ISA");
    EXPECT_EQ(choice.requested, parse_isa(env, "KILN_ISA"));
  } else {
    EXPECT_EQ(choice.source, "cpu");
    EXPECT_EQ(choice.requested, cpu_best);
  }
  EXPECT_EQ(choice.isa, std::min(choice.requested, cpu_best));
  EXPECT_EQ(isa_in_effect(), choice.isa);
}

TEST(CpuInfo, NativeKernelsRunTheVariantOfTheTierInEffect) {
  const Isa isa = isa_in_effect();
  const std::string expected = isa >= Isa::avx512 ? "avx512" : isa >= Isa::avx2 ? "avx2" : "baseline";
  EXPECT_EQ(native::gemm_kernel_info().isa, expected);
}

TEST(CpuInfo, OnednnDispatchesWithinTheTierInEffect) {
  KILN_SKIP_UNLESS_BUILT("onednn");
  const std::string onednn = backends::onednn::isa();
  const IsaChoice& choice = isa_choice();
  // oneDNN's names for kiln's tiers, in Isa order: exactly what a cap sets where the tier is below the
  // CPU's best.
  constexpr std::string_view kOnednnNames[] = {"sse41", "avx2", "avx512_core", "avx512_core_bf16",
                                               "avx512_core_amx"};
  const std::string name(kOnednnNames[static_cast<size_t>(choice.isa)]);
  if (choice.isa < cpu_capability().best_isa()) {
    EXPECT_EQ(onednn, name);
  } else if (choice.isa == Isa::baseline) {
    EXPECT_TRUE(onednn == "sse41" || onednn == "avx") << onednn;  // oneDNN also has an AVX-only tier
  } else {
    // Uncapped, oneDNN may use a variant of the tier (avx2_vnni, avx512_core_vnni).
    EXPECT_EQ(onednn.rfind(name, 0), 0u) << onednn;
  }
}

TEST(CpuInfo, SetMaxIsaOnceTheTierIsFixedIsAnError) {
  const Isa fixed = isa_in_effect();
  try {
    set_max_isa(Isa::baseline);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("the ISA is already fixed at " + std::string(isa_name(fixed))),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(isa_in_effect(), fixed);
}

}  // namespace
}  // namespace kiln
