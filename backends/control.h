// kiln::backends: what each backend is and how it is set, one namespace per backend, in the shape
// of PyTorch's torch.backends. Settings are global (set_*) or scoped to a thread (ScopedFlags, or the
// Scoped* shorthands); docs/backends.md lists every one with its default.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "backends/settings.h"
#include "backends/verbose_sink.h"

namespace kiln::backends {

// Scoped shorthands over ScopedFlags for the commonest settings.
class ScopedVerbose : public ScopedFlags {
 public:
  explicit ScopedVerbose(int level) : ScopedFlags(Flags{.verbose = level}) {}
};
class ScopedDeterministic : public ScopedFlags {
 public:
  explicit ScopedDeterministic(bool on = true) : ScopedFlags(Flags{.deterministic = on}) {}
};
class ScopedAutotune : public ScopedFlags {
 public:
  explicit ScopedAutotune(int candidates) : ScopedFlags(Flags{.autotune = candidates}) {}
};
class ScopedPrecision : public ScopedFlags {
 public:
  // Applies to both families (conv and matmul).
  explicit ScopedPrecision(Precision precision)
      : ScopedFlags(Flags{.conv_precision = precision, .matmul_precision = precision}) {}
};

bool deterministic();
void set_deterministic(bool on);
int autotune();
void set_autotune(int candidates);
// `family`: "conv" or "matmul".
Precision precision(std::string_view family);
void set_precision(std::string_view family, Precision precision);
int verbose();
void set_verbose(int level);
void set_verbose_sink(std::shared_ptr<VerboseSink> sink);

namespace native {
bool is_built();
bool is_available();
std::string version();
bool enabled();  // always true: the reference cannot be disabled
}  // namespace native

namespace onednn {
bool is_built();
bool is_available();
std::string version();
// The ISA oneDNN dispatches up to, in oneDNN's names ("avx2", "avx512_core_bf16"): the CPU's best,
// capped with kiln's ISA tier (cpu::isa()).
std::string isa();
bool enabled();
void set_enabled(bool enabled);
int verbose();
// kiln's lines for oneDNN steps and oneDNN's own verbose (process-wide in oneDNN).
void set_verbose(int level);
class ScopedVerbose : public ScopedFlags {
 public:
  explicit ScopedVerbose(int level) : ScopedFlags(Flags{.onednn_verbose = level}) {}
};
class ScopedEnabled : public ScopedFlags {
 public:
  explicit ScopedEnabled(bool enabled) : ScopedFlags(Flags{.onednn = enabled}) {}
};
namespace primitive_cache {
int size();
int capacity();
void set_capacity(int capacity);
void clear();
}  // namespace primitive_cache
}  // namespace onednn

namespace blas {
bool is_built();
bool is_available();
std::string version();
// The library and its build configuration ("OpenBLAS 0.3.21 DYNAMIC_ARCH ...").
std::string library();
bool enabled();
void set_enabled(bool enabled);
int verbose();
void set_verbose(int level);
class ScopedVerbose : public ScopedFlags {
 public:
  explicit ScopedVerbose(int level) : ScopedFlags(Flags{.blas_verbose = level}) {}
};
class ScopedEnabled : public ScopedFlags {
 public:
  explicit ScopedEnabled(bool enabled) : ScopedFlags(Flags{.blas = enabled}) {}
};
}  // namespace blas

namespace cpu {
// Every instruction-set extension the CPU offers, e.g. {"AVX2", "FMA", "AVX512", "AVX512_BF16", "AMX_BF16"}.
std::vector<std::string> capability();
// The CPU's best ISA tier: "amx", "avx512_bf16", "avx512", "avx2" or "baseline" (runtime/cpu_info.h).
std::string best_isa();
// The tier kernels use (the CPU's best, capped by KILN_ISA or set_max_isa) and where it came from:
// "cpu", "KILN_ISA" or "api". Reading it fixes it.
std::string isa();
std::string isa_source();
// Caps the tier (one of the names above); an error once kernels were chosen.
void set_max_isa(std::string_view name);
}  // namespace cpu

namespace openmp {
bool is_available();
// The OpenMP specification date kiln was built against (e.g. 201511), 0 without OpenMP.
int version();
}  // namespace openmp

namespace cuda {
bool is_built();      // false: kiln has no CUDA backend yet
bool is_available();  // false
}  // namespace cuda

}  // namespace kiln::backends
