// What the C API's opaque handles hold, and the guard that turns every C++ exception into a status:
// nothing thrown inside kiln crosses into C.
#pragma once

#include <memory>
#include <new>
#include <string>
#include <vector>

#include "backends/settings.h"
#include "core/error.h"
#include "graph/session.h"
#include "kiln/kiln_c.h"
#include "runtime/run_control.h"

struct kiln_status {
  kiln_status_code code;
  std::string message;
};

struct kiln_tensor {
  kiln::Tensor tensor;
};

struct kiln_settings {
  kiln::Settings settings;
};

struct kiln_run_options {
  // Shared with runs in flight, which may outlive the handle.
  std::shared_ptr<kiln::RunControl> control = std::make_shared<kiln::RunControl>();
};

struct kiln_session {
  // Shared with runs in flight, which may outlive the handle.
  std::shared_ptr<kiln::Session> session;
  // Per graph input and output, its dims as the C API hands them out (-1 symbolic): owned here.
  std::vector<std::vector<int64_t>> input_dims;
  std::vector<std::vector<int64_t>> output_dims;
};

namespace kiln::capi {

kiln_status_code status_code_of(ErrorKind kind);
// A new status; the preallocated out-of-memory status when even that cannot be allocated.
kiln_status* make_status(kiln_status_code code, std::string message) noexcept;

// Runs fn(); returns NULL, or the status of whatever it threw.
template <typename Fn>
kiln_status* guarded(Fn&& fn) noexcept {
  try {
    fn();
    return nullptr;
  } catch (const Error& error) {
    return make_status(status_code_of(error.kind()), error.what());
  } catch (const std::bad_alloc&) {
    return make_status(KILN_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& error) {
    return make_status(KILN_RUNTIME_ERROR, error.what());
  } catch (...) {
    return make_status(KILN_RUNTIME_ERROR, "unknown exception");
  }
}

// `pointer`; throws invalid_argument naming `what` when it is null.
template <typename T>
T* required(T* pointer, const char* what) {
  KILN_CHECK(pointer != nullptr, invalid_argument, what, " is NULL");
  return pointer;
}

DType dtype_from_c(kiln_dtype dtype);  // throws on values outside the enum
kiln_dtype dtype_to_c(DType dtype);

// A copy of `text` the caller frees with kiln_string_free.
char* new_c_string(const std::string& text);

// A new handle owning `tensor` (made contiguous first if it is not).
kiln_tensor* new_tensor_handle(Tensor tensor);

}  // namespace kiln::capi
