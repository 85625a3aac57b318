// Lines about the library calls kernels make (BLAS: one per cblas_sgemm call), for the run on the
// calling thread. A run with verbose on installs a log; kernels without one pay a null check.
#pragma once

#include <string_view>

namespace kiln {

class CallLog {
 public:
  virtual ~CallLog() = default;
  // Whether calls made by `backend`'s kernels are logged in this run.
  virtual bool wants(std::string_view backend) const = 0;
  // `line` has no trailing newline.
  virtual void write(std::string_view line) const = 0;
};

// The innermost log installed on the calling thread, or null.
const CallLog* call_log();

class ScopedCallLog {
 public:
  explicit ScopedCallLog(const CallLog* log);
  ~ScopedCallLog();
  ScopedCallLog(const ScopedCallLog&) = delete;
  ScopedCallLog& operator=(const ScopedCallLog&) = delete;

 private:
  const CallLog* previous_;
};

}  // namespace kiln
