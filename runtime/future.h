// A Future is the result of work running elsewhere (kiln::fork, Session::run_async): wait() blocks
// until it is done and returns its value or rethrows its exception. Copies share one result, and
// wait() may be called any number of times, from any thread.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

#include "core/error.h"

namespace kiln {
namespace detail {

struct Unit {};
template <typename T>
using FutureValue = std::conditional_t<std::is_void_v<T>, Unit, T>;

// What every future shares whatever its type: done or not, and the exception if it failed.
class FutureStateBase {
 public:
  bool ready() const {
    std::lock_guard lock(mutex_);
    return done_;
  }
  // Blocks until done. On an inter-op thread it runs queued inter-op tasks meanwhile, so a task
  // waiting for another task cannot deadlock the pool (runtime/interop.cpp).
  void wait_until_done() const;

  void fail(std::exception_ptr error) {
    {
      std::lock_guard lock(mutex_);
      error_ = std::move(error);
      done_ = true;
    }
    done_signal_.notify_all();
  }

 protected:
  void rethrow_if_failed() const {
    if (error_) std::rethrow_exception(error_);
  }
  void mark_done() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    done_signal_.notify_all();
  }

  mutable std::mutex mutex_;
  mutable std::condition_variable done_signal_;
  bool done_ = false;
  std::exception_ptr error_;
};

template <typename T>
class FutureState final : public FutureStateBase {
 public:
  void complete(FutureValue<T> value) {
    value_.emplace(std::move(value));  // before done_ is set: no reader looks at it until then
    mark_done();
  }
  const FutureValue<T>& value() const {
    wait_until_done();
    rethrow_if_failed();
    return *value_;
  }

 private:
  std::optional<FutureValue<T>> value_;
};

}  // namespace detail

template <typename T>
class Future {
 public:
  Future() = default;
  explicit Future(std::shared_ptr<detail::FutureState<T>> state) : state_(std::move(state)) {}

  // False for a default-constructed future (no work behind it).
  bool valid() const { return state_ != nullptr; }
  // True once the work has finished, with a result or an exception (never blocks).
  bool ready() const { return check_valid().ready(); }
  // Blocks until the work has finished; returns a copy of its result or rethrows its exception.
  T wait() const {
    if constexpr (std::is_void_v<T>) {
      check_valid().value();
    } else {
      return check_valid().value();
    }
  }

 private:
  const detail::FutureState<T>& check_valid() const {
    KILN_CHECK(state_ != nullptr, invalid_argument,
               "this future has no work behind it (default-constructed)");
    return *state_;
  }

  std::shared_ptr<detail::FutureState<T>> state_;
};

}  // namespace kiln
