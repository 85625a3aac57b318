#include "runtime/interop.h"

#include <pthread.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <thread>
#include <vector>

namespace kiln {
namespace {

// The pool. It is created on first use and never destroyed: its threads wait for work until the
// process ends, and no static destructor can pull state out from under a task still running.
class InteropPool {
 public:
  // Size set by set_num_interop_threads (0: the environment's).
  void set_size(int threads) {
    std::lock_guard lock(mutex_);
    KILN_CHECK(workers_.empty(), runtime, "set_num_interop_threads(", threads,
               "): the inter-op pool already started with ", workers_.size(),
               " threads; set the count before the first inter-op work (run_async, fork, a run in "
               "parallel execution mode)");
    requested_ = threads;
  }

  int size() {
    std::lock_guard lock(mutex_);
    return size_locked();
  }

  std::string source() {
    std::lock_guard lock(mutex_);
    return requested_ > 0 ? "api" : environment().source;
  }

  bool started() {
    std::lock_guard lock(mutex_);
    return !workers_.empty();
  }

  void submit(std::unique_ptr<InteropTask> task) {
    {
      std::lock_guard lock(mutex_);
      if (workers_.empty()) start_locked();
      queue_.push_back(std::move(task));
    }
    work_signal_.notify_one();
  }

  bool run_one() {
    std::unique_ptr<InteropTask> task;
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty()) return false;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task->run();
    return true;
  }

  static thread_local bool is_worker;

 private:
  static const ThreadCount& environment() {
    static const ThreadCount count = interop_thread_count_from_environment(
        [](const char* name) -> const char* { return std::getenv(name); });
    return count;
  }

  int size_locked() const { return requested_ > 0 ? requested_ : environment().threads; }

  void start_locked() {
    const int threads = size_locked();
    for (int index = 0; index < threads; ++index) {
      workers_.emplace_back([this] { work(); });
      // Named so a debugger, top -H or a trace viewer shows whose threads these are.
      pthread_setname_np(workers_.back().native_handle(), str_cat("kiln-interop-", index).c_str());
    }
  }

  void work() {
    is_worker = true;
    for (;;) {
      std::unique_ptr<InteropTask> task;
      {
        std::unique_lock lock(mutex_);
        work_signal_.wait(lock, [&] { return !queue_.empty(); });
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task->run();
    }
  }

  std::mutex mutex_;
  std::condition_variable work_signal_;
  std::deque<std::unique_ptr<InteropTask>> queue_;
  std::vector<std::thread> workers_;
  int requested_ = 0;
};

thread_local bool InteropPool::is_worker = false;

InteropPool& pool() {
  static InteropPool* const instance = new InteropPool;
  return *instance;
}

}  // namespace

ThreadCount interop_thread_count_from_environment(EnvironmentLookup lookup) {
  const char* text = lookup("KILN_NUM_INTEROP_THREADS");
  if (text != nullptr && *text != '\0') {
    return {parse_thread_count(text, "KILN_NUM_INTEROP_THREADS"), "KILN_NUM_INTEROP_THREADS"};
  }
  return {available_cores(), "cores"};
}

void set_num_interop_threads(int threads) {
  KILN_CHECK(threads >= 1 && threads <= kMaxThreads, invalid_argument, "set_num_interop_threads(", threads,
             "): expected a thread count in 1..", kMaxThreads);
  pool().set_size(threads);
}

int get_num_interop_threads() {
  return pool().size();
}

std::string num_interop_threads_source() {
  return pool().source();
}

bool interop_pool_started() {
  return pool().started();
}

bool on_interop_thread() {
  return InteropPool::is_worker;
}

void submit_interop_task(std::unique_ptr<InteropTask> task) {
  task->submitted_under = events::current_event();
  pool().submit(std::move(task));
}

bool run_one_interop_task() {
  return pool().run_one();
}

void detail::FutureStateBase::wait_until_done() const {
  std::unique_lock lock(mutex_);
  if (!InteropPool::is_worker) {
    done_signal_.wait(lock, [&] { return done_; });
    return;
  }
  // A pool thread waiting for another task runs queued tasks meanwhile: the task it waits for may
  // be among them, behind it in the queue with every other pool thread busy.
  while (!done_) {
    lock.unlock();
    const bool ran = run_one_interop_task();
    lock.lock();
    if (!ran) done_signal_.wait_for(lock, std::chrono::milliseconds(1), [&] { return done_; });
  }
}

}  // namespace kiln
