#include "backends/backends.h"

#include "backends/selection.h"
#include "backends/setting_text.h"
#if KILN_WITH_BLAS
#include "backends/blas/blas_backend.h"
#endif
#if KILN_WITH_ONEDNN
#include "backends/onednn/onednn_backend.h"
#endif
#include "core/error.h"
#include "runtime/cpu_info.h"

namespace kiln::backends {

int get(std::string_view name) {
  if (const SettingShorthand* shorthand = find_shorthand(name)) name = shorthand->targets[0];
  const SettingSlot& slot = find_setting(name);
  KILN_CHECK(slot.row->type != SettingType::sink, invalid_argument, "setting '", name, "' is not a number");
  return current_settings().value(slot.slot);
}

void set(std::string_view name, int value) {
  set_settings(Settings().set_by_name(name, value));
}

std::string get_text(std::string_view name) {
  return setting_text(current_settings(), name);
}

void set_text(std::string_view name, std::string_view text) {
  Settings changes;
  set_setting_from_text(changes, name, text, "setting");
  set_settings(changes);
}

void set_verbose_sink(std::shared_ptr<VerboseSink> sink) {
  set_settings(Settings().set_verbose_sink(std::move(sink)));
}

std::vector<std::pair<std::string, std::string>> current() {
  const Settings settings = current_settings();
  std::vector<std::pair<std::string, std::string>> values;
  for (const SettingSlot& slot : setting_slots()) {
    if (slot.row->type == SettingType::sink) {
      values.emplace_back(slot.name, settings.verbose_sink() ? "custom" : "stdout");
    } else {
      values.emplace_back(slot.name, setting_value_text(slot, settings.value(slot.slot)));
    }
  }
  return values;
}

std::vector<BackendInfo> list() {
  std::vector<BackendInfo> infos;
  for (const Backend* backend : all_backends()) {
    infos.push_back(
        {std::string(backend->name()), backend->is_built(), backend->is_available(), backend->version()});
  }
  return infos;
}

BackendInfo info(std::string_view name) {
  const Backend& backend = *find_backend(name);
  return {std::string(backend.name()), backend.is_built(), backend.is_available(), backend.version()};
}

void set_allocator(Allocator& allocator) {
  register_allocator(allocator);
  set_current_allocator(allocator);
}

void set_allocator(std::string_view name) {
  set_current_allocator(find_allocator(name));
}

Allocator& allocator() {
  return current_allocator();
}

// What only one backend has exists only where that backend was built; elsewhere it says so.
namespace {
[[noreturn, maybe_unused]] void not_built(const char* backend, const char* option) {
  fail(ErrorKind::not_implemented, "kiln was built without ", backend, " (", option,
       "=OFF at configure time)");
}
}  // namespace

namespace onednn {
#if KILN_WITH_ONEDNN
std::string isa() {
  return onednn_isa();
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
#else
std::string isa() {
  not_built("oneDNN", "KILN_WITH_ONEDNN");
}
namespace primitive_cache {
int size() {
  not_built("oneDNN", "KILN_WITH_ONEDNN");
}
int capacity() {
  not_built("oneDNN", "KILN_WITH_ONEDNN");
}
void set_capacity(int) {
  not_built("oneDNN", "KILN_WITH_ONEDNN");
}
void clear() {
  not_built("oneDNN", "KILN_WITH_ONEDNN");
}
}  // namespace primitive_cache
#endif
}  // namespace onednn

namespace blas {
std::string library() {
#if KILN_WITH_BLAS
  return blas_library();
#else
  not_built("BLAS", "KILN_WITH_BLAS");
#endif
}
std::string threading() {
#if KILN_WITH_BLAS
  return blas_threading();
#else
  not_built("BLAS", "KILN_WITH_BLAS");
#endif
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
