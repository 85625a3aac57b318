#include "runtime/parallel.h"

#include <algorithm>
#include <exception>
#include <mutex>

#include "core/events.h"
#include "runtime/threads.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace kiln {

bool in_parallel_region() {
#ifdef _OPENMP
  return omp_in_parallel() != 0;
#else
  return false;
#endif
}

int threads_for_work(int64_t work) {
  if (work < kParallelMinWork || in_parallel_region()) return 1;
  const int64_t by_work = std::max<int64_t>(1, work / kParallelMinWork);
  return static_cast<int>(std::min<int64_t>(intra_op_threads(), by_work));
}

void parallel_for(int64_t begin, int64_t end, int64_t cost_per_item, const RangeFn& fn) {
  if (end <= begin) return;
  const int64_t count = end - begin;
  const int64_t work = count * std::max<int64_t>(cost_per_item, 1);
  const int threads = static_cast<int>(std::min<int64_t>(threads_for_work(work), count));
  if (threads <= 1) {
    fn(begin, end);
    return;
  }
#ifdef _OPENMP
  // Exceptions must not cross the OpenMP region: keep the first one and rethrow it afterwards.
  std::exception_ptr first_error;
  std::mutex error_mutex;
  const uint64_t caller_event = events::current_event();  // the step: what workers allocate is its memory
#pragma omp parallel num_threads(threads)
  {
    const events::ScopedCurrentEvent as_caller(caller_event);
    const int64_t team = omp_get_num_threads();
    const int64_t rank = omp_get_thread_num();
    const int64_t chunk = (count + team - 1) / team;
    const int64_t chunk_begin = begin + rank * chunk;
    const int64_t chunk_end = std::min(end, chunk_begin + chunk);
    if (chunk_begin < chunk_end) {
      try {
        fn(chunk_begin, chunk_end);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
    }
  }
  if (first_error) std::rethrow_exception(first_error);
#else
  fn(begin, end);  // built without OpenMP: one thread
#endif
}

}  // namespace kiln
