// The profiler to a Chrome trace file, and what kiln reads back from trace files: the summary
// table and tidy's report.
#include <mutex>
#include <optional>

#include "capi/handles.h"
#include "profiler/export.h"
#include "profiler/key_averages.h"
#include "profiler/profile.h"
#include "profiler/trace_load.h"
#include "tidy/report.h"

namespace kiln::capi {
namespace {

// The C API's one profile: started and stopped by different calls, from any threads.
struct CProfile {
  std::mutex mutex;
  std::optional<profiler::Profile> profile;
};
CProfile& c_profile() {
  static CProfile* const profile = new CProfile;  // outlives static destructors (exit during a run)
  return *profile;
}

}  // namespace
}  // namespace kiln::capi

using namespace kiln;
using capi::guarded;
using capi::required;

extern "C" {

kiln_status* kiln_profiler_start(void) {
  return guarded([&] {
    capi::CProfile& c = capi::c_profile();
    std::lock_guard lock(c.mutex);
    KILN_CHECK(!c.profile, runtime, "the profiler is already recording (kiln_profiler_stop ends it)");
    profiler::Profile& profile = c.profile.emplace();
    try {
      profile.start();
    } catch (...) {
      c.profile.reset();
      throw;
    }
  });
}

kiln_status* kiln_profiler_stop(const char* trace_path) {
  return guarded([&] {
    capi::CProfile& c = capi::c_profile();
    std::optional<profiler::Trace> trace;
    {
      std::lock_guard lock(c.mutex);
      KILN_CHECK(c.profile, runtime, "the profiler is not recording (kiln_profiler_start starts it)");
      trace = c.profile->stop();
      c.profile.reset();
    }
    if (trace_path != nullptr) profiler::export_chrome_trace(*trace, trace_path);
  });
}

kiln_status* kiln_trace_summary(const char* trace_path, const char* group_by, char** table) {
  return guarded([&] {
    required(table, "table");
    *table = nullptr;
    const profiler::GroupBy group = profiler::parse_group_by(group_by ? group_by : "op");
    const profiler::Trace trace = trace::load(required(trace_path, "trace_path"));
    *table = capi::new_c_string(profiler::key_averages(trace, group).table());
  });
}

kiln_status* kiln_tidy_report(const char* trace_path, int json, char** report) {
  return guarded([&] {
    required(report, "report");
    *report = nullptr;
    const std::string path = required(trace_path, "trace_path");
    const tidy::TidyReport analysed = tidy::analyse(trace::load(path), path);
    *report = capi::new_c_string(json ? analysed.json() : analysed.text());
  });
}

}  // extern "C"
