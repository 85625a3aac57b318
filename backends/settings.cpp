#include "backends/settings.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "backends/selection.h"
#include "core/error.h"

namespace kiln {
namespace {

std::mutex& global_mutex() {
  static std::mutex mutex;
  return mutex;
}

// The defaults with the rows' environment variables applied, read once.
Settings startup_settings() {
  Settings settings = Settings::defaults();
  for (const SettingSlot& slot : setting_slots()) {
    if (slot.row->env.empty()) continue;
    const std::string name(slot.row->env);
    const char* text = std::getenv(name.c_str());
    if (text != nullptr && *text != '\0') settings.set(slot.slot, parse_setting_value(slot, text, name));
  }
  return settings;
}

Settings& global_storage() {
  // A throwing initializer (a malformed variable) leaves it unset: every caller hears of it.
  static Settings settings = startup_settings();
  return settings;
}

// The calling thread's scoped overrides (the merge of every live ScopedSettings on it).
Settings& thread_overrides() {
  thread_local Settings settings;
  return settings;
}

// A library's own verbose switch is process-wide while kiln's settings are per thread: kiln keeps,
// per backend, the global level and how many open scopes ask for each level, and gives the
// library the highest.
struct LibraryVerbose {
  int global = 0;
  std::array<int, kMaxVerboseLevel + 1> open_scopes{};
  int applied = 0;
};

std::mutex& library_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::array<LibraryVerbose, kBackendCount>& library_verbose() {
  static std::array<LibraryVerbose, kBackendCount> levels;
  return levels;
}

// Under library_mutex(): tells the backend when the level it should run at changed.
void update_library_verbose(int backend) {
  LibraryVerbose& state = library_verbose()[backend];
  int level = state.global;
  for (int l = kMaxVerboseLevel; l > level; --l) {
    if (state.open_scopes[l] > 0) level = l;
  }
  if (level == state.applied) return;
  all_backends()[backend]->set_library_verbose(level);
  state.applied = level;
}

constexpr BackendSettingKey kBackendVerbose("verbose");

// A scope asking for `changes`' per-backend verbose levels opens (+1) or closes (-1).
void count_library_verbose(const Settings& changes, int delta) {
  std::lock_guard lock(library_mutex());
  for (int backend = 0; backend < kBackendCount; ++backend) {
    if (!changes.has(kBackendVerbose.first + backend)) continue;
    library_verbose()[backend].open_scopes[changes.get(kBackendVerbose, backend)] += delta;
    update_library_verbose(backend);
  }
}

}  // namespace

Settings Settings::defaults() {
  Settings settings;
  for (const SettingSlot& slot : setting_slots()) {
    if (slot.row->type == SettingType::sink) continue;
    settings.values_[slot.slot] = slot.row->default_value;
    settings.set_[slot.slot] = true;
  }
  settings.sink_set_ = true;
  return settings;
}

Settings& Settings::set(int slot, int value) {
  const SettingSlot& described = setting_slots()[slot];
  check_setting_value(described, value);
  if (described.backend >= 0 && described.row->name == "enabled" && value == 0) {
    const Backend& backend = *all_backends()[described.backend];
    KILN_CHECK(backend.can_be_disabled(), invalid_argument, "setting '", described.name, "': the ",
               backend.name(), " backend cannot be disabled (it is the fallback for every op)");
  }
  values_[slot] = value;
  set_[slot] = true;
  return *this;
}

Settings& Settings::set_by_name(std::string_view name, int value) {
  if (const SettingShorthand* shorthand = find_shorthand(name)) {
    for (std::string_view target : shorthand->targets) set(find_setting(target).slot, value);
    return *this;
  }
  return set(find_setting(name).slot, value);
}

Settings& Settings::set_verbose_sink(std::shared_ptr<VerboseSink> sink) {
  sink_ = std::move(sink);
  sink_set_ = true;
  return *this;
}

void Settings::overlay(const Settings& changes) {
  for (int slot = 0; slot < kSettingSlotCount; ++slot) {
    if (changes.set_[slot]) {
      values_[slot] = changes.values_[slot];
      set_[slot] = true;
    }
  }
  if (changes.sink_set_) {
    sink_ = changes.sink_;
    sink_set_ = true;
  }
}

int Settings::verbose_for(int backend) const {
  return std::max(get("verbose"), get(kBackendVerbose, backend));
}

int Settings::max_verbose() const {
  int level = get("verbose");
  for (int backend = 0; backend < kBackendCount; ++backend)
    level = std::max(level, get(kBackendVerbose, backend));
  return level;
}

int Settings::threads() const {
  const int threads = get("threads");
  return threads > 0 ? threads : environment_thread_count().threads;
}

bool Settings::threads_are_default() const {
  return get("threads") == 0 && environment_thread_count().source == "cores";
}

std::array<int32_t, kSettingSlotCount> Settings::plan_values() const {
  std::array<int32_t, kSettingSlotCount> values{};
  for (const SettingSlot& slot : setting_slots()) {
    if (slot.row->changes_plan) values[slot.slot] = values_[slot.slot];
  }
  values[SettingKey("threads").slot] = threads();
  return values;
}

std::string Settings::describe_plan_settings() const {
  std::string enabled;
  for (int backend = 0; backend < kBackendCount; ++backend) {
    if (backend_enabled(backend)) enabled += str_cat(enabled.empty() ? "" : ",", kBackendNames[backend]);
  }
  std::string text = str_cat(enabled, ";threads=", threads());
  for (const SettingSlot& slot : setting_slots()) {
    const SettingRow& row = *slot.row;
    if (!row.changes_plan || row.per_backend || row.name == "threads") continue;
    if (values_[slot.slot] == row.default_value) continue;
    text += str_cat(";", slot.name, "=", setting_value_text(slot, values_[slot.slot]));
  }
  return text;
}

Settings current_settings(const Settings& session) {
  Settings settings;
  {
    std::lock_guard lock(global_mutex());
    settings = global_storage();
  }
  settings.overlay(session);
  settings.overlay(thread_overrides());
  return settings;
}

Settings global_settings() {
  std::lock_guard lock(global_mutex());
  return global_storage();
}

void set_settings(const Settings& changes) {
  {
    std::lock_guard lock(global_mutex());
    global_storage().overlay(changes);
  }
  if (changes.has(SettingKey("threads").slot)) set_process_intra_op_threads(changes.get("threads"));
  std::lock_guard lock(library_mutex());
  for (int backend = 0; backend < kBackendCount; ++backend) {
    if (!changes.has(kBackendVerbose.first + backend)) continue;
    library_verbose()[backend].global = changes.get(kBackendVerbose, backend);
    update_library_verbose(backend);
  }
}

ScopedSettings::ScopedSettings(const Settings& changes) : previous_(thread_overrides()), changes_(changes) {
  thread_overrides().overlay(changes);
  if (changes.has(SettingKey("threads").slot)) {
    threads_ = std::make_unique<ScopedIntraOpThreads>(changes.threads());
  }
  count_library_verbose(changes, +1);
}

ScopedSettings::~ScopedSettings() {
  thread_overrides() = std::move(previous_);
  threads_.reset();
  count_library_verbose(changes_, -1);
}

ScopedRunLibraryVerbose::ScopedRunLibraryVerbose(const Settings& run) {
  for (int backend = 0; backend < kBackendCount; ++backend) {
    if (run.get(kBackendVerbose, backend) > 0)
      levels_.set(kBackendVerbose, backend, run.get(kBackendVerbose, backend));
  }
  count_library_verbose(levels_, +1);
}

ScopedRunLibraryVerbose::~ScopedRunLibraryVerbose() {
  count_library_verbose(levels_, -1);
}

void set_num_threads(int threads) {
  KILN_CHECK(threads >= 1 && threads <= kMaxThreads, invalid_argument, "set_num_threads(", threads,
             "): expected a thread count in 1..", kMaxThreads);
  set_settings(Settings().set("threads", threads));
}

int get_num_threads() {
  return current_settings().threads();
}

std::string num_threads_source() {
  constexpr int kThreads = SettingKey("threads").slot;
  if (thread_overrides().has(kThreads) && thread_overrides().value(kThreads) > 0) return "scope";
  if (global_settings().value(kThreads) > 0) return "api";
  return environment_thread_count().source;
}

int library_verbose_requested(int backend) {
  std::lock_guard lock(library_mutex());
  return library_verbose()[backend].applied;
}

}  // namespace kiln
