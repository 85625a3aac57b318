// The profiler's API: start a profile, run, stop it and get the event tree (profiler/trace.h).
//
//   kiln::profiler::Profile profile({.record_shapes = true, .profile_memory = true});
//   profile.start();
//   session.run(inputs);
//   { kiln::profiler::RecordFunction annotation("postprocess"); ... }
//   kiln::profiler::Trace trace = profile.stop();
//   std::puts(kiln::profiler::key_averages(trace, GroupBy::op).table().c_str());
//
// Recording is process-wide: every thread's runs, steps, inter-op tasks, annotations and (with
// profile_memory) allocations through kiln's allocator registry, one profile at a time.
#pragma once

#include <memory>
#include <string_view>

#include "core/events.h"
#include "profiler/trace.h"

namespace kiln::profiler {

struct ProfileOptions {
  bool record_shapes = true;   // steps carry their input and output shapes, dtypes and layouts
  bool profile_memory = true;  // allocations and frees, and each run's arena, allocations and peak
};

class Profile {
 public:
  explicit Profile(ProfileOptions options = {}) : options_(options) {}
  ~Profile();  // stops recording if this profile still is
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  // Starts recording, dropping whatever was recorded before. Throws kiln::Error (runtime) while
  // another profile records.
  void start();
  // Stops recording and returns the event tree of everything recorded since start() (or discard()).
  Trace stop();
  // Drops what was recorded so far and goes on recording (a schedule's warm-up ending).
  void discard();
  // The tree of what was recorded so far, which is then dropped; recording goes on (a schedule's
  // active phase ending while the next cycle starts at once).
  Trace take();
  bool recording() const { return recording_; }
  const ProfileOptions& options() const { return options_; }

 private:
  ProfileOptions options_;
  bool recording_ = false;
};

// A profile for a scope: records from construction to destruction, then fills `trace`.
class ScopedProfile {
 public:
  ScopedProfile(Trace& trace, ProfileOptions options = {}) : trace_(trace), profile_(options) {
    profile_.start();
  }
  ~ScopedProfile() { trace_ = profile_.stop(); }
  ScopedProfile(const ScopedProfile&) = delete;
  ScopedProfile& operator=(const ScopedProfile&) = delete;

 private:
  Trace& trace_;
  Profile profile_;
};

// A user annotation (PyTorch's record_function): an event named `name` around whatever this
// thread does while it lives; runs started inside are its children. Free when nothing records.
class RecordFunction {
 public:
  explicit RecordFunction(std::string_view name)
      : scope_(events::EventKind::annotation, events::recording() ? events::intern(name) : nullptr, 0) {}

 private:
  events::Scope scope_;
};

}  // namespace kiln::profiler
