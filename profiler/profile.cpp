#include "profiler/profile.h"

#include "core/error.h"

namespace kiln::profiler {
namespace {

uint32_t record_flags(const ProfileOptions& options) {
  return events::kRecordEvents | (options.profile_memory ? events::kRecordMemory : 0u);
}

}  // namespace

Profile::~Profile() {
  if (recording_) events::stop();
}

void Profile::start() {
  events::start(record_flags(options_));
  recording_ = true;
}

Trace Profile::stop() {
  KILN_CHECK(recording_, runtime, "Profile::stop(): the profile is not recording (start() it first)");
  recording_ = false;
  return build_trace(events::stop(), {options_.record_shapes, options_.profile_memory});
}

void Profile::discard() {
  KILN_CHECK(recording_, runtime, "Profile::discard(): the profile is not recording (start() it first)");
  events::collect();
}

Trace Profile::take() {
  KILN_CHECK(recording_, runtime, "Profile::take(): the profile is not recording (start() it first)");
  return build_trace(events::collect(), {options_.record_shapes, options_.profile_memory});
}

}  // namespace kiln::profiler
