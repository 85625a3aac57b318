// The profiler's recording half: what runs write while a profile is recording, read back by the
// profiler layer (profiler/) when it stops. It lives in core because every layer records into it:
// the allocator (memory), the inter-op pool (tasks), the executor (runs and steps) and users
// (annotations).
//
// Cost. Off, a recording site is one relaxed load of a flag (the executor reads it once per run and
// then branches on a bool per step). On, an event is two clock reads and one 64-byte write into the
// calling thread's own buffer: no lock and no allocation, except when a thread's buffer fills a
// chunk of kEventsPerChunk events (then it takes its own buffer's lock, which only a collection
// also takes, and allocates the next chunk). A run also takes that lock once to keep its plan alive.
//
// Events are written once, when they end (a scope keeps its start on the stack), so a collection
// never sees half an event. Parents: each thread has a current event (the innermost open scope);
// a new scope's parent is that, unless the caller names one (an inter-op task names the event that
// was current where it was submitted, so tasks sit under the run or annotation that queued them).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::events {

enum class EventKind : uint8_t {
  run,           // Session::run: subject is the Plan, value its intra-op threads
  step,          // one plan step: subject is the Plan, value the step's index
  reorder,       // a plan step whose op is Reorder (a layout conversion planning inserted)
  interop_task,  // a task on the inter-op pool: subject is its name (a static string)
  memory,        // an allocation (value > 0) or free (value < 0) of bytes; subject its tag
  annotation,    // a user's record_function scope: subject is its interned name
  plan,          // Session planning for new input shapes or settings: subject is the Plan once built
                 // (null if building failed)
};
const char* kind_name(EventKind kind);

struct Event {
  uint64_t id = 0;         // unique in the process, > 0
  uint64_t parent_id = 0;  // 0: a root
  int64_t start_ns = 0;    // steady clock (CLOCK_MONOTONIC), ns; a memory event starts and ends at once
  int64_t end_ns = 0;
  const void* subject = nullptr;  // per kind, above
  int64_t value = 0;              // per kind, above
  int64_t total = 0;              // memory: bytes live through the allocator registry after this event
  uint32_t thread = 0;            // index into collected threads (ThreadInfo)
  EventKind kind = EventKind::run;
  uint16_t generation = 0;  // the profile it belongs to (low bits of generation()); others are dropped
};

// What is being recorded. Flags are read with relaxed loads: a run started before start() or
// after stop() may be recorded in part, and start() drops whatever was left from before.
enum RecordFlags : uint32_t {
  kRecordEvents = 1,  // runs, steps, tasks, annotations
  kRecordMemory = 2,  // memory events as well
};
extern std::atomic<uint32_t> g_record_flags;
extern thread_local bool t_quiet;  // see ScopedQuiet
inline bool recording() {
  return g_record_flags.load(std::memory_order_relaxed) != 0 && !t_quiet;
}
inline bool recording_memory() {
  return (g_record_flags.load(std::memory_order_relaxed) & kRecordMemory) != 0 && !t_quiet;
}

// While one is alive, the calling thread records nothing: planning's own runs of a model (the
// error budget's measurement, graph/error_budget.h) are not the user's, and a profile of them would
// count them as runs.
class ScopedQuiet {
 public:
  ScopedQuiet() : previous_(t_quiet) { t_quiet = true; }
  ~ScopedQuiet() { t_quiet = previous_; }
  ScopedQuiet(const ScopedQuiet&) = delete;
  ScopedQuiet& operator=(const ScopedQuiet&) = delete;

 private:
  bool previous_;
};

int64_t now_ns();

// Bumped by every start(): which profile is recording. An event is collected only by the profile
// of its generation, so a run that began under one profile and ends under the next cannot hand the
// next one events pointing into a plan it never kept alive.
uint32_t generation();

// The calling thread's current event (0: none); what a scope opened now would take as parent.
uint64_t current_event();

// Makes `id` this thread's current event for a scope, without recording anything: parallel_for's
// workers take their caller's step, so what they allocate is that step's memory.
class ScopedCurrentEvent {
 public:
  explicit ScopedCurrentEvent(uint64_t id);
  ~ScopedCurrentEvent();
  ScopedCurrentEvent(const ScopedCurrentEvent&) = delete;
  ScopedCurrentEvent& operator=(const ScopedCurrentEvent&) = delete;

 private:
  uint64_t saved_;
};

// An event from construction to destruction on this thread. Inactive (and free) when nothing is
// recording at construction; while alive, it is the thread's current event. It belongs to the
// profile of `generation` (default: the one recording now); events pointing into a plan pass the
// generation in which the plan was kept. Scopes end in the reverse order they began; one that ends
// out of order leaves the thread's current event alone.
class Scope {
 public:
  Scope(EventKind kind, const void* subject, int64_t value) : Scope(kind, subject, value, current_event()) {}
  Scope(EventKind kind, const void* subject, int64_t value, uint64_t parent)
      : Scope(kind, subject, value, parent, generation()) {}
  Scope(EventKind kind, const void* subject, int64_t value, uint64_t parent, uint32_t generation);
  ~Scope() {
    if (id_ != 0) finish();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  uint64_t id() const { return id_; }
  // When it began (0 when inactive): with its thread, what names the event in the collected trace.
  int64_t start_ns() const { return start_ns_; }
  // For a subject known only at the end (a plan's event learns its plan once it is built).
  void set_subject(const void* subject) { subject_ = subject; }

 private:
  void finish();

  uint64_t id_ = 0;
  uint64_t parent_ = 0;
  uint64_t previous_current_ = 0;
  int64_t start_ns_ = 0;
  const void* subject_ = nullptr;
  int64_t value_ = 0;
  uint32_t generation_ = 0;
  EventKind kind_ = EventKind::run;
};

// An allocation (bytes > 0) or a free (bytes < 0) through the allocator registry. Every call keeps
// the live total; events are written only while memory is recorded.
void record_memory(int64_t bytes, const char* tag);
// Bytes allocated through the allocator registry and not yet freed, process-wide.
int64_t live_bytes();

// A stable copy of `name` (one per distinct name, kept for the process): annotations' subjects.
const char* intern(std::string_view name);

// Keeps `object` (a plan) alive until the events that reference it have been collected: until the
// collection after this thread keeps another object, or recording stops. Takes this thread's
// buffer lock (uncontended but for a collection): once per run, never per event.
void keep_alive(const std::shared_ptr<const void>& object);

struct ThreadInfo {
  int64_t os_thread = 0;  // the kernel's thread id (gettid)
  std::string name;       // pthread name when the thread first recorded ("kiln-interop-0", ...)
};

// What a collection returns: events of every thread in no particular order, the threads they name,
// and the objects their subjects point into, kept alive.
struct Collected {
  std::vector<Event> events;
  std::vector<ThreadInfo> threads;
  std::vector<std::shared_ptr<const void>> kept;
};

// Starts recording with `flags`, dropping every event recorded before. Throws kiln::Error (runtime)
// when recording is already on: one profile at a time.
void start(uint32_t flags);
// Stops recording and returns what was recorded since start(). Events of scopes still open (a run
// on another thread) are not in it.
Collected stop();
// Returns what was recorded so far and drops it, recording on (a schedule's warm-up ending).
Collected collect();

// Threads with a buffer: those that recorded and still run, and exited ones whose events the next
// collection takes (then their buffers go).
size_t thread_buffers();

// Events per chunk of a thread's buffer.
inline constexpr size_t kEventsPerChunk = 4096;

}  // namespace kiln::events
