// kiln::backends: the public face of kiln's backends and settings, in the shape of PyTorch's
// torch.backends. Settings are rows of one table (setting_table.h); each is read and set here by
// name, globally, or for a scope on one thread with ScopedSettings (settings.h). Backend facts
// (built, available, version) are the same for every backend; what only one backend has (oneDNN's
// primitive cache, the BLAS library's configuration) lives in its namespace. docs/backends.md lists
// every setting with its default.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/settings.h"
#include "backends/verbose_sink.h"
#include "core/allocator.h"

namespace kiln::backends {

// A setting's value as the calling thread sees it, and its global value, by user-facing name
// ("deterministic", "onednn_enabled", "conv_precision": precisions are Precision values). Unknown
// names throw kiln::Error (invalid_argument) listing every known one.
int get(std::string_view name);
void set(std::string_view name, int value);
// The same with values as text ("bf16", "on", "onednn,native"), by a row's name, a shorthand's or
// one of PyTorch's names (setting_aliases.h: "mkldnn.enabled", "mha.fastpath_enabled",
// "quantized.engine"), whose values are mapped both ways.
std::string get_text(std::string_view name);
void set_text(std::string_view name, std::string_view text);
void set_verbose_sink(std::shared_ptr<VerboseSink> sink);
// Every setting's value on this thread, in table order, as text ("onednn_enabled=1", "conv_precision=fp32").
std::vector<std::pair<std::string, std::string>> current();

// What every backend reports, by name ("onednn", "blas", "native").
struct BackendInfo {
  std::string name;
  bool built = true;
  bool available = false;
  std::string version;
};
std::vector<BackendInfo> list();
BackendInfo info(std::string_view name);

// The allocator arenas, scratch buffers and tensors take memory from from now on (allocations
// made earlier are returned to the allocator they came from). `allocator` must outlive its use;
// it is registered under its name. What oneDNN allocates inside its own calls does not go
// through it (oneDNN 2.6 has no allocator hook for CPU engines).
void set_allocator(Allocator& allocator);
// By registered name: "default", "counting" or one set_allocator registered.
void set_allocator(std::string_view name);
Allocator& allocator();

// Backend-specific calls throw kiln::Error (not_implemented) where kiln was built without that
// backend (info(name).built is false).
namespace onednn {
// The ISA oneDNN dispatches up to, in oneDNN's names ("avx2", "avx512_core_bf16"): the CPU's best,
// capped with kiln's ISA tier (cpu::isa()).
std::string isa();
namespace primitive_cache {
int size();
int capacity();
void set_capacity(int capacity);
void clear();
}  // namespace primitive_cache
}  // namespace onednn

namespace blas {
// The library and its build configuration ("OpenBLAS 0.3.21 DYNAMIC_ARCH ...").
std::string library();
// Its threading and how kiln uses it: "OpenMP; kiln calls it on 1 thread (...)".
std::string threading();
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
