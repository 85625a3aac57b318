#include "core/events.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <set>

#include "core/error.h"

namespace kiln::events {

std::atomic<uint32_t> g_record_flags{0};
thread_local bool t_quiet = false;

namespace {

struct Chunk {
  Event events[kEventsPerChunk];
};

// One thread's events. The owning thread writes `current` without a lock and publishes each event
// by storing `count`; it takes `mutex` only to replace a full chunk or keep an object alive. A
// collection takes `mutex` and reads what is published.
struct ThreadBuffer {
  std::mutex mutex;
  std::unique_ptr<Chunk> current = std::make_unique<Chunk>();
  std::atomic<size_t> count{0};
  size_t collected = 0;  // events of `current` a collection already took (under mutex)
  struct FullChunk {
    std::unique_ptr<Chunk> chunk;
    size_t from;  // events before this were collected while it was current
  };
  std::vector<FullChunk> full;  // under mutex
  // What this thread's events point into: the object it kept last, and those it kept before since
  // the last collection (both under mutex). A collection takes the list and a reference to the
  // last one, so an event written after a collection still finds its plan alive at the next.
  std::vector<std::shared_ptr<const void>> kept;
  std::shared_ptr<const void> last_kept;
  uint64_t next_id = 0;  // owner only
  uint32_t index = 0;
  bool retired = false;  // its thread has exited (under the registry's mutex)
};

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::vector<ThreadInfo> threads;  // per buffer index, never shrinks
  std::mutex intern_mutex;
  std::set<std::string, std::less<>> interned;
};

// Never destroyed: threads may record while static destructors run.
Registry& registry() {
  static Registry* const instance = new Registry;
  return *instance;
}

std::atomic<int64_t> g_live_bytes{0};
std::atomic<uint32_t> g_generation{0};

thread_local uint64_t t_current_event = 0;
thread_local ThreadBuffer* t_buffer = nullptr;
thread_local bool t_exited = false;

// Retires the thread's buffer when the thread exits; its events stay for the next collection.
struct Retirer {
  ~Retirer() {
    if (t_buffer == nullptr) return;
    Registry& reg = registry();
    std::lock_guard lock(reg.mutex);
    t_buffer->retired = true;
    t_buffer = nullptr;
    t_exited = true;
  }
};
thread_local Retirer t_retirer;

ThreadBuffer* thread_buffer() {
  if (t_buffer != nullptr || t_exited) return t_buffer;
  auto buffer = std::make_shared<ThreadBuffer>();
  ThreadInfo info;
  info.os_thread = static_cast<int64_t>(syscall(SYS_gettid));
  char name[32] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof name) == 0) info.name = name;
  Registry& reg = registry();
  {
    std::lock_guard lock(reg.mutex);
    buffer->index = static_cast<uint32_t>(reg.threads.size());
    reg.threads.push_back(std::move(info));
    reg.buffers.push_back(buffer);
  }
  (void)&t_retirer;  // odr-use: its destructor runs when this thread exits
  t_buffer = buffer.get();
  return t_buffer;
}

uint64_t next_id(ThreadBuffer& buffer) {
  // Thread index in the high bits: unique without a shared counter, and below 2^53 (exact in JSON).
  return (static_cast<uint64_t>(buffer.index + 1) << 32) | ++buffer.next_id;
}

void write(ThreadBuffer& buffer, Event event) {
  event.thread = buffer.index;
  size_t count = buffer.count.load(std::memory_order_relaxed);
  if (count == kEventsPerChunk) {
    std::lock_guard lock(buffer.mutex);
    buffer.full.push_back({std::move(buffer.current), buffer.collected});
    buffer.current = std::make_unique<Chunk>();
    buffer.collected = 0;
    buffer.count.store(0, std::memory_order_relaxed);
    count = 0;
  }
  buffer.current->events[count] = event;
  buffer.count.store(count + 1, std::memory_order_release);
}

// Takes every published event out of every buffer (into `out` when given, else dropped). `final`:
// recording has stopped, so buffers let go of the objects they kept (a plan's weights must not
// outlive its session because it was once profiled).
void drain_locked(Registry& reg, Collected* out, bool final) {
  for (const std::shared_ptr<ThreadBuffer>& buffer : reg.buffers) {
    std::lock_guard lock(buffer->mutex);
    const size_t count = buffer->count.load(std::memory_order_acquire);
    if (out != nullptr) {
      // Only this profile's events: one written late by a run of an earlier profile may point into
      // a plan this profile never kept alive.
      const auto current = static_cast<uint16_t>(g_generation.load(std::memory_order_relaxed));
      const auto take = [&](const Event* begin, const Event* end) {
        for (const Event* event = begin; event != end; ++event) {
          if (event->generation == current) out->events.push_back(*event);
        }
      };
      for (const ThreadBuffer::FullChunk& full : buffer->full)
        take(full.chunk->events + full.from, full.chunk->events + kEventsPerChunk);
      take(buffer->current->events + buffer->collected, buffer->current->events + count);
      for (std::shared_ptr<const void>& kept : buffer->kept) out->kept.push_back(std::move(kept));
      if (buffer->last_kept) out->kept.push_back(buffer->last_kept);
    }
    buffer->full.clear();
    buffer->kept.clear();
    if (final) buffer->last_kept.reset();
    buffer->collected = count;
  }
  std::erase_if(reg.buffers, [](const std::shared_ptr<ThreadBuffer>& buffer) { return buffer->retired; });
  if (out != nullptr) out->threads = reg.threads;
}

}  // namespace

