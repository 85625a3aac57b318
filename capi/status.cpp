// Statuses, strings, version and element types.
#include <cstdlib>
#include <cstring>

#include "capi/handles.h"
#include "core/dtype.h"
#include "core/version.h"

namespace kiln::capi {
namespace {

// Returned when a status cannot be allocated; kiln_status_free leaves it alone.
kiln_status out_of_memory_status{KILN_OUT_OF_MEMORY, ""};

}  // namespace

kiln_status_code status_code_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_argument: return KILN_INVALID_ARGUMENT;
    case ErrorKind::type_mismatch: return KILN_TYPE_MISMATCH;
    case ErrorKind::not_implemented: return KILN_NOT_IMPLEMENTED;
    case ErrorKind::invalid_model: return KILN_INVALID_MODEL;
    case ErrorKind::runtime: return KILN_RUNTIME_ERROR;
    case ErrorKind::cancelled: return KILN_CANCELLED;
    case ErrorKind::deadline_exceeded: return KILN_DEADLINE_EXCEEDED;
  }
  return KILN_RUNTIME_ERROR;
}

kiln_status* make_status(kiln_status_code code, std::string message) noexcept {
  try {
    return new kiln_status{code, std::move(message)};
  } catch (...) {
    return &out_of_memory_status;
  }
}

// The C enum spells kiln's DType in the same order; the casts below rely on it.
static_assert(static_cast<int>(DType::f32) == KILN_DTYPE_FLOAT32 &&
              static_cast<int>(DType::f16) == KILN_DTYPE_FLOAT16 &&
              static_cast<int>(DType::i64) == KILN_DTYPE_INT64 && static_cast<int>(DType::u8) == KILN_DTYPE_UINT8 &&
              static_cast<int>(DType::boolean) == KILN_DTYPE_BOOL);

DType dtype_from_c(kiln_dtype dtype) {
  KILN_CHECK(dtype > KILN_DTYPE_UNDEFINED && dtype <= KILN_DTYPE_BOOL, invalid_argument, "dtype ",
             static_cast<int>(dtype), " is not a kiln_dtype (expected 1 to ", static_cast<int>(KILN_DTYPE_BOOL), ")");
  return static_cast<DType>(dtype);
}

kiln_dtype dtype_to_c(DType dtype) { return static_cast<kiln_dtype>(dtype); }

}  // namespace kiln::capi

using namespace kiln;

extern "C" {

kiln_status_code kiln_status_get_code(const kiln_status* status) { return status ? status->code : KILN_OK; }

const char* kiln_status_get_message(const kiln_status* status) {
  if (status == nullptr) return "";
  return status->message.empty() && status->code == KILN_OUT_OF_MEMORY ? "out of memory" : status->message.c_str();
}

const char* kiln_status_code_name(kiln_status_code code) {
  switch (code) {
    case KILN_OK: return "ok";
    case KILN_INVALID_ARGUMENT: return "invalid argument";
    case KILN_TYPE_MISMATCH: return "type mismatch";
    case KILN_NOT_IMPLEMENTED: return "not implemented";
    case KILN_INVALID_MODEL: return "invalid model";
    case KILN_RUNTIME_ERROR: return "runtime error";
    case KILN_CANCELLED: return "cancelled";
    case KILN_DEADLINE_EXCEEDED: return "deadline exceeded";
    case KILN_OUT_OF_MEMORY: return "out of memory";
    case KILN_STATUS_CODE_MAX_ENUM: break;
  }
  return "unknown status code";
}

void kiln_status_free(kiln_status* status) {
  if (status != &capi::out_of_memory_status) delete status;
}

void kiln_string_free(char* text) { std::free(text); }

const char* kiln_version(void) { return KILN_VERSION_STRING; }

const char* kiln_build_info(void) {
  // The build configuration is a string literal (core/version.cpp.in), so its data is static.
  return build_configuration().data();
}

const char* kiln_dtype_name(kiln_dtype dtype) {
  if (dtype < KILN_DTYPE_UNDEFINED || dtype > KILN_DTYPE_BOOL) return "unknown";
  return dtype_name(static_cast<DType>(dtype)).data();
}

size_t kiln_dtype_size(kiln_dtype dtype) {
  if (dtype < KILN_DTYPE_UNDEFINED || dtype > KILN_DTYPE_BOOL) return 0;
  return kiln::dtype_size(static_cast<DType>(dtype));
}

}  // extern "C"
