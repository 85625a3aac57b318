#include "backends/control.h"

#include "backends/blas/blas_backend.h"
#include "backends/native/native_backend.h"
#include "backends/onednn/onednn_backend.h"
#include "core/error.h"
#include "runtime/cpu_info.h"

namespace kiln::backends {
namespace {

// The precision field of `family` ("conv" or "matmul") in `T` (Settings or Flags).
template <typename T>
auto& family_field(T& settings, std::string_view family) {
  if (family == "conv") return settings.conv_precision;
  if (family == "matmul") return settings.matmul_precision;
  fail(ErrorKind::invalid_argument, "unknown op family '", family, "' (known: conv, matmul)");
}

}  // namespace

bool deterministic() {
  return current_settings().deterministic;
}
void set_deterministic(bool on) {
  set_flags({.deterministic = on});
}
int autotune() {
  return current_settings().autotune;
}
void set_autotune(int candidates) {
  set_flags({.autotune = candidates});
}
Precision precision(std::string_view family) {
  Settings settings = current_settings();
  return family_field(settings, family);
}
void set_precision(std::string_view family, Precision precision) {
  Flags flags;
  family_field(flags, family) = precision;
  set_flags(flags);
}
int verbose() {
  return current_settings().verbose;
}
void set_verbose(int level) {
  set_flags({.verbose = level});
}
void set_verbose_sink(std::shared_ptr<VerboseSink> sink) {
  set_flags({.verbose_sink = std::move(sink)});
}

namespace native {
bool is_built() {
  return true;
}
bool is_available() {
  return native_backend().is_available();
}
std::string version() {
  return native_backend().version();
}
bool enabled() {
  return true;
}
}  // namespace native

namespace onednn {
bool is_built() {
  return true;
}
bool is_available() {
  return onednn_backend().is_available();
}
std::string version() {
  return onednn_backend().version();
}
std::string isa() {
  return onednn_isa();
}
bool enabled() {
  return current_settings().backend_enabled(kOnednnIndex);
}
void set_enabled(bool enabled) {
  set_flags({.onednn = enabled});
}
int verbose() {
  return current_settings().onednn_verbose;
}
void set_verbose(int level) {
  set_flags({.onednn_verbose = level});
}
namespace primitive_cache {
int size() {
  return onednn_primitive_cache_size();
}
int capacity() {
  return onednn_primitive_cache_capacity();
}
void set_capacity(int capacity) {
  set_onednn_primitive_cache_capacity(capacity);
}
void clear() {
  clear_onednn_primitive_cache();
}
}  // namespace primitive_cache
}  // namespace onednn

namespace blas {
bool is_built() {
  return true;
}
bool is_available() {
  return blas_backend().is_available();
}
std::string version() {
  return blas_backend().version();
}
std::string library() {
  return blas_library();
}
bool enabled() {
  return current_settings().backend_enabled(kBlasIndex);
}
void set_enabled(bool enabled) {
  set_flags({.blas = enabled});
}
int verbose() {
  return current_settings().blas_verbose;
}
void set_verbose(int level) {
  set_flags({.blas_verbose = level});
}
}  // namespace blas

namespace cpu {
std::vector<std::string> capability() {
  return cpu_capability().extensions();
}
std::string best_isa() {
  return std::string(isa_name(cpu_capability().best_isa()));
}
std::string isa() {
  return std::string(isa_name(isa_in_effect()));
}
std::string isa_source() {
  return isa_choice().source;
}
void set_max_isa(std::string_view name) {
  kiln::set_max_isa(parse_isa(name, "set_max_isa"));
}
}  // namespace cpu

namespace openmp {
bool is_available() {
  return version() != 0;
}
int version() {
#ifdef _OPENMP
  return _OPENMP;
#else
  return 0;
#endif
}
}  // namespace openmp

namespace cuda {
bool is_built() {
  return false;
}
bool is_available() {
  return false;
}
}  // namespace cuda

}  // namespace kiln::backends
