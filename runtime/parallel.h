// The one way kernels use threads: split [begin, end) into chunks and run fn(chunk_begin, chunk_end)
// on kiln's intra-op threads (OpenMP, the runtime oneDNN uses here, so there is one pool).
// `cost_per_item` is a rough count of scalar operations per index; small loops run inline on the
// caller, because waking a team costs more than they do. Kernels never call OpenMP themselves.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>

namespace kiln {

// Below this many operations in total a loop runs on the calling thread.
inline constexpr int64_t kParallelMinWork = 32 * 1024;

// The loop body, borrowed for one parallel_for call: unlike a std::function it never allocates
// (one built from a lambda capturing many locals by reference did, on every call on the run path).
class RangeFn {
 public:
  template <typename Fn, typename = std::enable_if_t<!std::is_same_v<std::decay_t<Fn>, RangeFn>>>
  RangeFn(Fn&& fn)  // NOLINT(google-explicit-constructor): lambdas convert, as to std::function
      : body_(const_cast<void*>(static_cast<const void*>(std::addressof(fn)))),
        call_([](void* body, int64_t begin, int64_t end) {
          (*static_cast<std::remove_reference_t<Fn>*>(body))(begin, end);
        }) {}
  void operator()(int64_t begin, int64_t end) const { call_(body_, begin, end); }

 private:
  void* body_;
  void (*call_)(void*, int64_t, int64_t);
};

void parallel_for(int64_t begin, int64_t end, int64_t cost_per_item, const RangeFn& fn);

// Threads parallel_for would use for `work` operations (1 when it would run inline).
int threads_for_work(int64_t work);

// True while the calling thread is inside a parallel_for body (nested loops then run inline).
bool in_parallel_region();

}  // namespace kiln