const char* kind_name(EventKind kind) {
  switch (kind) {
    case EventKind::run:
      return "run";
    case EventKind::step:
      return "step";
    case EventKind::reorder:
      return "reorder";
    case EventKind::interop_task:
      return "interop_task";
    case EventKind::memory:
      return "memory";
    case EventKind::annotation:
      return "annotation";
    case EventKind::plan:
      return "plan";
  }
  return "unknown";
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint32_t generation() {
  return g_generation.load(std::memory_order_relaxed);
}

uint64_t current_event() {
  return t_current_event;
}

ScopedCurrentEvent::ScopedCurrentEvent(uint64_t id) : saved_(t_current_event) {
  t_current_event = id;
}

ScopedCurrentEvent::~ScopedCurrentEvent() {
  t_current_event = saved_;
}

Scope::Scope(EventKind kind, const void* subject, int64_t value, uint64_t parent, uint32_t generation) {
  if (!recording()) return;
  ThreadBuffer* buffer = thread_buffer();
  if (buffer == nullptr) return;
  id_ = next_id(*buffer);
  parent_ = parent;
  previous_current_ = t_current_event;
  t_current_event = id_;
  subject_ = subject;
  value_ = value;
  generation_ = generation;
  kind_ = kind;
  start_ns_ = now_ns();
}

void Scope::finish() {
  const int64_t end = now_ns();
  if (t_current_event == id_) t_current_event = previous_current_;
  ThreadBuffer* buffer = thread_buffer();
  if (buffer == nullptr) return;
  Event event;
  event.id = id_;
  event.parent_id = parent_;
  event.start_ns = start_ns_;
  event.end_ns = end;
  event.subject = subject_;
  event.value = value_;
  event.kind = kind_;
  event.generation = static_cast<uint16_t>(generation_);
  write(*buffer, event);
}

void record_memory(int64_t bytes, const char* tag) {
  const int64_t total = g_live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (!recording_memory()) return;
  ThreadBuffer* buffer = thread_buffer();
  if (buffer == nullptr) return;
  Event event;
  event.id = next_id(*buffer);
  event.parent_id = t_current_event;
  event.start_ns = event.end_ns = now_ns();
  event.subject = tag;
  event.value = bytes;
  event.total = total;
  event.kind = EventKind::memory;
  event.generation = static_cast<uint16_t>(generation());
  write(*buffer, event);
}

size_t thread_buffers() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  return reg.buffers.size();
}

int64_t live_bytes() {
  return g_live_bytes.load(std::memory_order_relaxed);
}

const char* intern(std::string_view name) {
  Registry& reg = registry();
  std::lock_guard lock(reg.intern_mutex);
  auto it = reg.interned.find(name);
  if (it == reg.interned.end()) it = reg.interned.emplace(name).first;
  return it->c_str();
}

void keep_alive(const std::shared_ptr<const void>& object) {
  ThreadBuffer* buffer = thread_buffer();
  if (buffer == nullptr) return;
  // Once per run, uncontended: a collection is the only other taker of this lock.
  std::lock_guard lock(buffer->mutex);
  if (buffer->last_kept == object) return;
  if (buffer->last_kept) buffer->kept.push_back(std::move(buffer->last_kept));
  buffer->last_kept = object;
}

void start(uint32_t flags) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  KILN_CHECK(g_record_flags.load() == 0, runtime,
             "a profile is already recording (one at a time: stop it before starting another)");
  drain_locked(reg, nullptr, /*final=*/true);
  // Skips the values whose low 16 bits are 0: a tag of 0 (a scope given a generation taken before
  // any profile started) then never matches.
  uint32_t next = g_generation.load() + 1;
  if (static_cast<uint16_t>(next) == 0) ++next;
  g_generation.store(next);
  g_record_flags.store(flags | kRecordEvents);
}

Collected stop() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  g_record_flags.store(0);
  Collected collected;
  drain_locked(reg, &collected, /*final=*/true);
  return collected;
}

Collected collect() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  Collected collected;
  drain_locked(reg, &collected, /*final=*/false);
  return collected;
}

}  // namespace kiln::events
